"""
Refusing to start on damaged files.
"""

from __future__ import annotations

__all__ = ["StorageError"]


class StorageError(OSError):
    """
    A file the broker will not start with: damaged beyond what it can repair
    without losing or inventing state (a cluster id, a topic's id and
    configs).  The message is one line naming the file and what to do; the
    daemon prints it and stops, as for any C{OSError} at start-up.
    """

    def __init__(self, path: str, problem: str, remedy: str) -> None:
        self.path = path
        super().__init__(f"{path}: {problem}; {remedy}")

    def __str__(self) -> str:
        return self.args[0]
