"""
Small files replaced whole (checkpoints, topic metadata, producer
snapshots, C{meta.properties}): written to C{<name>.tmp}, fsynced, renamed
over the old one, and the directory fsynced, so a crash leaves either the
old or the new content, never a torn mix.
"""

from __future__ import annotations

import os

__all__ = ["replaceFile", "syncDirectory"]

TEMPORARY_SUFFIX = ".tmp"


def replaceFile(path: str, data: bytes, *, sync: bool = True, mode: int = 0o644) -> None:
    """
    Replace C{path} with C{data} atomically.

    @param sync: fsync the data and the directory (durable once this
        returns); without it the replacement is still atomic but may be
        lost in a crash.
    @param mode: permissions of a new file (0o600 for secrets).
    @raise OSError: nothing was replaced (the temporary file is removed).
    """
    temporary = path + TEMPORARY_SUFFIX
    try:
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temporary, path)
    except OSError:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        raise
    if sync:
        syncDirectory(os.path.dirname(path))


def syncDirectory(directory: str) -> None:
    """
    fsync C{directory}, making the names created or renamed in it durable.
    """
    fd = os.open(directory or ".", os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
