"""
Kafka's .lock per data directory, held from before anything is written.
"""

import os

import pytest

from kafkatwist.util.dirlock import DataDirInUse, DataDirLock


def test_a_second_lock_on_the_same_directory_is_refused(tmp_path):
    first = DataDirLock([str(tmp_path / "a"), str(tmp_path / "b")])
    first.acquire()
    assert sorted(os.listdir(tmp_path / "a")) == [".lock"]
    assert (tmp_path / "a" / ".lock").read_text() == f"{os.getpid()}\n"
    second = DataDirLock([str(tmp_path / "c"), str(tmp_path / "b")])
    with pytest.raises(DataDirInUse) as refused:
        second.acquire()
    assert str(refused.value) == (
        f"data directory {tmp_path / 'b'} is in use by another broker (pid {os.getpid()} holds its .lock)"
    )
    # All or nothing: "c" was locked and is released again.
    third = DataDirLock([str(tmp_path / "c")])
    third.acquire()
    third.release()
    first.release()
    second.acquire()
    second.release()


def test_check_after_hand_over(tmp_path):
    lock = DataDirLock([str(tmp_path)])
    lock.acquire()
    lock.handOver()
    lock.check()
    other = DataDirLock([str(tmp_path)])
    other.acquire()
    with pytest.raises(DataDirInUse):
        lock.check()
    other.release()
