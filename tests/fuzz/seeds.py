"""
The fuzzer's corpus: the frames recorded from real clients (see
L{tests.fuzz.record}), frames generated from the schemas for every
ApiKey/version the broker serves, and Produce frames carrying record batches
in every codec.
"""

from __future__ import annotations

import datetime
import random
from typing import NamedTuple

from kafkatwist.protocol.apis import PRODUCE, requestType
from kafkatwist.protocol.codec import encodeRequestFrame
from kafkatwist.protocol.entities import make, nested
from kafkatwist.protocol.header import parseRequestHeader
from kafkatwist.protocol.records import Record, buildBatch
from tests.fuzz.entities import randomEntity
from tests.fuzz.record import SEEDS

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


class Seed(NamedTuple):
    #: where it comes from: a client name, "generated" or "records-<codec>"
    origin: str
    apiKey: int
    version: int
    #: the frame without its size prefix
    frame: bytes


def recorded(path: str = SEEDS) -> list[Seed]:
    seeds = []
    with open(path) as f:
        for line in f:
            if line.strip():
                origin, apiKey, version, frameHex = line.split()
                seeds.append(Seed(origin, int(apiKey), int(version), bytes.fromhex(frameHex)))
    return seeds


def _frame(apiKey: int, version: int, entity) -> bytes:
    return encodeRequestFrame(apiKey, version, 1, "fuzz", entity)[4:]


def generated(
    served: dict[int, tuple[int, int]], topics: list[str], rng: random.Random, perVersion: int = 2
) -> list[Seed]:
    """
    @param served: ApiKey -> (min, max) version, as the broker's ApiVersions
        answers.
    @param topics: existing topic names, put where a topic name goes so that
        requests reach past "unknown topic".
    """
    names = {"name": topics, "topic": topics, "topic_name": topics, "topic_names": topics}
    seeds = []
    for apiKey, (low, high) in sorted(served.items()):
        for version in range(low, high + 1):
            try:
                cls = requestType(apiKey, version)
            except Exception:
                continue
            for _ in range(perVersion):
                try:
                    frame = _frame(apiKey, version, randomEntity(cls, rng, names=names))
                except Exception:
                    continue
                seeds.append(Seed("generated", apiKey, version, frame))
    return seeds


def produceSeeds(topics: list[str], versions=range(3, 13)) -> list[Seed]:
    """
    Produce frames with real record batches: every codec, plain,
    idempotent, transactional-flagged, with headers, several batches.
    """
    now = int(datetime.datetime.now().timestamp() * 1000)
    seeds = []
    for version in versions:
        cls = requestType(PRODUCE, version)
        Topic, Partition = nested(cls, "TopicProduceData"), nested(cls, "PartitionProduceData")
        for codec in CODECS:
            records = [
                Record(key=b"k%d" % i, value=b"value-%d" % i * 4, timestamp=now + i,
                       headers=[("h", b"v")] if i % 2 else [])
                for i in range(4)
            ]
            variants = [
                buildBatch(records, compression=codec),
                buildBatch(records, compression=codec, producerId=1000, producerEpoch=0,
                           baseSequence=0),
                buildBatch(records[:1], compression=codec) + buildBatch(records[1:], compression=codec),
            ]
            for batch in variants:
                entity = make(
                    cls,
                    transactional_id=None,
                    acks=-1,
                    timeout=datetime.timedelta(seconds=5),
                    topic_data=(
                        make(Topic, name=topics[0], partition_data=(
                            make(Partition, index=0, records=batch),)),
                    ),
                )
                seeds.append(Seed(f"records-{codec}", PRODUCE, version, _frame(PRODUCE, version, entity)))
    return seeds


def legacyProduceSeeds(topics: list[str]) -> list[Seed]:
    """
    Produce v0-2 frames carrying message formats v0/v1 (what clients before
    Kafka 0.11 send), plain and in one compressed wrapper per codec.
    """
    from kafkatwist.protocol.legacy_records import compressInner, encodeMessage

    now = int(datetime.datetime.now().timestamp() * 1000)
    seeds = []
    for version in (0, 1, 2):
        magic = 1 if version == 2 else 0
        cls = requestType(PRODUCE, version)
        Topic, Partition = nested(cls, "TopicProduceData"), nested(cls, "PartitionProduceData")
        inner = b"".join(encodeMessage(i, magic, 0, now + i, b"k%d" % i, b"value-%d" % i) for i in range(4))
        for codec in range(4):
            records = inner if codec == 0 else encodeMessage(3, magic, codec, now, None, compressInner(codec, magic, inner))
            entity = make(
                cls, acks=-1, timeout=datetime.timedelta(seconds=5),
                topic_data=(make(Topic, name=topics[0], partition_data=(make(Partition, index=0, records=records),)),),
            )
            seeds.append(Seed(f"legacy-records-{codec}", PRODUCE, version, _frame(PRODUCE, version, entity)))
    return seeds


def bodyOffset(frame: bytes) -> int:
    return parseRequestHeader(frame).bodyOffset
