"""
Waiting on a condition: the one definition the tests and the harness use.
"""

from __future__ import annotations

import time

__all__ = ["waitUntil"]


def waitUntil(predicate, timeout: float = 60.0, what: str = "condition", interval: float = 0.05,
              describe=None):
    """
    Poll C{predicate} until it returns something true, and return that.

    The bound is for a hang, not a measure: the wait ends as soon as the
    condition holds, and a loaded machine needs the margin.  An exception
    from the predicate (a request timing out while a broker is down or the
    machine busy) counts as "not yet"; if the time runs out, the last one
    is chained to the failure, so nothing is hidden.

    @param describe: called once the time has run out; what it returns is
        added to the failure message (what the cluster looked like).
    """
    deadline = time.monotonic() + timeout
    last = None
    while True:
        try:
            value = predicate()
        except Exception as e:  # noqa: BLE001 -- reported below if it lasts
            value, last = None, e
        if value:
            return value
        if time.monotonic() >= deadline:
            message = f"timed out after {timeout} s waiting for {what}"
            if last is not None:
                message += f" (last error: {last!r})"
            if describe is not None:
                try:
                    message += f"\n{describe()}"
                except Exception as e:  # noqa: BLE001
                    message += f"\n(describing it failed: {e!r})"
            raise AssertionError(message) from last
        time.sleep(interval)
