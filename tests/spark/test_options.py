"""
Option validation, without Spark or a broker: every malformed, missing or
conflicting option is refused with a message that names it.
"""

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from kafkatwist_spark.options import (  # noqa: E402
    OptionError,
    parseSinkOptions,
    parseSourceOptions,
)

BASE = {"kafka.bootstrap.servers": "127.0.0.1:9092", "subscribe": "t"}


def refused(options, streaming=False, sink=False) -> OptionError:
    with pytest.raises(OptionError) as caught:
        if sink:
            parseSinkOptions(options)
        else:
            parseSourceOptions(options, streaming=streaming)
    return caught.value


# (case id, options, streaming, option named, words in the message)
SOURCE_CASES = [
    ("no-bootstrap", {"subscribe": "t"}, False, "kafka.bootstrap.servers", "must be set"),
    ("bootstrap-no-port", {**BASE, "kafka.bootstrap.servers": "localhost"}, False,
     "kafka.bootstrap.servers", "not host:port"),
    ("bootstrap-bad-port", {**BASE, "kafka.bootstrap.servers": "h:1,h:99999"}, False,
     "kafka.bootstrap.servers", "'h:99999'"),
    ("no-topics", {"kafka.bootstrap.servers": "h:1"}, False, "subscribe",
     "'subscribe', 'subscribePattern' or 'assign'"),
    ("subscribe-and-assign", {**BASE, "assign": '{"t":[0]}'}, False, "assign",
     "only one of"),
    ("subscribe-and-pattern", {**BASE, "subscribePattern": "t.*"}, False, "subscribePattern",
     "only one of"),
    ("subscribe-empty", {**BASE, "subscribe": " , "}, False, "subscribe", "names no topics"),
    ("subscribe-bad-name", {**BASE, "subscribe": "ok,not ok"}, False, "subscribe",
     "invalid topic name 'not ok'"),
    ("pattern-bad-regex", {"kafka.bootstrap.servers": "h:1", "subscribePattern": "ev(ents"},
     False, "subscribePattern", "not a valid regular expression"),
    ("assign-not-json", {"kafka.bootstrap.servers": "h:1", "assign": "t:0"}, False, "assign",
     "not valid JSON"),
    ("assign-bad-shape", {"kafka.bootstrap.servers": "h:1", "assign": '{"t": 0}'}, False,
     "assign", "list of partition numbers"),
    ("assign-negative", {"kafka.bootstrap.servers": "h:1", "assign": '{"t": [-1]}'}, False,
     "assign", "list of partition numbers"),
    ("assign-empty", {"kafka.bootstrap.servers": "h:1", "assign": "{}"}, False, "assign",
     "names no partitions"),
    ("assign-twice", {"kafka.bootstrap.servers": "h:1", "assign": '{"t": [1, 1]}'}, False,
     "assign", "names a partition twice"),
    ("starting-word", {**BASE, "startingOffsets": "first"}, False, "startingOffsets",
     "'earliest', 'latest' or a JSON object"),
    ("starting-latest-batch", {**BASE, "startingOffsets": "latest"}, False, "startingOffsets",
     "can not be 'latest' for batch queries"),
    ("ending-earliest-batch", {**BASE, "endingOffsets": "earliest"}, False, "endingOffsets",
     "can not be 'earliest' for batch queries"),
    ("starting-json-broken", {**BASE, "startingOffsets": '{"t":{"0":1}'}, False,
     "startingOffsets", "not valid JSON"),
    ("starting-json-latest-batch", {**BASE, "startingOffsets": '{"t":{"0":-1}}'}, False,
     "startingOffsets", "not allowed to start a batch query"),
    ("ending-json-earliest-batch", {**BASE, "endingOffsets": '{"t":{"0":-2}}'}, False,
     "endingOffsets", "not allowed to end a batch query"),
    ("starting-json-below-earliest", {**BASE, "startingOffsets": '{"t":{"0":-3}}'}, True,
     "startingOffsets", "expected an integer >= -2"),
    ("starting-json-not-int", {**BASE, "startingOffsets": '{"t":{"0":"5"}}'}, True,
     "startingOffsets", "expected an integer"),
    ("starting-json-bad-partition", {**BASE, "startingOffsets": '{"t":{"zero":5}}'}, True,
     "startingOffsets", "partitions are numbers"),
    ("starting-json-flat", {**BASE, "startingOffsets": '{"t":5}'}, True,
     "startingOffsets", "object of partition"),
    ("ending-in-stream", {**BASE, "endingOffsets": "latest"}, True, "endingOffsets",
     "not valid in streaming queries"),
    ("ending-timestamp-in-stream", {**BASE, "endingTimestamp": "1000"}, True,
     "endingTimestamp", "not valid in streaming queries"),
    ("ending-by-timestamp-in-stream", {**BASE, "endingOffsetsByTimestamp": '{"t":{"0":1}}'},
     True, "endingOffsetsByTimestamp", "not valid in streaming queries"),
    ("starting-timestamp-text", {**BASE, "startingTimestamp": "yesterday"}, False,
     "startingTimestamp", "milliseconds since the epoch"),
    ("ending-timestamp-negative", {**BASE, "endingTimestamp": "-5"}, False,
     "endingTimestamp", "must not be negative"),
    ("by-timestamp-broken", {**BASE, "startingOffsetsByTimestamp": "{t:1}"}, False,
     "startingOffsetsByTimestamp", "not valid JSON"),
    ("by-timestamp-negative", {**BASE, "startingOffsetsByTimestamp": '{"t":{"0":-1}}'}, False,
     "startingOffsetsByTimestamp", "expected an integer >= 0"),
    ("strategy", {**BASE, "startingOffsetsByTimestampStrategy": "earliest"}, False,
     "startingOffsetsByTimestampStrategy", "'error' or 'latest'"),
    ("fail-on-data-loss", {**BASE, "failOnDataLoss": "yes"}, False, "failOnDataLoss",
     "'true' or 'false'"),
    ("include-headers", {**BASE, "includeHeaders": "1"}, False, "includeHeaders",
     "'true' or 'false'"),
    ("min-partitions-zero", {**BASE, "minPartitions": "0"}, False, "minPartitions",
     "positive integer"),
    ("min-partitions-text", {**BASE, "minPartitions": "many"}, False, "minPartitions",
     "must be an integer"),
    ("max-records-negative", {**BASE, "maxRecordsPerPartition": "-5"}, False,
     "maxRecordsPerPartition", "positive integer"),
    ("max-offsets-zero", {**BASE, "maxOffsetsPerTrigger": "0"}, True, "maxOffsetsPerTrigger",
     "positive integer"),
    ("max-offsets-in-batch", {**BASE, "maxOffsetsPerTrigger": "10"}, False,
     "maxOffsetsPerTrigger", "only applies to streaming"),
    ("min-offsets", {**BASE, "minOffsetsPerTrigger": "10"}, True, "minOffsetsPerTrigger",
     "not supported"),
    ("max-trigger-delay", {**BASE, "maxTriggerDelay": "5m"}, True, "maxTriggerDelay",
     "not supported"),
    ("poll-timeout", {**BASE, "kafkaConsumer.pollTimeoutMs": "soon"}, False,
     "kafkaConsumer.pollTimeoutMs", "must be an integer"),
    ("fetch-retries", {**BASE, "fetchOffset.numRetries": "-1"}, False,
     "fetchOffset.numRetries", "integer >= 0"),
    ("sasl", {**BASE, "kafka.security.protocol": "SASL_SSL"}, False, "kafka.security.protocol",
     "SASL is not supported"),
    ("protocol-word", {**BASE, "kafka.security.protocol": "TLS"}, False,
     "kafka.security.protocol", "PLAINTEXT or SSL"),
    ("ssl-option-on-plaintext", {**BASE, "kafka.ssl.truststore.location": "/ca.pem"}, False,
     "kafka.ssl.truststore.location", "kafka.security.protocol=SSL"),
    ("jks-truststore", {**BASE, "kafka.security.protocol": "SSL",
                        "kafka.ssl.truststore.location": "/t.jks",
                        "kafka.ssl.truststore.type": "JKS"}, False,
     "kafka.ssl.truststore.type", "only PEM stores are supported"),
    ("pkcs12-keystore", {**BASE, "kafka.security.protocol": "SSL",
                         "kafka.ssl.keystore.type": "PKCS12"}, False,
     "kafka.ssl.keystore.type", "only PEM stores are supported"),
    ("keystore-password", {**BASE, "kafka.security.protocol": "SSL",
                           "kafka.ssl.keystore.location": "/k.pem",
                           "kafka.ssl.keystore.password": "x"}, False,
     "kafka.ssl.keystore.password", "kafka.ssl.key.password"),
    ("truststore-password", {**BASE, "kafka.security.protocol": "SSL",
                             "kafka.ssl.truststore.location": "/ca.pem",
                             "kafka.ssl.truststore.password": "x"}, False,
     "kafka.ssl.truststore.password", "can not be used with a PEM trust store"),
    ("two-ca-options", {**BASE, "kafka.security.protocol": "SSL",
                        "kafka.ssl.truststore.location": "/a.pem",
                        "kafka.ssl.ca.location": "/b.pem"}, False,
     "kafka.ssl.ca.location", "say the same thing"),
    ("empty-ca", {**BASE, "kafka.security.protocol": "SSL", "kafka.ssl.ca.location": " "},
     False, "kafka.ssl.ca.location", "is empty"),
    ("key-without-cert", {**BASE, "kafka.security.protocol": "SSL",
                          "kafka.ssl.key.location": "/k.pem"}, False,
     "kafka.ssl.key.location", "no client certificate"),
    ("chain-without-key", {**BASE, "kafka.security.protocol": "SSL",
                           "kafka.ssl.keystore.certificate.chain": "-----BEGIN CERTIFICATE-----"},
     False, "kafka.ssl.keystore.key", "needs 'kafka.ssl.keystore.key'"),
    ("inline-ca-is-a-path", {**BASE, "kafka.security.protocol": "SSL",
                             "kafka.ssl.truststore.certificates": "/etc/ca.pem"}, False,
     "kafka.ssl.truststore.certificates", "must hold PEM text"),
    ("endpoint-identification", {**BASE, "kafka.security.protocol": "SSL",
                                 "kafka.ssl.endpoint.identification.algorithm": "dns"}, False,
     "kafka.ssl.endpoint.identification.algorithm", "'https'"),
    ("auto-offset-reset", {**BASE, "kafka.auto.offset.reset": "earliest"}, False,
     "kafka.auto.offset.reset", "'startingOffsets'"),
    ("value-deserializer", {**BASE, "kafka.value.deserializer": "x.Y"}, False,
     "kafka.value.deserializer", "read as bytes"),
    ("auto-commit", {**BASE, "kafka.enable.auto.commit": "true"}, False,
     "kafka.enable.auto.commit", "Spark checkpoints"),
    ("isolation", {**BASE, "kafka.isolation.level": "serializable"}, False,
     "kafka.isolation.level", "'read_committed', not 'serializable'"),
    ("request-timeout", {**BASE, "kafka.request.timeout.ms": "soon"}, False,
     "kafka.request.timeout.ms", "must be an integer"),
    ("fetch-bytes", {**BASE, "kafka.max.partition.fetch.bytes": "0"}, False,
     "kafka.max.partition.fetch.bytes", "positive integer"),
    ("typo-starting", {**BASE, "startingOffset": "earliest"}, False, "startingOffsets",
     "did you mean 'startingOffsets'"),
    ("typo-bootstrap", {"kafka.bootstrap.server": "h:1", "subscribe": "t"}, False,
     "kafka.bootstrap.servers", "did you mean 'kafka.bootstrap.servers'"),
    ("typo-truststore", {**BASE, "kafka.ssl.truststore.locaton": "/ca.pem"}, False,
     "kafka.ssl.truststore.location", "did you mean"),
]


