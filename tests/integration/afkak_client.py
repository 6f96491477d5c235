"""
afkak (Twisted's Kafka client: Produce v0 with message format v0, Fetch v0,
ListOffsets v0, GroupCoordinator v0, OffsetCommit/OffsetFetch v1), driven
in its own process with its own reactor:

    python -m tests.integration.afkak_client BOOTSTRAP TOPIC CODEC COUNT

Produces COUNT messages in three requests, consumes them from the earliest
offset as consumer group "afkak-<topic>", commits, reads the commit back
and prints one JSON line: what it read, the committed offset, the latest
offset from ListOffsets v0.
"""

from __future__ import annotations

import json
import sys

from twisted.internet import defer, task


@defer.inlineCallbacks
def main(reactor, bootstrap, topic, codec, count):
    from afkak.client import KafkaClient
    from afkak.common import (
        CODEC_GZIP,
        CODEC_NONE,
        CODEC_SNAPPY,
        OFFSET_EARLIEST,
        OffsetFetchRequest,
        OffsetRequest,
    )
    from afkak.consumer import Consumer
    from afkak.producer import Producer

    codecs = {"none": CODEC_NONE, "gzip": CODEC_GZIP, "snappy": CODEC_SNAPPY}
    count = int(count)
    group = f"afkak-{topic}"
    client = KafkaClient(bootstrap, clientId="afkak-test", reactor=reactor)
    yield client.load_metadata_for_topics(topic)
    producer = Producer(client, codec=codecs[codec], batch_send=False)
    third = count // 3
    chunks = [range(0, third), range(third, 2 * third), range(2 * third, count)]
    for chunk in chunks:
        yield producer.send_messages(topic, key=b"key", msgs=[b"msg-%d" % i for i in chunk])
    yield producer.stop()

    received = []
    done = defer.Deferred()

    def processor(consumer, messages):
        for m in messages:
            received.append((m.offset, m.message.key.decode(), m.message.value.decode()))
        if len(received) >= count and not done.called:
            # After afkak has recorded these as processed.
            reactor.callLater(0, done.callback, None)

    consumer = Consumer(
        client, topic, 0, processor, consumer_group=group,
        auto_commit_every_n=0, auto_commit_every_ms=0,
    )
    consumer.start(OFFSET_EARLIEST)
    timeout = reactor.callLater(30, lambda: done.called or done.errback(RuntimeError("timed out")))
    yield done
    timeout.cancel()
    yield consumer.commit()
    consumer.stop()

    [fetched] = yield client.send_offset_fetch_request(group, [OffsetFetchRequest(topic, 0)])
    [latest] = yield client.send_offset_request([OffsetRequest(topic, 0, -1, 10)])
    yield client.close()
    print(json.dumps({
        "received": received,
        "committed": fetched.offset,
        "latest": list(latest.offsets),
    }))


if __name__ == "__main__":
    task.react(main, sys.argv[1:])
