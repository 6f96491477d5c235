"""
C{python -m kafkatwist.tools}: see L{kafkatwist.tools}.
"""

from __future__ import annotations

import argparse
import os
import sys

from kafkatwist.tools import __doc__ as OVERVIEW


def main(argv=None, out=None) -> int:
    out = out or sys.stdout
    parser = argparse.ArgumentParser(
        prog="python -m kafkatwist.tools",
        description=OVERVIEW.strip().split("\n\n")[0].replace("C{", "").replace("}", ""),
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    dump = commands.add_parser(
        "dump-log", help="print .log, .index, .timeindex, .snapshot and .txnindex files",
        description="Print segment files as kafka-dump-log.sh does; an index is checked "
                    "against the .log beside it.",
    )
    dump.add_argument("files", nargs="*", metavar="FILE")
    dump.add_argument("--files", dest="fileList", default="",
                      help="comma-separated files (kafka-dump-log.sh's spelling)")
    dump.add_argument("--deep-iteration", "--deep", dest="deep", action="store_true",
                      help="print every record, not only batches")
    dump.add_argument("--print-data-log", dest="printData", action="store_true",
                      help="print record keys and values (implies --deep-iteration)")
    dump.add_argument("--verify-index-only", dest="verifyOnly", action="store_true",
                      help="check index entries against the log without printing them")
    dump.add_argument("--index-sanity-check", dest="sanity", action="store_true",
                      help="only say whether the broker would use the index as it is")

    check = commands.add_parser(
        "check-data-dir", help="check a data directory without starting the broker",
        description="Read every segment, index, snapshot and checkpoint; report what is "
                    "damaged. Read-only; exit status 1 when something is wrong.",
    )
    check.add_argument("directories", nargs="+", metavar="DIR")

    describe = commands.add_parser(
        "describe-config", help="print the effective configuration",
        description="Every configuration key with the value a broker started with these "
                    "options would use, and where it comes from.",
    )
    describe.add_argument("--config", "-c", help="a Kafka-style properties file")
    describe.add_argument("--override", "-o", action="append", default=[], metavar="KEY=VALUE")

    args = parser.parse_args(argv)
    if args.command == "dump-log":
        from kafkatwist.tools.dumplog import dumpFile

        files = args.files + [f for f in args.fileList.split(",") if f]
        if not files:
            parser.error("dump-log needs at least one FILE")
        problems = 0
        for path in files:
            if not os.path.isfile(path):
                sys.stderr.write(f"kafkatwist.tools: {path}: no such file\n")
                return 2
            problems += dumpFile(path, out, deep=args.deep, printData=args.printData,
                                 verifyOnly=args.verifyOnly, sanity=args.sanity)
        return 1 if problems else 0
    if args.command == "check-data-dir":
        from kafkatwist.tools.datadir import checkDataDir

        problems = 0
        for directory in args.directories:
            if not os.path.isdir(directory):
                sys.stderr.write(f"kafkatwist.tools: {directory}: not a directory\n")
                return 2
            problems += checkDataDir(directory, out)
        return 1 if problems else 0
    from kafkatwist.config import ConfigError, loadConfig
    from kafkatwist.tools.describeconfig import describeConfig

    overrides = []
    for item in args.override:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            parser.error(f"--override wants key=value, not {item!r}")
        overrides.append((key.strip(), value))
    try:
        config = loadConfig(args.config, overrides,
                            warn=lambda message: sys.stderr.write(f"kafkatwist: {message}\n"))
    except ConfigError as e:
        sys.stderr.write(f"kafkatwist: {e}\n")
        return 2
    describeConfig(config, out)
    return 0


def run() -> int:
    try:
        return main()
    except BrokenPipeError:
        # `... | head`: the reader has what it wanted.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(run())
