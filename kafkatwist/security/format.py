"""
Prepare a data directory before the first start, with the first SCRAM users
in it, as Kafka's C{kafka-storage format --add-scram} does::

    python -m kafkatwist.security.format --config server.properties \\
        --add-scram 'SCRAM-SHA-256=[name=admin,password=admin-secret]'

(installed as C{kafkatwist-storage format ...}).

It writes C{meta.properties} (the cluster id) and the users' credentials --
salt, StoredKey, ServerKey, iterations; never the password -- into the first
directory of C{log.dirs}.  A directory already formatted is refused unless
C{--ignore-formatted} is given, in which case it is left alone, as Kafka
does; later users are added with AlterUserScramCredentials (e.g.
C{kafka-configs.sh --alter --add-config 'SCRAM-SHA-256=[password=...]'
--entity-type users --entity-name alice}).

The C{--add-scram} argument is Kafka's: C{MECHANISM=[name=...,password=...]},
optionally C{iterations=N} (4096 by default) and C{salt=<base64>}, or
C{salt=<base64>,saltedpassword=<base64>} instead of the password.  Values
may be double-quoted; they cannot contain commas.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import os
import sys

from kafkatwist.log.meta import META_PROPERTIES, loadOrCreateClusterId
from kafkatwist.config import ConfigError, loadConfig
from kafkatwist.security.credentials import CredentialStore
from kafkatwist.security.scram import (
    MECHANISMS,
    SALT_BYTES,
    ScramCredential,
    credentialFromSaltedPassword,
    saltedPassword,
)

__all__ = ["FormatError", "main", "parseScram"]


class FormatError(ValueError):
    """
    A bad argument or a directory that cannot be formatted.
    """


def _component(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep:
        raise FormatError(f"No equals sign found in SCRAM component: {text}")
    if len(value) >= 2 and value.startswith('"') and value.endswith('"'):
        value = value[1:-1]
    return key, value


def _b64(what: str, value: str) -> bytes:
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise FormatError(f"Failed to decode given {what}: {value}") from None


def parseScram(argument: str, randomBytes=os.urandom) -> tuple[str, str, ScramCredential]:
    """
    Kafka's C{ScramParser}: C{SCRAM-SHA-256=[name=alice,password=secret]}.

    @return: (user, mechanism name, credential).
    @raise FormatError: with Kafka's message.
    """
    argument = argument.strip()
    mechanismName, sep, config = argument.partition("=")
    if not sep:
        raise FormatError(f"Failed to find equals sign in SCRAM argument '{argument}'")
    mechanism = MECHANISMS.get(mechanismName)
    if mechanism is None:
        raise FormatError(f"The add-scram mechanism {mechanismName} is not supported.")
    if not config.startswith("["):
        raise FormatError("Expected configuration string to start with [")
    if not config.endswith("]"):
        raise FormatError("Expected configuration string to end with ]")
    components = dict(_component(part) for part in config[1:-1].split(","))
    name = components.pop("name", None)
    if name is None:
        raise FormatError("You must supply 'name' to add-scram")
    salt = _b64("salt", components.pop("salt")) if "salt" in components else None
    iterationsText = components.pop("iterations", None)
    try:
        iterations = int(iterationsText) if iterationsText is not None else 4096
    except ValueError:
        raise FormatError(f"Failed to parse iterations count: {iterationsText}") from None
    password = components.pop("password", None)
    salted = components.pop("saltedpassword", None)
    if password is None:
        if salted is None:
            raise FormatError("You must supply one of 'password' or 'saltedpassword' to add-scram")
        if salt is None:
            raise FormatError("You must supply 'salt' with 'saltedpassword' to add-scram")
        salted = _b64("saltedPassword", salted)
    if components:
        raise FormatError(f"Unknown SCRAM configurations: {', '.join(sorted(components))}")
    if iterations < mechanism.minIterations:
        raise FormatError(
            f"The 'iterations' value must be >= {mechanism.minIterations} for add-scram using {mechanism.name}"
        )
    if iterations > mechanism.maxIterations:
        raise FormatError(
            f"The 'iterations' value must be <= {mechanism.maxIterations} for add-scram using {mechanism.name}"
        )
    if salt is None:
        salt = randomBytes(SALT_BYTES)
    if salted is None:
        salted = saltedPassword(mechanism, password, salt, iterations)
    return name, mechanism.name, credentialFromSaltedPassword(mechanism, salted, salt, iterations)


def formatDirectory(directory: str, nodeId: int, clusterId: str | None, scram: list[str],
                    ignoreFormatted: bool = False) -> str:
    """
    @return: what was done, for the operator.
    @raise FormatError: already formatted (without C{ignoreFormatted}), or a
        bad C{--add-scram}.
    """
    credentials = [parseScram(argument) for argument in scram]
    if os.path.exists(os.path.join(directory, META_PROPERTIES)):
        if ignoreFormatted:
            return f"All of the log directories are already formatted: {directory} left as it is."
        raise FormatError(
            f"Log directory {directory} is already formatted. Use --ignore-formatted to ignore "
            "this directory and format the others."
        )
    os.makedirs(directory, exist_ok=True)
    # meta.properties first (on a directory that holds data it refuses, as
    # the broker does); if the users then cannot be written, it is taken
    # back, so the directory does not count as formatted without them.
    clusterId = loadOrCreateClusterId(directory, nodeId, clusterId)
    if credentials:
        try:
            CredentialStore.inDirectory(directory).alter(credentials)
        except BaseException:
            os.unlink(os.path.join(directory, META_PROPERTIES))
            raise
    users = ", ".join(f"{user} ({mechanism})" for user, mechanism, _ in credentials) or "none"
    return f"Formatted {directory} for cluster {clusterId} with SCRAM users: {users}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="kafkatwist-storage",
        description="Prepare the data directory before the first start (Kafka's kafka-storage).",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    formatCommand = commands.add_parser("format", help="Write meta.properties and the first SCRAM users.")
    formatCommand.add_argument("-c", "--config", help="The server.properties file.")
    formatCommand.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                               help="A setting on top of the file, as kafkatwist --override.")
    formatCommand.add_argument("-t", "--cluster-id", help="The cluster id (default: cluster.id, or a new one).")
    formatCommand.add_argument("-S", "--add-scram", action="append", default=[], metavar="MECHANISM=[...]",
                               help="A SCRAM credential, e.g. 'SCRAM-SHA-256=[name=alice,password=secret]'.")
    formatCommand.add_argument("-g", "--ignore-formatted", action="store_true",
                               help="Leave a directory that is already formatted as it is.")
    args = parser.parse_args(argv)
    try:
        overrides = []
        for item in args.override:
            key, sep, value = item.partition("=")
            if not sep:
                raise FormatError(f"--override wants key=value, not {item!r}")
            overrides.append((key.strip(), value))
        config = loadConfig(args.config, overrides, warn=lambda message: None)
        message = formatDirectory(
            config.logDirs[0],
            config.nodeId,
            args.cluster_id or config["cluster.id"],
            args.add_scram,
            args.ignore_formatted,
        )
    except (FormatError, ConfigError, OSError) as e:
        sys.stderr.write(f"kafkatwist-storage: {e}\n")
        return 1
    sys.stdout.write(message + "\n")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
