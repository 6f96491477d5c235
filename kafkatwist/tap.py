"""
C{twistd kafkatwist}: options and service construction.

    twistd -n kafkatwist --config server.properties --override listeners=PLAINTEXT://127.0.0.1:9092
"""

from __future__ import annotations

import signal
import sys

from twisted.python import usage

from kafkatwist.config import ConfigError, loadConfig
from kafkatwist.server.registry import PluginConflict
from kafkatwist.util.startup import StartupError


class Options(usage.Options):
    synopsis = "[--config server.properties] [--override key=value ...]"
    longdesc = (
        "A broker that speaks the Apache Kafka protocol. Settings use Kafka's property "
        "names; --override wins over the file. With no options: PLAINTEXT on "
        "127.0.0.1:9092, data under ./data."
    )
    optParameters = [["config", "c", None, "A Kafka-style properties file."]]
    optFlags = [["describe-config", None, "Print the effective configuration and exit."]]

    def __init__(self) -> None:
        super().__init__()
        self["overrides"] = []

    def opt_override(self, value: str) -> None:
        """
        Set one property, key=value (repeatable; wins over --config).
        """
        key, sep, rest = value.partition("=")
        if not sep or not key.strip():
            raise usage.UsageError(f"--override wants key=value, not {value!r}")
        self["overrides"].append((key.strip(), rest))

    opt_o = opt_override

    def parseOptions(self, options=None) -> None:
        # twistd prints its whole usage text before an argument error: one
        # line says it better.
        try:
            super().parseOptions(options)
        except usage.UsageError as e:
            sys.stderr.write(f"kafkatwist: {e} (kafkatwist --help lists the options)\n")
            raise SystemExit(2)


def honourSigint() -> None:
    """
    Started in the background by a shell or a service manager, a process
    inherits SIGINT ignored, and Twisted leaves an ignored SIGINT alone: the
    broker would not stop on Ctrl-C or C{kill -INT}.  Restore the default so
    the reactor installs its handler.
    """
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


_levelFilter = None


def filterLogLevels(config) -> None:
    """
    Lines below C{logger.level} are not written (twistd writes every
    level); C{request.logging.enable} lets the request log's debug lines
    through.  The filter wraps the observers twistd starts logging to once
    this returns (events logged meanwhile are buffered and go through it).
    """
    global _levelFilter
    from twisted.logger import LogLevel, LogLevelFilterPredicate, globalLogBeginner

    predicate = LogLevelFilterPredicate(defaultLogLevel=LogLevel.levelWithName(config["logger.level"]))
    if config["request.logging.enable"]:
        predicate.setLogLevelForNamespace("kafkatwist.network.processor", LogLevel.debug)
    if _levelFilter is None:
        from twisted.logger import FilteringLogObserver

        begin = globalLogBeginner.beginLoggingTo

        def beginLoggingTo(observers, *args, **kwargs):
            return begin([FilteringLogObserver(o, [_levelFilter]) for o in observers], *args, **kwargs)

        globalLogBeginner.beginLoggingTo = beginLoggingTo
    _levelFilter = predicate


def makeService(options):
    from twisted.internet import reactor

    from kafkatwist.service import BrokerService

    try:
        # Logging starts after this returns; --describe-config exits first.
        warn = (lambda message: sys.stderr.write(f"kafkatwist: {message}\n")) if options["describe-config"] else None
        config = loadConfig(options["config"], options["overrides"], warn=warn)
        if options["describe-config"]:
            from kafkatwist.tools.describeconfig import describeConfig

            try:
                describeConfig(config, sys.stdout)
                sys.stdout.flush()
            except BrokenPipeError:
                pass  # `| head` had enough
            raise SystemExit(0)
        filterLogLevels(config)
        service = BrokerService(config, reactor)
        service.prepare()
        honourSigint()
    except (ConfigError, PluginConflict) as e:
        sys.stderr.write(f"kafkatwist: {e}\n")
        raise SystemExit(2)
    except StartupError as e:
        sys.stderr.write(f"kafkatwist: cannot start: {e}\n")
        raise SystemExit(2)
    except OSError as e:
        sys.stderr.write(f"kafkatwist: cannot start: {e}\n")
        raise SystemExit(2)
    return service


def main() -> None:
    """
    The C{kafkatwist} command: C{twistd -n --pidfile= kafkatwist} with the
    arguments given (in the foreground, no pid file).
    """
    from twisted.scripts.twistd import run

    sys.argv = ["twistd", "-n", "--pidfile=", "kafkatwist", *sys.argv[1:]]
    run()