@pytest.mark.parametrize(
    "options,streaming,option,words",
    [case[1:] for case in SOURCE_CASES],
    ids=[case[0] for case in SOURCE_CASES],
)
def test_source_option_refused(options, streaming, option, words):
    error = refused(options, streaming=streaming)
    assert error.option == option
    assert f"'{option}'" in str(error)
    assert words in str(error)


SINK_BASE = {"kafka.bootstrap.servers": "127.0.0.1:9092", "topic": "out"}

SINK_CASES = [
    ("no-bootstrap", {"topic": "t"}, "kafka.bootstrap.servers", "must be set"),
    ("subscribe", {**SINK_BASE, "subscribe": "t"}, "subscribe", "use the 'topic' option"),
    ("bad-topic", {**SINK_BASE, "topic": "a/b"}, "topic", "invalid topic name"),
    ("empty-topic", {**SINK_BASE, "topic": " "}, "topic", "is empty"),
    ("acks", {**SINK_BASE, "kafka.acks": "2"}, "kafka.acks", "all, -1, 0 or 1"),
    ("compression", {**SINK_BASE, "kafka.compression.type": "brotli"},
     "kafka.compression.type", "gzip, snappy, lz4, zstd"),
    ("key-serializer", {**SINK_BASE, "kafka.key.serializer": "x.Y"}, "kafka.key.serializer",
     "written as bytes"),
    ("idempotence", {**SINK_BASE, "kafka.enable.idempotence": "true", "kafka.acks": "1"},
     "kafka.enable.idempotence", "needs 'kafka.acks' all"),
    ("transactions-acks", {**SINK_BASE, "kafka.transactional.id": "x", "kafka.acks": "1"},
     "kafka.acks", "must be all"),
    ("batch-size", {**SINK_BASE, "kafka.batch.size": "0"}, "kafka.batch.size",
     "positive integer"),
    ("retries", {**SINK_BASE, "kafka.retries": "many"}, "kafka.retries", "must be an integer"),
    ("typo", {**SINK_BASE, "kafka.compresion.type": "lz4"}, "kafka.compression.type",
     "did you mean"),
]


