"""
Storage trouble is logged as one line per problem, not one per attempt: a
full disk makes every periodic checkpoint fail, a damaged segment every
fetch that reaches it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable

from twisted.logger import Logger

__all__ = ["LogThrottle", "storageLog"]


class LogThrottle:
    """
    At most one line per key per C{intervalSeconds}; the next line says how
    many were suppressed.  Safe from any thread.
    """

    def __init__(
        self,
        logger: Logger,
        intervalSeconds: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.logger = logger
        self.intervalSeconds = intervalSeconds
        self.clock = clock
        self._lock = threading.Lock()
        self._last: dict[Hashable, float] = {}
        self._suppressed: dict[Hashable, int] = {}

    def _due(self, key: Hashable) -> tuple[bool, int]:
        now = self.clock()
        with self._lock:
            last = self._last.get(key)
            if last is not None and now - last < self.intervalSeconds:
                self._suppressed[key] = self._suppressed.get(key, 0) + 1
                return False, 0
            self._last[key] = now
            return True, self._suppressed.pop(key, 0)

    def warn(self, key: Hashable, format: str, **kw) -> bool:
        """
        @return: whether the line was logged.
        """
        return self._emit(self.logger.warn, key, format, kw)

    def error(self, key: Hashable, format: str, **kw) -> bool:
        return self._emit(self.logger.error, key, format, kw)

    def once(self, key: Hashable, format: str, **kw) -> bool:
        """
        An error logged the first time only (until L{clear}).
        """
        with self._lock:
            if key in self._last:
                return False
            self._last[key] = float("inf")
        self.logger.error(format, **kw)
        return True

    def clear(self, key: Hashable) -> bool:
        """
        The problem C{key} is over.

        @return: whether it had been logged (so the caller may say it is
            over).
        """
        with self._lock:
            self._suppressed.pop(key, None)
            return self._last.pop(key, None) is not None

    def reset(self) -> None:
        """
        Forget every problem (tests).
        """
        with self._lock:
            self._last.clear()
            self._suppressed.clear()

    def _emit(self, method, key: Hashable, format: str, kw: dict) -> bool:
        due, suppressed = self._due(key)
        if not due:
            return False
        if suppressed:
            format += " ({suppressed} more like this since the last report)"
            kw["suppressed"] = suppressed
        method(format, **kw)
        return True


#: the log package's throttle
storageLog = LogThrottle(Logger(namespace="kafkatwist.log"))
