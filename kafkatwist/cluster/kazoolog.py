"""
kazoo logs through the standard library's C{logging}; without a handler,
Python's last-resort handler writes its warnings to stderr, which twistd
then logs as "[stderr#error]", out of the broker's format and level.
L{routeKazooLogging} hands kazoo's records to the broker's Twisted
logger: one line each, under kazoo's own logger name, at the same level.
"""

from __future__ import annotations

import logging

from twisted.logger import Logger, LogLevel

_LEVELS = (
    (logging.CRITICAL, LogLevel.critical),
    (logging.ERROR, LogLevel.error),
    (logging.WARNING, LogLevel.warn),
    (logging.INFO, LogLevel.info),
)


class TwistedLogHandler(logging.Handler):
    """
    A C{logging} handler that emits each record as one Twisted log event
    (an exception it carries is named on the same line, without its
    traceback).
    """

    def __init__(self) -> None:
        super().__init__()
        self._loggers: dict[str, Logger] = {}

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 -- a bad format string is still a line
            message = str(record.msg)
        if record.exc_info and record.exc_info[1] is not None:
            error = record.exc_info[1]
            message = f"{message}: {type(error).__name__}: {error}"
        message = " ".join(message.split())
        level = next((twisted for stdlib, twisted in _LEVELS if record.levelno >= stdlib), LogLevel.debug)
        logger = self._loggers.get(record.name)
        if logger is None:
            logger = self._loggers[record.name] = Logger(namespace=record.name)
        logger.emit(level, "{message}", message=message)


def routeKazooLogging(level: int = logging.WARNING) -> None:
    """
    Send kazoo's log records (C{level} and above, warnings by default: what
    reached stderr before) to the Twisted logger.  Idempotent.
    """
    kazoo = logging.getLogger("kazoo")
    if not any(isinstance(h, TwistedLogHandler) for h in kazoo.handlers):
        kazoo.addHandler(TwistedLogHandler())
    kazoo.setLevel(level)
    kazoo.propagate = False
