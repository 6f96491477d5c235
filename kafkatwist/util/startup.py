"""
Start-up failures an operator meets: each becomes one line naming the thing
that is wrong (the listener and port, the metrics address, the data
directory), never a traceback.
"""

from __future__ import annotations

import errno
import os


class StartupError(Exception):
    """
    The broker cannot start; the message is the whole story.
    """


def describeOSError(error: BaseException) -> str:
    """
    C{"Address already in use"} rather than C{"[Errno 98] Address already
    in use"} or Twisted's C{"Couldn't listen on ...: [Errno 98] ..."}.
    """
    code = getattr(error, "errno", None)
    if code is None and error.args and isinstance(error.args[-1], OSError):
        code = error.args[-1].errno
    if isinstance(code, int) and code in errno.errorcode:
        return os.strerror(code)
    return str(error)


def cannotListen(address: str, setting: str, error: BaseException) -> StartupError:
    """
    @param address: what could not be bound, e.g. C{PLAINTEXT://127.0.0.1:9092}.
    @param setting: the configuration key it comes from.
    """
    return StartupError(f"cannot listen on {address} ({setting}): {describeOSError(error)}")
