"""
Rate limits for log lines that a misbehaving client can repeat at will.

A client refused during the TLS handshake reconnects at once, forever: each
attempt logged an "opened" and a "closed" line, ~310 lines in 8 seconds.
L{LogThrottle} lets the first few lines of a kind from one client address
through in each interval, counts the rest, and says so on the lines it does
show, so nothing is dropped without a trace.  Safe from any thread.
"""

from __future__ import annotations

import threading
import time
from typing import Callable, Hashable

#: lines of one kind from one address shown per interval
BURST = 5
#: seconds
INTERVAL = 10.0
#: keys remembered before expired ones are forgotten
MAX_KEYS = 4096


class _Window:
    __slots__ = ("started", "shown", "suppressed")

    def __init__(self, started: float) -> None:
        self.started = started
        self.shown = 0
        self.suppressed = 0


class LogThrottle:
    def __init__(self, burst: int = BURST, interval: float = INTERVAL,
                 clock: Callable[[], float] = time.monotonic, maxKeys: int = MAX_KEYS) -> None:
        self.burst = burst
        self.interval = interval
        self.clock = clock
        self.maxKeys = maxKeys
        self._windows: dict[Hashable, _Window] = {}
        self._lock = threading.Lock()

    def check(self, key: Hashable) -> tuple[bool, int, bool]:
        """
        @return: (show this line, lines suppressed in the previous interval,
            this is the last line shown in this interval).
        """
        now = self.clock()
        with self._lock:
            window = self._windows.get(key)
            carried = 0
            if window is None or now - window.started >= self.interval:
                if window is not None:
                    carried = window.suppressed
                elif len(self._windows) >= self.maxKeys:
                    self._forgetExpired(now)
                window = self._windows[key] = _Window(now)
            if window.shown >= self.burst:
                window.suppressed += 1
                return False, 0, False
            window.shown += 1
            return True, carried, window.shown == self.burst

    def _forgetExpired(self, now: float) -> None:
        for key in [k for k, w in self._windows.items() if now - w.started >= self.interval]:
            del self._windows[key]

    def emit(self, logMethod, key: Hashable, fmt: str, **fields) -> None:
        """
        C{logMethod(fmt, **fields)} unless C{key} is over its limit, with a
        note when earlier lines were suppressed or later ones will be.

        @param key: what counts as the same line, e.g. C{("closed", host)}.
        """
        show, suppressed, last = self.check(key)
        if not show:
            return
        if suppressed:
            fmt += " ({throttleSuppressed} more like this were not logged)"
            fields["throttleSuppressed"] = suppressed
        if last:
            fmt += " (more like this in the next {throttleInterval:.0f} s are not logged)"
            fields["throttleInterval"] = self.interval
        logMethod(fmt, **fields)


#: connection open, close and refusal lines, keyed by kind, client host and
#: reason: a different reason is news, the same one again is a flood
connectionLogs = LogThrottle()