@pytest.mark.parametrize(
    "options,option,words", [case[1:] for case in SINK_CASES], ids=[case[0] for case in SINK_CASES]
)
def test_sink_option_refused(options, option, words):
    error = refused(options, sink=True)
    assert error.option == option
    assert f"'{option}'" in str(error)
    assert words in str(error)


def test_defaults():
    batch = parseSourceOptions(BASE, streaming=False)
    assert (batch.starting.kind, batch.ending.kind) == ("earliest", "latest")
    assert batch.failOnDataLoss and not batch.includeHeaders
    assert batch.connection.securityProtocol == "PLAINTEXT"
    stream = parseSourceOptions(BASE, streaming=True)
    assert stream.starting.kind == "latest" and stream.ending is None
    sink = parseSinkOptions(SINK_BASE)
    assert (sink.acks, sink.compression, sink.topic) == (-1, "none", "out")


def test_case_insensitive():
    """
    Spark's options are case-insensitive; so are these.
    """
    config = parseSourceOptions(
        {"KAFKA.BOOTSTRAP.SERVERS": "h:1", "SUBSCRIBE": "a,b,a", "STARTINGOFFSETS": "Latest",
         "includeheaders": "TRUE"},
        streaming=True,
    )
    assert config.subscription.topics == ("a", "b")
    assert config.starting.kind == "latest"
    assert config.includeHeaders


