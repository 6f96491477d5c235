"""
Transactions through a real broker with real clients: confluent-kafka's
transactional producer (commit, abort, consume-transform-produce with
send_offsets_to_transaction), read_committed consumers of confluent-kafka,
kafka-python and aiokafka seeing only committed data, a second producer
with the same transactional.id fencing the first, an abandoned transaction
aborted after its timeout (the last stable offset moves on), and kill -9 of
the broker in the middle of a transaction; kafka-python's and aiokafka's
transactional producers; DescribeTransactions, ListTransactions and
DescribeProducers through kafka-python's admin client.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kafkatwist.client import KafkaWireClient
from kafkatwist.testing import Broker, waitUntil
from kafkatwist.testing.broker import TEST_DEFAULTS

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

READ_COMMITTED = 1


@pytest.fixture
def broker(tmp_path):
    with Broker(
        str(tmp_path / "broker"),
        {**TEST_DEFAULTS, "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500"},
    ) as b:
        yield b


def createTopics(bootstrap, *names, partitions=1):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(n, partitions) for n in names]).values():
        future.result(30)


def txnProducer(bootstrap, tid, **extra):
    config = {"bootstrap.servers": bootstrap, "transactional.id": tid, "linger.ms": 5}
    config.update(extra)
    producer = Producer(config)
    producer.init_transactions(30)
    return producer


def produceTxn(producer, topic, values, commit=True, partition=None):
    producer.begin_transaction()
    for value in values:
        if partition is None:
            producer.produce(topic, value=value)
        else:
            producer.produce(topic, value=value, partition=partition)
    producer.flush(30)
    if commit:
        producer.commit_transaction(30)
    else:
        producer.abort_transaction(30)


def consumeConfluent(bootstrap, topic, count, isolation="read_committed", timeout=20, group=None):
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group or f"check-{topic}-{isolation}-{time.monotonic()}",
            "auto.offset.reset": "earliest",
            "isolation.level": isolation,
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    got = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline and len(got) < count:
            message = consumer.poll(0.2)
            if message is None or message.error():
                continue
            got.append(message.value())
        # Nothing more than expected arrives.
        end = time.monotonic() + 1.0
        while time.monotonic() < end:
            message = consumer.poll(0.2)
            if message is not None and not message.error():
                got.append(message.value())
    finally:
        consumer.close()
    return got


def consumeKafkaPython(bootstrap, topic):
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        auto_offset_reset="earliest",
        isolation_level="read_committed",
        consumer_timeout_ms=4000,
    )
    try:
        return [m.value for m in consumer]
    finally:
        consumer.close()


def consumeAiokafka(bootstrap, topic, count):
    from aiokafka import AIOKafkaConsumer

    async def run():
        consumer = AIOKafkaConsumer(
            topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
            isolation_level="read_committed",
        )
        await consumer.start()
        got = []
        try:
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline:
                batches = await consumer.getmany(timeout_ms=500)
                for messages in batches.values():
                    got.extend(m.value for m in messages)
                if len(got) >= count:
                    # Let anything that should not come, come.
                    extra = await consumer.getmany(timeout_ms=1000)
                    for messages in extra.values():
                        got.extend(m.value for m in messages)
                    break
        finally:
            await consumer.stop()
        return got

    return asyncio.run(run())


def offsets(bootstrap, topic, partition=0):
    """
    (log end offset, last stable offset).
    """
    with KafkaWireClient(bootstrap) as client:
        end = client.listOffsets(topic, [partition])[partition][0]
        stable = client.listOffsets(topic, [partition], isolationLevel=READ_COMMITTED)[partition][0]
    return end, stable


def restarted(old: Broker) -> Broker:
    """
    The same data directory, a new process (and log file).
    """
    new = Broker(old.directory, dict(old.overrides))
    new.logPath = old.logPath + ".2"
    return new.start()


# -- commit and abort, three consumers ----------------------------------------------------


def test_commit_and_abort_seen_by_every_read_committed_consumer(broker):
    createTopics(broker.bootstrap, "t")
    producer = txnProducer(broker.bootstrap, "tx-1")
    produceTxn(producer, "t", [b"c%d" % i for i in range(5)])
    produceTxn(producer, "t", [b"a%d" % i for i in range(5)], commit=False)
    produceTxn(producer, "t", [b"d%d" % i for i in range(5)])
    committed = [b"c%d" % i for i in range(5)] + [b"d%d" % i for i in range(5)]
    assert consumeConfluent(broker.bootstrap, "t", 10) == committed
    assert consumeKafkaPython(broker.bootstrap, "t") == committed
    assert consumeAiokafka(broker.bootstrap, "t", 10) == committed
    # read_uncommitted sees the aborted records too.
    assert len(consumeConfluent(broker.bootstrap, "t", 15, isolation="read_uncommitted")) == 15
    end, stable = offsets(broker.bootstrap, "t")
    assert end == stable


def test_open_transaction_holds_read_committed_consumers_back(broker):
    createTopics(broker.bootstrap, "t")
    producer = txnProducer(broker.bootstrap, "tx-open")
    produceTxn(producer, "t", [b"before"])
    producer.begin_transaction()
    producer.produce("t", value=b"pending")
    producer.flush(30)
    end, stable = offsets(broker.bootstrap, "t")
    assert stable < end
    assert consumeConfluent(broker.bootstrap, "t", 1) == [b"before"]
    producer.commit_transaction(30)
    assert consumeConfluent(broker.bootstrap, "t", 2) == [b"before", b"pending"]


# -- consume-transform-produce ---------------------------------------------------------------


def test_consume_transform_produce(broker):
    createTopics(broker.bootstrap, "in", "out")
    plain = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(30):
        plain.produce("in", value=b"%d" % i)
    plain.flush(30)
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": "ctp",
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe(["in"])
    producer = txnProducer(broker.bootstrap, "ctp-1")
    done = 0
    aborted = False
    deadline = time.monotonic() + 60
    while done < 30 and time.monotonic() < deadline:
        messages = [m for m in consumer.consume(7, 1.0) if not m.error()]
        if not messages:
            continue
        producer.begin_transaction()
        for m in messages:
            producer.produce("out", value=b"x" + m.value())
        producer.send_offsets_to_transaction(
            consumer.position(consumer.assignment()), consumer.consumer_group_metadata(), 30
        )
        if not aborted:
            # The first batch fails: its output and offsets vanish, and
            # the input is read again from the committed offset.
            producer.abort_transaction(30)
            aborted = True
            for tp in consumer.committed(consumer.assignment(), 10):
                consumer.seek(TopicPartition(tp.topic, tp.partition, max(tp.offset, 0)))
            continue
        producer.commit_transaction(30)
        done += len(messages)
    consumer.close()
    assert done == 30
    out = consumeConfluent(broker.bootstrap, "out", 30)
    assert out == [b"x%d" % i for i in range(30)]
    checker = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "ctp"})
    (committed,) = checker.committed([TopicPartition("in", 0)], 10)
    checker.close()
    assert committed.offset == 30


# -- fencing and timeouts ------------------------------------------------------------------


def test_second_producer_fences_the_first(broker):
    createTopics(broker.bootstrap, "t")
    zombie = txnProducer(broker.bootstrap, "same-id")
    zombie.begin_transaction()
    zombie.produce("t", value=b"zombie")
    zombie.flush(30)
    # The new instance aborts the zombie's open transaction.
    successor = txnProducer(broker.bootstrap, "same-id")
    produceTxn(successor, "t", [b"successor"])
    with pytest.raises(KafkaException) as e:
        zombie.commit_transaction(30)
    assert e.value.args[0].fatal() or e.value.args[0].txn_requires_abort()
    assert consumeConfluent(broker.bootstrap, "t", 1) == [b"successor"]
    end, stable = offsets(broker.bootstrap, "t")
    assert end == stable


def test_abandoned_transaction_is_aborted_after_its_timeout(broker):
    createTopics(broker.bootstrap, "t")
    abandoned = txnProducer(broker.bootstrap, "abandoned", **{"transaction.timeout.ms": 2000})
    abandoned.begin_transaction()
    abandoned.produce("t", value=b"never")
    abandoned.flush(30)
    other = txnProducer(broker.bootstrap, "other")
    produceTxn(other, "t", [b"later"])
    end, stable = offsets(broker.bootstrap, "t")
    assert stable == 0 < end
    # The coordinator aborts it (and fences its producer): the last
    # stable offset moves on, the committed data becomes readable.
    waitUntil(lambda: offsets(broker.bootstrap, "t")[1] == offsets(broker.bootstrap, "t")[0],
              what="the last stable offset reaching the end")
    assert consumeConfluent(broker.bootstrap, "t", 1) == [b"later"]
    with pytest.raises(KafkaException):
        abandoned.commit_transaction(10)


# -- crashes -----------------------------------------------------------------------------


def test_kill_mid_transaction_then_restart(tmp_path):
    directory = str(tmp_path / "broker")
    overrides = {**TEST_DEFAULTS, "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500"}
    broker = Broker(directory, overrides).start()
    try:
        createTopics(broker.bootstrap, "t")
        producer = txnProducer(broker.bootstrap, "crash", **{"transaction.timeout.ms": 3000})
        produceTxn(producer, "t", [b"committed"])
        producer.begin_transaction()
        producer.produce("t", value=b"in-flight")
        producer.flush(30)
        broker.kill()
        del producer
        broker = restarted(broker)
        # After the restart the transaction is still open, then aborted
        # by its timeout: never half there.
        waitUntil(lambda: (lambda e, s: e == s)(*offsets(broker.bootstrap, "t")),
                  what="the last stable offset reaching the end")
        assert consumeConfluent(broker.bootstrap, "t", 1) == [b"committed"]
        # The id works again.
        again = txnProducer(broker.bootstrap, "crash")
        produceTxn(again, "t", [b"after"])
        assert consumeConfluent(broker.bootstrap, "t", 2) == [b"committed", b"after"]
    finally:
        broker.stop()


def test_kill_after_commit(tmp_path):
    directory = str(tmp_path / "broker")
    broker = Broker(directory, dict(TEST_DEFAULTS)).start()
    try:
        createTopics(broker.bootstrap, "t", partitions=3)
        producer = txnProducer(broker.bootstrap, "commit-then-crash")
        producer.begin_transaction()
        for p in range(3):
            producer.produce("t", value=b"v%d" % p, partition=p)
        producer.commit_transaction(30)
        broker.kill()
        del producer
        broker = restarted(broker)
        got = consumeConfluent(broker.bootstrap, "t", 3)
        assert sorted(got) == [b"v0", b"v1", b"v2"]
        for p in range(3):
            end, stable = offsets(broker.bootstrap, "t", p)
            assert end == stable
    finally:
        broker.stop()


# -- the other clients' producers, and the operator APIs -----------------------------------------


def test_kafka_python_transactional_producer(broker):
    from kafka import KafkaProducer

    createTopics(broker.bootstrap, "k")
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id="kp")
    producer.init_transactions()
    producer.begin_transaction()
    producer.send("k", b"c1")
    producer.commit_transaction()
    producer.begin_transaction()
    producer.send("k", b"a1")
    producer.flush()
    producer.abort_transaction()
    producer.begin_transaction()
    producer.send("k", b"c2")
    producer.commit_transaction()
    producer.close()
    assert consumeKafkaPython(broker.bootstrap, "k") == [b"c1", b"c2"]


def test_aiokafka_transactional_producer(broker):
    from aiokafka import AIOKafkaProducer

    createTopics(broker.bootstrap, "a")

    async def run():
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id="ap")
        await producer.start()
        try:
            async with producer.transaction():
                await producer.send_and_wait("a", b"c1")
            with pytest.raises(RuntimeError):
                async with producer.transaction():
                    await producer.send_and_wait("a", b"a1")
                    raise RuntimeError("abort")
            async with producer.transaction():
                await producer.send_and_wait("a", b"c2")
        finally:
            await producer.stop()

    asyncio.run(run())
    assert consumeConfluent(broker.bootstrap, "a", 2) == [b"c1", b"c2"]


def test_operator_apis(broker):
    from kafka import KafkaAdminClient

    createTopics(broker.bootstrap, "t")
    producer = txnProducer(broker.bootstrap, "described")
    producer.begin_transaction()
    producer.produce("t", value=b"x")
    producer.flush(30)
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        described = admin.describe_transactions(["described"])["described"]
        assert described.state.value == "Ongoing"
        assert ("t", 0) in {(tp.topic, tp.partition) for tp in described.topic_partitions}
        listed = [t for ts in admin.list_transactions().values() for t in ts]
        assert [(t.transactional_id, t.state.value) for t in listed] == [("described", "Ongoing")]
        from kafka.structs import TopicPartition as KafkaTopicPartition

        tp = KafkaTopicPartition("t", 0)
        (found,) = admin.describe_producers([tp]).values()
        (state,) = found.active_producers
        assert state.current_transaction_start_offset == 0
        assert state.producer_id == described.producer_id
        # The operator's way out of a hanging transaction
        # (kafka-transactions.sh abort): a marker written straight into
        # the partition, through WriteTxnMarkers.
        from kafka.admin._transactions import AbortTransactionSpec

        admin.abort_transaction(
            AbortTransactionSpec(tp, state.producer_id, state.producer_epoch,
                                 state.coordinator_epoch)
        )
        end, stable = offsets(broker.bootstrap, "t")
        assert end == stable == 2
    finally:
        admin.close()
    producer.commit_transaction(30)
    assert consumeConfluent(broker.bootstrap, "t", 1, timeout=3) == []


# -- compaction ----------------------------------------------------------------------------


def _batches(bootstrap, topic):
    """
    Every batch of partition 0 as the log has it: C{(baseOffset, isControl,
    records)}.
    """
    from kafkatwist.protocol.records import decodeBatches

    out = []
    offset = 0
    with KafkaWireClient(bootstrap) as client:
        end = client.listOffsets(topic, [0])[0][0]
        while offset < end:
            raw = client.fetchRaw(topic, 0, offset, maxBytes=1 << 20)
            decoded = list(decodeBatches(raw.records))
            if not decoded:
                break
            for batch in decoded:
                out.append((batch.baseOffset, batch.isControl, batch.records))
            offset = decoded[-1].nextOffset
    return out


def _checkCompactedReadCommitted(bootstrap, topic, keys, committedRounds, abortedRounds):
    """
    Every read_committed consumer sees, for each key, values of committed
    rounds only, the last one the newest committed round's.
    """
    newest = max(committedRounds)
    expectedLast = {b"k%d" % k: b"r%d-%d" % (newest, k) for k in range(keys)}
    aborted = {b"r%d-%d" % (r, k) for r in abortedRounds for k in range(keys)}
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(
        topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
        isolation_level="read_committed", consumer_timeout_ms=4000,
    )
    try:
        pairs = [(m.key, m.value) for m in consumer]
    finally:
        consumer.close()
    values = consumeConfluent(bootstrap, topic, len(pairs))
    assert sorted(values) == sorted(v for _, v in pairs)
    assert sorted(consumeAiokafka(bootstrap, topic, len(pairs))) == sorted(values)
    assert not aborted & set(values)
    last = {}
    for key, value in pairs:
        last[key] = value
    assert last == expectedLast
    end, stable = offsets(bootstrap, topic)
    assert end == stable


@pytest.mark.slow
def test_compacted_topic_with_transactions(tmp_path):
    """
    A compacted topic written in transactions, every other one aborted:
    as the cleaner drops aborted records, then (after delete.retention.ms)
    markers whose transactions' data is gone, read_committed consumers of
    the three clients never see an aborted value and never wait on a
    missing marker, before and after a kill -9 and restart.
    """
    keys = 10
    overrides = {**TEST_DEFAULTS, "log.cleaner.backoff.ms": "50"}
    broker = Broker(str(tmp_path / "broker"), overrides).start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        config = {"cleanup.policy": "compact", "segment.bytes": "2048",
                  "min.cleanable.dirty.ratio": "0.01", "delete.retention.ms": "1000"}
        for future in admin.create_topics([NewTopic("c", 1, config=config)]).values():
            future.result(30)
        producer = txnProducer(broker.bootstrap, "compacted")
        committed, aborted = [], []
        rounds = 0

        def round_(commit):
            nonlocal rounds
            producer.begin_transaction()
            for k in range(keys):
                producer.produce("c", key=b"k%d" % k, value=b"r%d-%d" % (rounds, k))
            producer.flush(30)
            if commit:
                producer.commit_transaction(30)
                committed.append(rounds)
            else:
                producer.abort_transaction(30)
                aborted.append(rounds)
            rounds += 1

        for r in range(12):
            round_(commit=r % 2 == 0)
        # Round r's records are at offsets r * (keys + 1) + k, its marker after them.
        earlyMarkers = {keys, 2 * keys + 1}  # round 0's COMMIT, round 1's ABORT
        assert earlyMarkers <= {b for b, control, _ in _batches(broker.bootstrap, "c") if control}
        # Aborted records go first.
        deadline = time.monotonic() + 60
        while True:
            data = [r for _, control, records in _batches(broker.bootstrap, "c") if not control
                    for r in records]
            if not {r.value for r in data} & {b"r1-0", b"r3-0"}:
                break
            assert time.monotonic() < deadline, "aborted records were not cleaned"
            time.sleep(0.3)
        _checkCompactedReadCommitted(broker.bootstrap, "c", keys, committed, aborted)
        # More rounds make the cleaner pass again: the early transactions'
        # markers get their horizon, and a pass after it drops them.
        deadline = time.monotonic() + 90
        while True:
            round_(commit=True)
            round_(commit=False)
            batches = _batches(broker.bootstrap, "c")
            if not earlyMarkers & {b for b, control, _ in batches if control}:
                break
            assert time.monotonic() < deadline, f"the early markers stay: {batches[:5]}"
            time.sleep(0.5)
        _checkCompactedReadCommitted(broker.bootstrap, "c", keys, committed, aborted)
        broker.kill()
        broker = restarted(broker)
        _checkCompactedReadCommitted(broker.bootstrap, "c", keys, committed, aborted)
        # The producer id works on, and its next transaction is readable.
        again = txnProducer(broker.bootstrap, "compacted")
        producer = again
        round_(commit=True)
        _checkCompactedReadCommitted(broker.bootstrap, "c", keys, committed, aborted)
    finally:
        broker.stop()
