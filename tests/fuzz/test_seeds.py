"""
The recorded seeds are what real clients send: the broker's decoders (the
bounds pre-pass included) must accept every one of them unchanged, and the
fuzzer's field locator must find its way through them.
"""

import random

from kafkatwist.protocol.apis import PRODUCE, UnknownSchema, requestType
from kafkatwist.protocol.codec import decodeRequest
from kafkatwist.protocol.header import parseRequestHeader
from kafkatwist.protocol.produce import decodeProduceRequest
from tests.fuzz.fields import LENGTH, RECORDS, locate
from tests.fuzz.mutate import Mutator
from tests.fuzz.seeds import produceSeeds, recorded


def test_recorded_seeds_cover_the_three_clients():
    origins = {seed.origin.split("-")[0] for seed in recorded()}
    assert {"confluent", "kafka", "aiokafka"} <= origins


def test_real_client_frames_decode():
    decoded = 0
    for seed in recorded() + produceSeeds(["t"]):
        header = parseRequestHeader(seed.frame)
        try:
            requestType(header.apiKey, header.apiVersion)
        except UnknownSchema:
            continue  # a version kio (and so the broker) does not know
        if header.apiKey == PRODUCE:
            decodeProduceRequest(header.apiVersion, seed.frame, header.bodyOffset)
        decodeRequest(header.apiKey, header.apiVersion, seed.frame, header.bodyOffset)
        decoded += 1
    assert decoded > 300


def test_locator_finds_lengths_and_record_sets():
    kinds = set()
    for seed in produceSeeds(["t"], versions=[3, 9]):
        header = parseRequestHeader(seed.frame)
        fields = locate(requestType(PRODUCE, header.apiVersion), seed.frame, header.bodyOffset)
        kinds |= {f.kind for f in fields}
    assert {LENGTH, RECORDS} <= kinds


def test_mutator_is_deterministic_and_changes_frames():
    seeds = recorded()[:50]

    def run(seed):
        mutator = Mutator(random.Random(seed))
        return [mutator.mutate(s.apiKey, s.version, s.frame) for s in seeds]

    first = run(3)
    assert first == run(3)
    assert all(a != s.frame for a, s in zip(first, seeds))
