"""
sd_notify over NOTIFY_SOCKET, against a datagram socket standing in for systemd.
"""

import os
import socket

from kafkatwist.server.sdnotify import Notifier


def listener(address):
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(address)
    sock.settimeout(5)
    return sock


def test_ready_and_stopping(tmp_path):
    path = str(tmp_path / "notify")
    with listener(path) as sock:
        notifier = Notifier({"NOTIFY_SOCKET": path})
        assert notifier.enabled and notifier.watchdogSeconds is None
        assert notifier.ready("serving")
        assert sock.recv(4096).decode().split("\n") == ["READY=1", "STATUS=serving", f"MAINPID={os.getpid()}"]
        assert notifier.stopping()
        assert sock.recv(4096) == b"STOPPING=1\nSTATUS=stopping"


def test_abstract_socket():
    name = f"kafkatwist-test-{os.getpid()}"
    with listener("\0" + name) as sock:
        assert Notifier({"NOTIFY_SOCKET": "@" + name}).watchdog()
        assert sock.recv(4096) == b"WATCHDOG=1"


def test_without_systemd_nothing_happens(tmp_path):
    assert not Notifier({}).enabled
    assert not Notifier({}).ready("x")
    # A manager that went away is not an error.
    assert not Notifier({"NOTIFY_SOCKET": str(tmp_path / "gone")}).ready("x")


def test_watchdog_interval_for_this_process_only(tmp_path):
    path = str(tmp_path / "n")
    assert Notifier({"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "3000000"}).watchdogSeconds == 3.0
    assert Notifier({"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "3000000",
                     "WATCHDOG_PID": str(os.getpid())}).watchdogSeconds == 3.0
    assert Notifier({"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "3000000",
                     "WATCHDOG_PID": "1"}).watchdogSeconds is None