def test_offsets_json():
    config = parseSourceOptions(
        {**BASE, "startingOffsets": '{"t":{"1":-2,"0":23}}',
         "endingOffsets": '{"t":{"0":50,"1":-1}}'},
        streaming=False,
    )
    assert config.starting.offsetMap() == {("t", 0): 23, ("t", 1): -2}
    assert config.ending.offsetMap() == {("t", 0): 50, ("t", 1): -1}


def test_timestamp_precedence():
    """
    As in Spark: a global timestamp beats per-partition timestamps, which
    beat offsets.
    """
    config = parseSourceOptions(
        {**BASE, "startingOffsets": '{"t":{"0":5}}',
         "startingOffsetsByTimestamp": '{"t":{"0":1000}}', "startingTimestamp": "2000"},
        streaming=False,
    )
    assert (config.starting.kind, config.starting.timestamp) == ("timestamp", 2000)
    config = parseSourceOptions(
        {**BASE, "startingOffsets": '{"t":{"0":5}}',
         "startingOffsetsByTimestamp": '{"t":{"0":1000}}'},
        streaming=False,
    )
    assert config.starting.timestampMap() == {("t", 0): 1000}


def test_tls_options():
    config = parseSourceOptions(
        {**BASE, "kafka.security.protocol": "ssl", "kafka.ssl.truststore.location": "/ca.pem",
         "kafka.ssl.truststore.type": "PEM", "kafka.ssl.keystore.location": "/client.pem",
         "kafka.ssl.keystore.type": "pem", "kafka.ssl.key.password": "pw",
         "kafka.ssl.endpoint.identification.algorithm": ""},
        streaming=False,
    )
    c = config.connection
    assert (c.securityProtocol, c.cafile, c.certfile, c.keyPassword) == (
        "SSL", "/ca.pem", "/client.pem", "pw"
    )
    assert not c.checkHostname
    assert "pw" not in repr(c)
    librdkafka = parseSourceOptions(
        {**BASE, "kafka.security.protocol": "SSL", "kafka.ssl.ca.location": "/ca.pem",
         "kafka.ssl.certificate.location": "/c.pem", "kafka.ssl.key.location": "/k.pem"},
        streaming=False,
    ).connection
    assert (librdkafka.cafile, librdkafka.certfile, librdkafka.keyfile) == (
        "/ca.pem", "/c.pem", "/k.pem"
    )
    assert librdkafka.checkHostname


