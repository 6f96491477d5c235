"""
A Spark task's read freezes its Python worker's heap once (gc.freeze), so
that the full collection PySpark's daemon runs after every task of a
reused worker does not walk PySpark's, pyarrow's and the connector's
module objects again each time.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# In a process of its own: freezing the test process's heap would outlive
# the test.
SCRIPT = """
import gc
from kafkatwist_spark.offsets import OffsetRange
from kafkatwist_spark.options import parseSourceOptions
from kafkatwist_spark.reader import KafkaBatchReader, KafkaInputPartition

config = parseSourceOptions(
    {"kafka.bootstrap.servers": "127.0.0.1:1", "subscribe": "t"}, streaming=False
)
reader = KafkaBatchReader(config, None)
assert gc.get_freeze_count() == 0
import kafkatwist_spark.reader as module
assert not module.allocatorTuned
# Spark's one empty partition (nothing to read): nothing frozen
list(reader.read(object()))
assert gc.get_freeze_count() == 0
assert not module.allocatorTuned
# a range to read: frozen when read() is called, before any fetch (the
# generator is not started, so no broker is asked)
reader.read(KafkaInputPartition(OffsetRange("t", 0, 0, 10)))
frozen = gc.get_freeze_count()
assert frozen > 10_000, frozen
import kafkatwist_spark.reader as module
import platform
# glibc keeps freed memory for the next fetch (see keepWorkerMemory)
assert module.allocatorTuned == (platform.libc_ver()[0] == "glibc"), platform.libc_ver()
# once per process: a second task's read does not freeze its own objects
garbage = [[] for _ in range(1000)]
reader.read(KafkaInputPartition(OffsetRange("t", 0, 10, 20)))
assert gc.get_freeze_count() == frozen
print("ok")
"""


def runAlone(script: str) -> None:
    """
    Run C{script} in a Python process of its own and require it to print
    "ok": freezing the test process's heap would outlive the test.
    """
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([ROOT, os.path.join(ROOT, "spark")])
    result = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_read_freezes_the_worker_heap_once():
    runAlone(SCRIPT)


# A cycle that is garbage when the first read freezes the heap (the first
# task's state, say) must still be collected: frozen objects are never
# looked at for cycles again.
CYCLE_SCRIPT = """
import gc
import weakref
from kafkatwist_spark.offsets import OffsetRange
from kafkatwist_spark.options import parseSourceOptions
from kafkatwist_spark.reader import KafkaBatchReader, KafkaInputPartition

class State:
    pass

gc.disable()  # no automatic collection may find the cycle first
config = parseSourceOptions(
    {"kafka.bootstrap.servers": "127.0.0.1:1", "subscribe": "t"}, streaming=False
)
reader = KafkaBatchReader(config, None)
state = State()
state.self = state
alive = weakref.ref(state)
del state
reader.read(KafkaInputPartition(OffsetRange("t", 0, 0, 10)))
assert gc.get_freeze_count() > 10_000
gc.collect()
assert alive() is None, "a cycle that was garbage at the freeze is kept for the worker's life"
print("ok")
"""


def test_garbage_cycles_at_the_freeze_are_still_collected():
    runAlone(CYCLE_SCRIPT)


def test_the_trim_threshold_only_once_the_mmap_threshold_is_taken():
    """
    Setting glibc's trim threshold turns its dynamic mmap threshold off: set
    alone (an older glibc refusing the mmap threshold), every Fetch response
    would become an mmap of its own, unmapped after use.
    """
    from kafkatwist_spark import reader

    calls = []

    def refusing(option, value):
        calls.append(option)
        return 0 if option == reader._M_MMAP_THRESHOLD else 1

    assert not reader.tuneAllocator(refusing)
    assert calls == [reader._M_MMAP_THRESHOLD]

    del calls[:]
    assert reader.tuneAllocator(lambda option, value: calls.append((option, value)) or 1)
    assert calls == [
        (reader._M_MMAP_THRESHOLD, reader.WORKER_MMAP_THRESHOLD),
        (reader._M_TRIM_THRESHOLD, reader.WORKER_TRIM_THRESHOLD),
    ]


# Spark plans a query in Python workers of its own (pyspark 4.3:
# create_data_source for schema(), plan_data_source_read for reader() and
# partitions()), reused daemon workers that collect garbage after every
# call: the source freezes their heap as a task's read does.
PLANNING_SCRIPT = """
import gc
from kafkatwist_spark.source import KafkaTwistDataSource

options = {"kafka.bootstrap.servers": "127.0.0.1:1", "subscribe": "t"}
assert gc.get_freeze_count() == 0
KafkaTwistDataSource(options).schema()
frozen = gc.get_freeze_count()
assert frozen > 10_000, frozen
KafkaTwistDataSource(options).reader(None)
assert gc.get_freeze_count() == frozen
print("ok")
"""

READER_PLANNING_SCRIPT = """
import gc
from kafkatwist_spark.source import KafkaTwistDataSource

KafkaTwistDataSource({"kafka.bootstrap.servers": "127.0.0.1:1", "subscribe": "t"}).reader(None)
assert gc.get_freeze_count() > 10_000
print("ok")
"""


@pytest.mark.parametrize("script", [PLANNING_SCRIPT, READER_PLANNING_SCRIPT],
                         ids=["schema", "reader"])
def test_planning_freezes_the_worker_heap_once(script):
    runAlone(script)
