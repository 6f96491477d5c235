"""
A broker whose data directory fills up (issue 11): producers get
KAFKA_STORAGE_ERROR, keep their connection, and are served again once space
is back; the broker logs no traceback.  Needs a tiny tmpfs (root); skipped
where it cannot be mounted.
"""

import os
import subprocess
import time

import pytest

pytestmark = pytest.mark.integration


@pytest.fixture
def tinyDisk(tmp_path):
    mount = tmp_path / "tiny"
    mount.mkdir()
    result = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], capture_output=True
    )
    if result.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {result.stderr.decode().strip()}")
    yield str(mount)
    subprocess.run(["umount", "-l", str(mount)], capture_output=True)


def test_produce_on_a_full_disk(brokerFactory, tinyDisk):
    from kafka import KafkaProducer
    from kafka.errors import KafkaStorageError

    broker = brokerFactory({
        "log.dir": os.path.join(tinyDisk, "data"),
        "offsets.topic.num.partitions": "1",
        "log.segment.bytes": "65536",
        "log.flush.scheduler.interval.ms": "100",
    })
    broker.start()
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, retries=0, linger_ms=0,
                             request_timeout_ms=10000)
    try:
        producer.send("full", b"first").get(timeout=10)
        # Leave a little room, then fill it.
        filler = os.path.join(tinyDisk, "filler")
        stat = os.statvfs(tinyDisk)
        with open(filler, "wb") as f:
            f.write(bytes(max(stat.f_bavail * stat.f_frsize - 96 * 1024, 0)))
        value = os.urandom(4096)
        error = None
        for _ in range(200):
            try:
                producer.send("full", value).get(timeout=10)
            except KafkaStorageError as e:
                error = e
                break
        assert error is not None, "the disk never filled"
        time.sleep(0.5)  # periodic checkpoints fail meanwhile
        os.unlink(filler)
        # Space is back: the same producer is served again.
        metadata = producer.send("full", b"after").get(timeout=10)
        assert metadata.offset > 0
    finally:
        producer.close()
    output = broker.output()
    assert "Traceback" not in output
    assert "Unhandled" not in output