# Real Kafka client settings (consumer and producer) that a job may carry
# over from format("kafka"): none of them may look like a typo of ours.
KAFKA_CLIENT_SETTINGS = """
group.id client.rack fetch.min.bytes fetch.max.bytes fetch.max.wait.ms heartbeat.interval.ms
max.poll.records max.poll.interval.ms session.timeout.ms receive.buffer.bytes send.buffer.bytes
reconnect.backoff.ms reconnect.backoff.max.ms retry.backoff.ms metadata.max.age.ms
connections.max.idle.ms default.api.timeout.ms check.crcs client.dns.lookup
ssl.protocol ssl.enabled.protocols ssl.provider ssl.cipher.suites ssl.keymanager.algorithm
ssl.trustmanager.algorithm ssl.secure.random.implementation ssl.engine.factory.class
security.providers sasl.mechanism sasl.jaas.config linger.ms buffer.memory max.block.ms
max.request.size delivery.timeout.ms max.in.flight.requests.per.connection
partitioner.class metrics.num.samples metric.reporters allow.auto.create.topics
exclude.internal.topics partition.assignment.strategy socket.connection.setup.timeout.ms
""".split()


def test_kafka_client_settings_pass():
    options = {**BASE, **{f"kafka.{name}": "1" for name in KAFKA_CLIENT_SETTINGS}}
    parseSourceOptions(options, streaming=False)
    parseSinkOptions({**SINK_BASE, **{f"kafka.{name}": "1" for name in KAFKA_CLIENT_SETTINGS}})


def test_unrelated_options_pass():
    """
    Spark puts writer options (checkpointLocation, path) into the same map;
    options that are not near misses of ours pass, as they do in Spark.
    """
    parseSinkOptions({**SINK_BASE, "checkpointLocation": "/tmp/cp", "path": "x"})
    parseSourceOptions({**BASE, "checkpointLocation": "/tmp/cp", "groupIdPrefix": "g"}, True)
