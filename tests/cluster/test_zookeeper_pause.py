"""
No request handler thread waits on ZooKeeper (issue 24): with ZooKeeper
stopped (SIGSTOP) while a DeleteTopics, a CreatePartitions, a broker
config change (IncrementalAlterConfigs) and an InitProducerId that needs a
new block of producer ids are in flight, Produce and Fetch of other topics on the same broker keep being
answered -- the broker runs one request handler thread, which a waiting
admin request would hold -- and the admin requests get their answer once
ZooKeeper is back (success, or Kafka's REQUEST_TIMED_OUT).

Real processes: a ZooKeeper of this test's own (so pausing it disturbs no
other test), three brokers, a bare wire client.
"""

from __future__ import annotations

import datetime
import signal
import time

import pytest

from kafkatwist.errors import ErrorCode
from kafkatwist.protocol.apis import requestType
from kafkatwist.protocol.codec import decodeResponseFrame, encodeRequestFrame
from kafkatwist.protocol.entities import make, nested
from kafkatwist.protocol.records import Record, buildBatch, decodeBatches
from kafkatwist.testing import waitUntil
from tests.cluster.helpers import ClusterUnderTest, partitions
from tests.rawclient import RawConnection

pytest.importorskip("kafka")
from tests.cluster.helpers import createPlaced  # noqa: E402

#: how long ZooKeeper stays stopped (at least: until the data path's
#: rounds are done; it is resumed only after them)
PAUSE_SECONDS = 5.0
#: a hang bound, not a latency target: an answer that does not come within
#: it never would while ZooKeeper is stopped (it stays stopped until the
#: round waiting for it fails)
HANG_SECONDS = 8.0


@pytest.fixture
def pausableCluster(ownZooKeeper, tmp_path):
    c = ClusterUnderTest(ownZooKeeper, tmp_path / "brokers", "pause")
    yield c
    if ownZooKeeper.server.process.poll() is None:
        ownZooKeeper.server.process.send_signal(signal.SIGCONT)
    c.stop()


def stopped(pid: int) -> bool:
    """
    Whether the process is stopped (SIGSTOP): its state in /proc.
    """
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] == "T"


def send(connection, apiKey, version, **fields) -> int:
    connection.correlationId += 1
    entity = make(requestType(apiKey, version), **fields)
    connection.send(encodeRequestFrame(apiKey, version, connection.correlationId, "pause", entity))
    return connection.correlationId


def receive(connection, apiKey, version, correlationId):
    got, response = decodeResponseFrame(apiKey, version, connection.readFrame())
    assert got == correlationId
    return response


def produce(connection, topic, value):
    cls = requestType(0, 9)
    Topic, Partition = nested(cls, "TopicProduceData"), nested(cls, "PartitionProduceData")
    batch = buildBatch([Record(value=value)])
    correlationId = send(
        connection, 0, 9, transactional_id=None, acks=1, timeout=datetime.timedelta(seconds=30),
        topic_data=(make(Topic, name=topic, partition_data=(make(Partition, index=0, records=batch),)),),
    )
    response = receive(connection, 0, 9, correlationId)
    (answer,) = response.responses[0].partition_responses
    return answer.error_code, answer.base_offset


def fetch(connection, topic, offset):
    cls = requestType(1, 12)
    Topic, Partition = nested(cls, "FetchTopic"), nested(cls, "FetchPartition")
    correlationId = send(
        connection, 1, 12, cluster_id=None, replica_id=-1,
        max_wait=datetime.timedelta(milliseconds=100), min_bytes=1, max_bytes=1 << 20,
        isolation_level=0, session_id=0, session_epoch=-1, forgotten_topics_data=(), rack_id="",
        topics=(make(Topic, topic=topic, partitions=(make(
            Partition, partition=0, current_leader_epoch=-1, fetch_offset=offset,
            last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=1 << 20,
        ),)),),
    )
    response = receive(connection, 1, 12, correlationId)
    (answer,) = response.responses[0].partitions
    values = [r.value for b in decodeBatches(answer.records or b"") for r in b.records]
    return answer.error_code, values


