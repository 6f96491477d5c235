"""
systemd's readiness protocol (C{sd_notify}), without libsystemd.

Under C{Type=notify} systemd passes a datagram socket in C{NOTIFY_SOCKET};
the service says C{READY=1} once it serves (here: listeners bound, log
recovered, reactor running), C{STOPPING=1} when it begins to shut down, and
C{WATCHDOG=1} at least every C{WATCHDOG_USEC} if the unit sets
C{WatchdogSec=}.  Without C{NOTIFY_SOCKET} every call does nothing.
"""

from __future__ import annotations

import os
import socket


class Notifier:
    """
    @param environ: where C{NOTIFY_SOCKET}, C{WATCHDOG_USEC} and
        C{WATCHDOG_PID} are read (the process environment by default).
    """

    def __init__(self, environ=None) -> None:
        environ = os.environ if environ is None else environ
        address = environ.get("NOTIFY_SOCKET") or None
        if address is not None and address.startswith("@"):
            # An abstract socket: its name starts with a NUL byte.
            address = "\0" + address[1:]
        self.address = address
        self.watchdogSeconds = None
        usec = environ.get("WATCHDOG_USEC", "")
        pid = environ.get("WATCHDOG_PID", "")
        if address and usec.isdigit() and int(usec) > 0 and (not pid or pid == str(os.getpid())):
            self.watchdogSeconds = int(usec) / 1_000_000

    @property
    def enabled(self) -> bool:
        return self.address is not None

    def notify(self, *fields: str) -> bool:
        """
        Send C{KEY=value} lines as one datagram.

        @return: whether it was sent (a service manager that went away is
            not the broker's problem).
        """
        if self.address is None:
            return False
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
                sock.sendto("\n".join(fields).encode("utf-8"), self.address)
        except OSError:
            return False
        return True

    def ready(self, status: str) -> bool:
        return self.notify("READY=1", f"STATUS={status}", f"MAINPID={os.getpid()}")

    def stopping(self) -> bool:
        return self.notify("STOPPING=1", "STATUS=stopping")

    def watchdog(self) -> bool:
        return self.notify("WATCHDOG=1")
