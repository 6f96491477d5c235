"""
The next batch in order of a known idempotent producer (the commonest
idempotent append) takes a short path in L{ProducerStateManager}; these pin
that it decides exactly as Kafka's rules do at its edges: the duplicate
scan still comes first (also when the cached ranges are not contiguous, as
a snapshot or replication may leave them), the five cached batches roll,
an open transaction still refuses a plain batch, a sequence wrap, a new
epoch and a transactional batch take the general path.
"""

from __future__ import annotations

import pytest

from kafkatwist.errors import ErrorCode, KafkaError
from kafkatwist.log.producerstate import BatchMetadata, ProducerStateEntry, ProducerStateManager
from kafkatwist.protocol.batch import TRANSACTIONAL_BIT, validateRecordSet

from .batches import makeBatch
from .helpers import NOW

PID = 4242
INT32_MAX = 2**31 - 1


def batches(seq, count=1, epoch=0, **kw):
    data = bytearray(makeBatch(count, producerId=PID, producerEpoch=epoch, baseSequence=seq, baseTimestamp=NOW, **kw))
    return validateRecordSet(data, maxBatchBytes=1 << 20, allowControl=False)


def append(state, seq, offset, count=1, epoch=0, **kw):
    pending = state.prepareAppend(batches(seq, count, epoch, **kw), offset)
    if type(pending) is BatchMetadata:
        return pending
    state.commit(pending)
    return None


def test_in_order_batches_keep_the_last_five():
    state = ProducerStateManager("t-0")
    for i in range(8):
        assert append(state, 2 * i, 2 * i, count=2) is None
    entry = state.get(PID)
    assert [(b.firstSeq, b.lastSeq, b.firstOffset, b.lastOffset) for b in entry.batches] == [
        (2 * i, 2 * i + 1, 2 * i, 2 * i + 1) for i in range(3, 8)
    ]
    assert entry.lastTimestamp == entry.batches[-1].maxTimestamp
    assert entry.ordered  # the next in order skips the duplicate scan
    # a retry of a cached one is a duplicate; of an older one, out of order
    assert append(state, 8, 99, count=2) == entry.batches[1]
    with pytest.raises(KafkaError) as e:
        append(state, 2, 99, count=2)
    assert e.value.code == ErrorCode.out_of_order_sequence_number


def test_a_cached_range_equal_to_the_next_one_is_still_a_duplicate():
    # Cached ranges need not be contiguous (a snapshot, a follower's
    # replay): Kafka looks for the duplicate before anything else.
    state = ProducerStateManager("t-0")
    state.producers[PID] = ProducerStateEntry(
        PID, 0, [BatchMetadata(6, 6, 40, 40, NOW), BatchMetadata(2, 5, 41, 44, NOW)], NOW
    )
    assert append(state, 6, 45) == BatchMetadata(6, 6, 40, 40, NOW)
    assert append(state, 6, 45, count=2) is None  # 6-7: new
    assert state.get(PID).batches[-1][:4] == (6, 7, 45, 46)


def test_an_open_transaction_refuses_a_plain_batch():
    state = ProducerStateManager("t-0")
    append(state, 0, 0)
    state.ongoing[PID] = 1
    with pytest.raises(KafkaError) as e:
        append(state, 1, 1)
    assert e.value.code == ErrorCode.invalid_txn_state


def test_the_general_rules_at_the_edges():
    state = ProducerStateManager("t-0")
    state.producers[PID] = ProducerStateEntry(PID, 0, [BatchMetadata(INT32_MAX - 3, INT32_MAX - 1, 0, 2, NOW)], NOW)
    # the next batch wraps: 2**31 - 1, 0
    assert append(state, INT32_MAX, 3, count=2) is None
    assert state.get(PID).batches[-1][:2] == (INT32_MAX, 0)
    assert append(state, 1, 5) is None
    # a new epoch starts at 0, and drops the cached batches
    with pytest.raises(KafkaError) as e:
        append(state, 2, 6, epoch=1)
    assert e.value.code == ErrorCode.out_of_order_sequence_number
    assert append(state, 0, 6, epoch=1) is None
    assert [b[:2] for b in state.get(PID).batches] == [(0, 0)]
    # an older epoch is fenced
    with pytest.raises(KafkaError) as e:
        append(state, 1, 7, epoch=0)
    assert e.value.code == ErrorCode.invalid_producer_epoch
    # a transactional batch without a verified transaction
    with pytest.raises(KafkaError) as e:
        append(state, 1, 7, epoch=1, attributes=TRANSACTIONAL_BIT)
    assert e.value.code == ErrorCode.invalid_txn_state


def test_log_append_time_is_the_cached_max_timestamp():
    state = ProducerStateManager("t-0")
    append(state, 0, 0)
    pending = state.prepareAppend(batches(1), 1, 5_000)
    state.commit(pending)
    assert state.get(PID).batches[-1] == BatchMetadata(1, 1, 1, 1, 5_000)
    assert state.get(PID).lastTimestamp == 5_000


def test_any_other_change_of_the_cache_scans_again():
    state = ProducerStateManager("t-0")
    for i in range(3):
        append(state, i, i)
    entry = state.get(PID)
    assert entry.ordered
    # a replayed batch (recovery, the broker's own appends) may break the order
    entry.addBatch(0, BatchMetadata(1, 1, 3, 3, NOW))
    assert not entry.ordered
    # 2-2 follows the last (1-1) and is cached: a duplicate, as Kafka's scan finds
    assert append(state, 2, 4) == BatchMetadata(2, 2, 2, 2, NOW)
    assert not entry.ordered


def test_the_order_is_learnt_again_after_the_general_path():
    state = ProducerStateManager("t-0")
    append(state, 0, 0)
    entry = state.get(PID)
    # a two-batch append takes the general path
    data = bytearray(makeBatch(1, producerId=PID, producerEpoch=0, baseSequence=1, baseTimestamp=NOW)
                     + makeBatch(1, producerId=PID, producerEpoch=0, baseSequence=2, baseTimestamp=NOW))
    state.commit(state.prepareAppend(validateRecordSet(data, maxBatchBytes=1 << 20, allowControl=False), 1))
    assert not entry.ordered
    assert append(state, 3, 3) is None  # scanned once, found ordered
    assert entry.ordered
    assert [b[0] for b in entry.batches] == [0, 1, 2, 3]