def test_produce_and_fetch_answer_while_zookeeper_is_stopped(ownZooKeeper, pausableCluster):
    cluster = pausableCluster
    # Sessions that outlive the pause; one request handler thread on the
    # broker under test, so an admin request waiting on ZooKeeper would hold
    # every other request.
    for i in (1, 2, 3):
        cluster.broker(i, **{"zookeeper.session.timeout.ms": "30000",
                             **({"num.io.threads": "1"} if i == 1 else {})})
    cluster.start()
    admin = cluster.admin(1, 2, 3)
    waitUntil(lambda: len(admin.list_topics(timeout=10).brokers) == 3, what="three brokers")
    for topic in ("busy", "doomed", "growing"):
        createPlaced(cluster, topic, {0: [1]})
    for topic in ("busy", "doomed", "growing"):
        waitUntil(lambda: (partitions(admin, topic) or {}).get(0, (None,))[0] == 1,
                  what=f"broker 1 leading {topic}")
    port = cluster.brokers[1].port
    data = RawConnection(port, timeout=HANG_SECONDS)
    assert produce(data, "busy", b"before") == (ErrorCode.none, 0)

    deleting = RawConnection(port, timeout=60)
    growing = RawConnection(port, timeout=60)
    configuring = RawConnection(port, timeout=60)
    idempotent = RawConnection(port, timeout=60)
    ownZooKeeper.server.process.send_signal(signal.SIGSTOP)
    stoppedAt = time.monotonic()
    try:
        deleteId = send(deleting, 20, 4, topic_names=("doomed",), timeout=datetime.timedelta(seconds=30))
        Topic = nested(requestType(37, 1), "CreatePartitionsTopic")
        Assignment = nested(requestType(37, 1), "CreatePartitionsAssignment")
        growId = send(
            growing, 37, 1,
            topics=(make(Topic, name="growing", count=2,
                         assignments=(make(Assignment, broker_ids=(1,)),)),),
            timeout=datetime.timedelta(seconds=30), validate_only=False,
        )
        Resource = nested(requestType(44, 1), "AlterConfigsResource")
        Config = nested(requestType(44, 1), "AlterableConfig")
        configureId = send(
            configuring, 44, 1, validate_only=False,
            resources=(make(Resource, resource_type=4, resource_name="1", configs=(
                make(Config, name="message.max.bytes", config_operation=0, value="2000000"),
            )),),
        )
        # The broker's first producer id: its block is ZooKeeper's.
        initId = send(
            idempotent, 22, 4, transactional_id=None,
            transaction_timeout=datetime.timedelta(seconds=60), producer_id=-1, producer_epoch=-1,
        )
        # Round trips on the data path for as long as ZooKeeper is stopped,
        # while both wait for it: each must be answered (a handler thread
        # held by an admin request would leave them unanswered until
        # ZooKeeper is back).
        rounds = 0
        while rounds < 5 or time.monotonic() - stoppedAt < PAUSE_SECONDS:
            value = f"while-{rounds}".encode()
            assert produce(data, "busy", value) == (ErrorCode.none, rounds + 1)
            code, values = fetch(data, "busy", rounds + 1)
            assert code == ErrorCode.none and values == [value]
            # Answered while ZooKeeper is still stopped.
            assert stopped(ownZooKeeper.server.process.pid)
            rounds += 1
    finally:
        ownZooKeeper.server.process.send_signal(signal.SIGCONT)

    # Back: each admin request gets its answer -- done, or Kafka's timeout.
    deleted = receive(deleting, 20, 4, deleteId)
    assert deleted.responses[0].error_code in (ErrorCode.none, ErrorCode.request_timed_out)
    grown = receive(growing, 37, 1, growId)
    assert grown.results[0].error_code in (ErrorCode.none, ErrorCode.request_timed_out)
    configured = receive(configuring, 44, 1, configureId)
    assert configured.responses[0].error_code in (ErrorCode.none, ErrorCode.request_timed_out)
    initialized = receive(idempotent, 22, 4, initId)
    assert initialized.error_code == ErrorCode.none and initialized.producer_id >= 0
    # And the data path still serves.
    assert produce(data, "busy", b"after") == (ErrorCode.none, rounds + 1)
