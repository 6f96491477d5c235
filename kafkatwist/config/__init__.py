"""
Broker settings under Kafka's own property names, and the one registry of
configuration keys.

A C{server.properties} file and C{--override key=value} pairs are merged,
then every known key is parsed and checked.  A bad value raises
L{ConfigError} naming the key and why, so the daemon refuses to start with
one line; an unknown key is only a warning, as in Kafka.

The registry: L{KEYS} holds every broker key (name, validator, default,
documentation; its DescribeConfigs type follows from the validator), and
L{TOPIC_KEYS} every topic-level key with its broker counterpart (the
synonyms a topic inherits from, finest first).  Everything else derives
from them: the topic configs the log validates and resolves
(L{kafkatwist.log.config}), the broker settings handed to the log manager,
DescribeConfigs' types, synonyms and documentation.

The shared definitions (L{ConfigError}, L{ConfigType}, L{Listener}, ...)
live in L{kafkatwist.config.base} and the value parsers in
L{kafkatwist.config.values}; both are re-exported here.
"""

from __future__ import annotations

import difflib
import re
import sys
from dataclasses import dataclass, replace
from typing import Any, Callable

from twisted.logger import Logger

from kafkatwist.config.base import (
    CLUSTER_WIDE,
    ConfigError,
    ConfigSource as ConfigSource,
    ConfigType,
    INT_MAX,
    Listener,
    LONG_MAX,
    PER_BROKER,
    READ_ONLY,
    SASL_MECHANISMS,
    SASL_PROTOCOLS as SASL_PROTOCOLS,
    SECURITY_PROTOCOLS as SECURITY_PROTOCOLS,
    TLS_PROTOCOLS as TLS_PROTOCOLS,
)
from kafkatwist.config.values import (
    _bool,
    _choice,
    _compressionLevel,
    _cpuAffinity,
    _double,
    _int,
    _list,
    _listOf,
    _long,
    _mechanisms,
    _messageFormatVersion,
    _ofType,
    _optional,
    _optionalLong,
    _optionalString,
    parseListeners,
    _perIpOverrides,
    _principalRules,
    _protocolMap,
    REPLICA_SELECTORS as REPLICA_SELECTORS,
    _replicaSelector,
    _semicolonList,
    _string,
)
from kafkatwist.config.catalogue import BROKER_CONFIGS

log = Logger()


@dataclass(frozen=True)
class Key:
    """
    A broker key.

    @ivar parse: C{parse(key, text)} -> typed value, raising
        L{ConfigError}; its C{configType} attribute is the key's Kafka type
        (STRING when absent).
    @ivar default: the default as text, or C{None} (unset).
    @ivar sensitive: never shown (DescribeConfigs' PASSWORD).
    @ivar update: Kafka's "Update Mode": L{READ_ONLY} (set in
        C{server.properties} and restart), L{CLUSTER_WIDE} (also as a
        dynamic config, per broker or as the cluster default) or
        L{PER_BROKER} (dynamic, per broker only).  A key of Kafka's takes
        it from L{kafkatwist.config.catalogue} (left C{None} here: L{KEYS}
        fills it in); only kafkatwist's own keys state it.
    """

    name: str
    parse: Callable[[str, str], Any]
    default: str | None
    doc: str
    sensitive: bool = False
    update: str | None = None

    @property
    def dynamic(self) -> bool:
        return self.update not in (None, READ_ONLY)

    @property
    def type(self) -> ConfigType:
        if self.sensitive:
            return ConfigType.PASSWORD
        kafka = BROKER_CONFIGS.get(self.name)
        if kafka is not None:
            return ConfigType[kafka[0].upper()]
        return getattr(self.parse, "configType", ConfigType.STRING)

    @property
    def used(self) -> bool:
        """
        Whether kafkatwist reads the key (a key of Kafka's it does not use
        is only stored and described: C{docs/configs.md}).
        """
        return not isinstance(self.parse, _UnusedParse)

    def defaultValue(self) -> Any:
        return None if self.default is None else self.parse(self.name, self.default)


#: C{listener.name.<listener, lower case>.sasl.enabled.mechanisms}
_LISTENER_MECHANISMS = re.compile(r"^listener\.name\.([^.]+)\.sasl\.enabled\.mechanisms$")

#: the SSL keys a listener may set for itself, C{listener.name.<listener,
#: lower case>.<key>} (Kafka's per-listener security configs): in
#: C{server.properties}, or dynamically per broker -- how a certificate is
#: rotated without a restart.
LISTENER_SSL_KEYS = (
    "ssl.keystore.location",
    "ssl.key.password",
    "ssl.truststore.location",
    "ssl.client.auth",
    "ssl.enabled.protocols",
    "ssl.cipher.suites",
)
_LISTENER_SSL = re.compile(r"^listener\.name\.([^.]+)\.(ssl\..+)$")


def listenerSslKey(name: str) -> tuple[str, str] | None:
    """
    @return: C{(LISTENER, key)} for C{listener.name.<listener>.<key>} with
        C{key} one of L{LISTENER_SSL_KEYS}, else C{None}.
    """
    match = _LISTENER_SSL.match(name)
    if match is None or match[2] not in LISTENER_SSL_KEYS:
        return None
    return match[1].upper(), match[2]


#: the connection limits a listener may set for itself,
#: C{listener.name.<listener>.<key>}: cluster-wide, as Kafka's
#: C{ClusterLevelListenerConfigs}
LISTENER_CONNECTION_KEYS = ("max.connection.creation.rate",)
_LISTENER_KEY = re.compile(r"^listener\.name\.([^.]+)\.(.+)$")


def listenerConnectionKey(name: str) -> tuple[str, str] | None:
    """
    @return: C{(LISTENER, key)} for C{listener.name.<listener>.<key>} with
        C{key} one of L{LISTENER_CONNECTION_KEYS}, else C{None}.
    """
    match = _LISTENER_KEY.match(name)
    if match is None or match[2] not in LISTENER_CONNECTION_KEYS:
        return None
    return match[1].upper(), match[2]


def listenerKey(name: str) -> tuple[str, str] | None:
    """
    @return: C{(LISTENER, key)} for any key a listener sets for itself
        (SSL or connection limits), else C{None}.
    """
    return listenerSslKey(name) or listenerConnectionKey(name)


def keySpec(name: str) -> Key | None:
    """
    The registry entry of C{name}: a broker key, or the base key of a
    listener's own key (its SSL keys are updated per broker, its connection
    limits cluster-wide).
    """
    spec = KEYS.get(name)
    if spec is not None:
        return spec
    prefixed = listenerKey(name)
    if prefixed is None:
        return None
    base = KEYS[prefixed[1]]
    update = PER_BROKER if listenerSslKey(name) else CLUSTER_WIDE
    return Key(name, base.parse, None, f"{base.doc} For listener {prefixed[0]}.", base.sensitive, update)


#: keys Kafka updates dynamically that kafkatwist applies only at start-up:
#: a dynamic update of one is refused ("Cannot update these configs
#: dynamically"), where Kafka would take it
RESTART_ONLY = frozenset({
    "listeners",
    "advertised.listeners",
    "listener.security.protocol.map",
    "sasl.enabled.mechanisms",
    "num.replica.fetchers",
    "producer.id.expiration.ms",
})

#: keys Kafka reads only at start-up that kafkatwist updates dynamically
#: (cluster-wide), as it did before it knew Kafka's catalogue: the coarser
#: synonyms of the dynamic log.retention.ms and log.roll.ms
DYNAMIC_HERE = frozenset({
    "log.retention.hours",
    "log.retention.minutes",
    "log.roll.hours",
    "log.roll.jitter.hours",
})

_UNUSED_DOC = (
    "Kafka's key, which kafkatwist does not use: stored, described and dynamically "
    "updatable as in Kafka, with no effect here."
)
_KAFKA_RANGE = re.compile(r"^\[(-?[0-9.]+),\.\.\.(?:,(-?[0-9.]+))?\]$")
_KAFKA_CHOICES = re.compile(r"^\[([A-Za-z0-9_.-]+(?:, [A-Za-z0-9_.-]+)*)\]$")


class _UnusedParse:
    """
    The validator of a Kafka key kafkatwist does not use: Kafka's checks
    (its type, and the range or choices Kafka states); the value stays
    text.  L{Key.used} tells such keys by it.
    """

    def __init__(self, kind: str, valid: str | None) -> None:
        self.check = _kafkaCheck(kind, valid)
        self.configType = ConfigType[kind.upper()]

    def __call__(self, key: str, raw: str) -> str:
        self.check(key, raw)
        return raw


def _kafkaKey(name: str, entry: tuple) -> Key:
    kind, default, _, valid = entry
    return Key(name, _UnusedParse(kind, valid), default, _UNUSED_DOC, sensitive=kind == "password")


def _kafkaCheck(kind: str, valid: str | None):
    lo = hi = None
    match = _KAFKA_RANGE.match(valid or "")
    if match:
        lo = float(match[1])
        hi = float(match[2]) if match[2] is not None else None
    if kind in ("int", "short", "long"):
        bits = {"int": 31, "short": 15, "long": 63}[kind]
        return _int(
            int(lo) if lo is not None else -(2**bits),
            int(hi) if hi is not None else 2**bits - 1,
        )
    if kind == "double":
        return _double(lo if lo is not None else -1.7976931348623157e308,
                       hi if hi is not None else 1.7976931348623157e308)
    if kind == "boolean":
        return _bool
    choices = _KAFKA_CHOICES.match(valid or "") if kind == "string" else None
    if choices:
        allowed = {c.lower() for c in choices[1].split(", ")}

        def oneOf(key: str, raw: str) -> str:
            if raw.strip().lower() not in allowed:
                raise ConfigError(key, f"{raw!r} is not one of {valid}")
            return raw

        return oneOf
    return lambda key, raw: raw


def _fromCatalogue(key: Key) -> Key:
    """
    C{key} with its update mode: Kafka's, from the catalogue, for a key of
    Kafka's (except L{RESTART_ONLY} and L{DYNAMIC_HERE});
    kafkatwist's own keys state theirs (read-only when they do not).
    """
    kafka = BROKER_CONFIGS.get(key.name)
    if kafka is None:
        return key if key.update is not None else replace(key, update=READ_ONLY)
    if key.update is not None:
        raise AssertionError(f"{key.name}: its update mode is Kafka's, in the catalogue")
    if key.name in RESTART_ONLY:
        return replace(key, update=READ_ONLY)
    if key.name in DYNAMIC_HERE:
        return replace(key, update=CLUSTER_WIDE)
    return replace(key, update=kafka[2])


KEYS: dict[str, Key] = {
    k.name: _fromCatalogue(k)
    for k in [
        Key("node.id", _int(0), "1", "This broker's id."),
        Key("broker.id", _int(-1), None, "Old name of node.id (ZooKeeper-mode Kafka's); either may be set."),
        Key("cluster.id", _optionalString, None, "Cluster id; generated and kept in meta.properties when unset."),
        Key("listeners", _string, "PLAINTEXT://127.0.0.1:9092", "Where to listen: NAME://host:port, comma separated."),
        Key("advertised.listeners", _optionalString, None, "What clients are told to connect to; defaults to listeners."),
        Key("listener.security.protocol.map", _protocolMap,
            "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
            "Listener name to security protocol: PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL."),
        Key("log.dirs", _optionalString, None, "Data directories (comma separated); first one wins over log.dir."),
        Key("log.dir", _string, "./data", "Data directory when log.dirs is unset."),
        Key("num.network.threads", _int(1, 64), "1", "Processors: threads that each run a reactor and own connections."),
        Key("num.io.threads", _int(1, 256), "2", "Handler threads that run request handlers."),
        Key("request.threads.cpu.affinity", _cpuAffinity, "auto",
            "CPUs the Processors and handler threads run on: auto (all on one CPU when the process "
            "may use several), none (wherever the OS puts them), or CPU numbers such as 3 or 0,2-3."),
        Key("queued.max.requests", _int(1), "500", "Requests the RequestChannel holds before Processors stop reading."),
        Key("queued.max.request.bytes", _long(-1), "-1", "Bytes of queued requests before reading is muted (-1: unbounded)."),
        Key("socket.request.max.bytes", _int(1), "104857600", "Largest request frame accepted."),
        Key("fetch.max.bytes", _int(1024), "57671680",
            "The most one Fetch answers, whatever its max_bytes asks (KIP-541); its first batch "
            "still goes out whole."),
        Key("socket.send.buffer.bytes", _int(-1), "102400", "SO_SNDBUF (-1: OS default)."),
        Key("socket.receive.buffer.bytes", _int(-1), "102400", "SO_RCVBUF (-1: OS default)."),
        Key("connections.max.idle.ms", _long(1), "600000", "Idle connections are closed after this."),
        Key("max.incremental.fetch.session.cache.slots", _int(0), "1000",
            "Incremental fetch sessions (KIP-227) the broker keeps; 0: none."),
        Key("max.connections", _int(1), str(INT_MAX), "Connections the broker accepts in all."),
        Key("max.connections.per.ip", _int(1), str(INT_MAX), "Connections accepted from one address."),
        Key("max.connections.per.ip.overrides", _perIpOverrides, "",
            "Per-address exceptions to max.connections.per.ip: host:count, comma separated."),
        Key("max.connection.creation.rate", _int(0), str(INT_MAX),
            "Connections the broker accepts per second (KIP-612); over it the acceptor delays "
            "accepting. A listener may set its own: listener.name.<listener>.max.connection.creation.rate."),
        Key("ssl.keystore.location", _optionalString, None, "PEM file with the certificate chain and private key."),
        Key("ssl.key.password", _optionalString, None, "Password of the private key, if encrypted.", sensitive=True),
        Key("ssl.truststore.location", _optionalString, None, "PEM CA bundle used to verify client certificates."),
        Key("ssl.client.auth", _choice("none", "requested", "required"), "none", "Whether clients must present a certificate."),
        Key("ssl.principal.mapping.rules", _principalRules, "DEFAULT",
            "Client certificate DN to principal name: RULE:pattern/replacement/[LU] and DEFAULT, "
            "comma separated, first match wins."),
        Key("ssl.enabled.protocols", _list, "TLSv1.2,TLSv1.3", "TLS versions SSL listeners accept (TLSv1.2, TLSv1.3)."),
        Key("ssl.cipher.suites", _list, "",
            "Cipher suites SSL listeners accept, by Kafka (IANA) or OpenSSL name; empty: AEAD suites "
            "with forward secrecy only (ECDHE with AES-GCM or ChaCha20-Poly1305, and every TLS 1.3 suite)."),
        Key("sasl.enabled.mechanisms", _mechanisms, "GSSAPI",
            "SASL mechanisms SASL listeners offer: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 (Kafka's default, "
            "GSSAPI, is not implemented); per listener: listener.name.<name>.sasl.enabled.mechanisms."),
        Key("connection.failed.authentication.delay.ms", _int(0), "100",
            "A refused SASL client gets its answer, and is disconnected, this much later."),
        Key("connections.max.reauth.ms", _long(0), "0",
            "SASL sessions last this long; clients re-authenticate before (KIP-368), others are "
            "disconnected at their next request. 0: sessions do not expire."),
        Key("authorizer.class.name", _string, "",
            "The authorizer plugin; org.apache.kafka.metadata.authorizer.StandardAuthorizer is the "
            "built-in ACL authorizer. Empty: no authorization (everything allowed)."),
        Key("super.users", _semicolonList, "", "Principals the authorizer allows everything, e.g. User:admin;User:ops."),
        Key("allow.everyone.if.no.acl.found", _bool, "false",
            "Whether the built-in authorizer allows access to a resource that has no ACLs."),
        Key("plugin.paths", _list, "", "Directories searched for drop-in request handler plugins."),
        Key("plugin.load.failure.policy", _choice("fail", "skip"), "fail",
            "A module on plugin.paths that fails to import: fail (refuse to start) or skip (log and start without it)."),
        Key("auto.create.topics.enable", _bool, "true", "Create a topic on first Metadata/Produce for it."),
        Key("delete.topic.enable", _bool, "true", "Allow DeleteTopics."),
        Key("num.partitions", _int(1), "1", "Partitions of auto-created topics."),
        Key("max.broker.partitions", _int(1), "10000",
            "Partitions this broker may host in all (KIP-578's name); creating more is refused "
            "with POLICY_VIOLATION."),
        Key("max.partitions.per.request", _int(1), "10000",
            "Partitions one CreateTopics or CreatePartitions request may add in all (Kafka's "
            "fixed 10000); more is refused with POLICY_VIOLATION."),
        Key("default.replication.factor", _int(1), "1",
            "Replicas of topics created without a replication factor (auto-created ones too); above 1 "
            "only with zookeeper.connect."),
        Key("zookeeper.connect", _optionalString, None,
            "ZooKeeper ensemble of the cluster, host:port[,host:port...][/chroot]; unset: this broker "
            "is a cluster of one."),
        Key("zookeeper.session.timeout.ms", _int(1000), "18000",
            "ZooKeeper session timeout: a broker silent this long is dead to the cluster."),
        Key("zookeeper.connection.timeout.ms", _optional(_int(1)), None,
            "How long start-up waits for ZooKeeper (unset: zookeeper.session.timeout.ms)."),
        Key("offsets.topic.replication.factor", _int(1, 32767), "3",
            "Replicas of __consumer_offsets when it is created (capped at the live brokers then, as "
            "Kafka; 1 without zookeeper.connect)."),
        Key("transaction.state.log.replication.factor", _int(1, 32767), "3",
            "Replicas of __transaction_state when it is created (capped like "
            "offsets.topic.replication.factor)."),
        Key("unclean.leader.election.enable", _bool, "false",
            "Elect a replica outside the ISR when no ISR member is alive (data loss)."),
        Key("auto.leader.rebalance.enable", _bool, "true",
            "The controller moves leadership back to preferred replicas (the first of each "
            "assignment) when a broker's share of them is off by more than "
            "leader.imbalance.per.broker.percentage."),
        Key("leader.imbalance.check.interval.seconds", _long(1), "300",
            "How often the controller checks preferred-leader imbalance."),
        Key("leader.imbalance.per.broker.percentage", _int(0, 100), "10",
            "Share of a broker's preferred partitions it may not lead before the controller "
            "rebalances."),
        Key("controlled.shutdown.enable", _bool, "true",
            "On SIGTERM, move leadership away from this broker before it leaves the cluster."),
        Key("controlled.shutdown.max.retries", _int(0), "3",
            "Attempts at controlled shutdown before the broker stops anyway."),
        Key("controlled.shutdown.retry.backoff.ms", _long(0), "5000",
            "Wait between controlled shutdown attempts."),
        Key("broker.shutdown.timeout.ms", _long(0), "25000",
            "On SIGTERM, the longest the broker waits on others -- controlled shutdown, leaving "
            "ZooKeeper -- before it stops anyway (Kafka has no such bound); its logs are flushed and "
            "its clean-shutdown marker written after it either way."),
        Key("message.max.bytes", _int(0), "1048588", "Largest record batch accepted."),
        Key("log.segment.bytes", _int(14), "1073741824", "Roll a segment past this size."),
        Key("log.roll.ms", _optionalLong(1), None, "Roll a segment older than this."),
        Key("log.roll.hours", _int(1), "168", "Roll a segment older than this (when log.roll.ms is unset)."),
        Key("log.retention.ms", _optionalLong(-1), None, "Delete segments older than this (-1: forever)."),
        Key("log.retention.minutes", _optional(_int(-1)), None, "As log.retention.ms, in minutes."),
        Key("log.retention.hours", _int(-1), "168", "As log.retention.ms, in hours."),
        Key("log.retention.bytes", _long(-1), "-1", "Delete old segments past this size per partition."),
        Key("log.retention.check.interval.ms", _long(1), "300000", "How often retention runs."),
        Key("log.index.interval.bytes", _int(0), "4096", "Bytes between offset index entries."),
        Key("log.flush.interval.messages", _long(1), str(LONG_MAX), "Fsync after this many messages (1: before acknowledging)."),
        Key("log.flush.interval.ms", _optionalLong(0), None, "Fsync data older than this."),
        Key("log.flush.scheduler.interval.ms", _long(1), "1000", "How often time-based flush is checked."),
        Key("log.message.timestamp.type", _choice("CreateTime", "LogAppendTime"), "CreateTime", "Timestamp type of new topics."),
        Key("log.cleanup.policy", _listOf("delete", "compact"), "delete", "Cleanup policy of new topics."),
        Key("log.index.size.max.bytes", _int(4), "10485760", "Largest offset index of a segment; the segment rolls when it is full."),
        Key("min.insync.replicas", _int(1), "1", "Replicas that must acknowledge acks=all (one broker: always met)."),
        Key("replica.lag.time.max.ms", _long(1), "30000",
            "A follower that has not caught up with the leader for this long leaves the ISR."),
        Key("replica.fetch.max.bytes", _int(0), "1048576", "Bytes a follower fetches per partition (at least one batch)."),
        Key("replica.fetch.response.max.bytes", _int(0), "10485760", "Bytes a follower's fetch asks for in all."),
        Key("replica.fetch.wait.max.ms", _int(0), "500", "How long a follower's fetch waits on the leader for data."),
        Key("replica.fetch.min.bytes", _int(1), "1", "Bytes a follower's fetch waits for."),
        Key("replica.fetch.backoff.ms", _int(0), "1000", "A follower's pause after a failed fetch."),
        Key("replica.socket.timeout.ms", _int(1), "30000", "Timeout of a follower's requests to its leader."),
        Key("num.replica.fetchers", _int(1), "1", "Fetcher threads per source broker."),
        Key("broker.rack", _optionalString, None,
            "This broker's rack: Metadata reports it, new partitions' replicas are placed on "
            "different racks when every broker has one, and a replica selector may send a "
            "consumer with the same client.rack to this broker's replicas."),
        Key("replica.selector.class", _replicaSelector, None,
            "Which replica a consumer (Fetch v11+) should fetch from, as the leader tells it "
            "(KIP-392): Kafka's org.apache.kafka.common.replica.RackAwareReplicaSelector (a "
            "replica in the consumer's client.rack) or LeaderSelector; unset: the leader."),
        Key("leader.replication.throttled.rate", _long(0), str(LONG_MAX),
            "Bytes per second this broker sends, as a leader, for the partitions a topic's "
            "leader.replication.throttled.replicas names on it; over it, followers out of the ISR "
            "get no data for them.",
            update=CLUSTER_WIDE),
        Key("follower.replication.throttled.rate", _long(0), str(LONG_MAX),
            "Bytes per second this broker fetches, as a follower, for the partitions a topic's "
            "follower.replication.throttled.replicas names on it; over it, those not caught up "
            "are left out of its fetches.",
            update=CLUSTER_WIDE),
        Key("replication.quota.window.num", _int(1), "11", "Samples replication throttles measure over."),
        Key("replication.quota.window.size.seconds", _int(1), "1", "Length of one replication throttle sample."),
        Key("replica.high.watermark.checkpoint.interval.ms", _long(1), "5000",
            "How often the high watermarks are written to replication-offset-checkpoint."),
        Key("offsets.commit.timeout.ms", _int(1), "5000",
            "How long a coordinator's append waits for the ISR of a replicated partition."),
        Key("request.timeout.ms", _int(1), "30000",
            "How long a broker's request to another broker may take (the transaction "
            "coordinator's WriteTxnMarkers); the leader writing a marker waits this long for "
            "its ISR."),
        Key("compression.type", _choice("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"), "producer",
            "Final compression of topics' data; kafkatwist keeps what the producer sent."),
        Key("log.message.downconversion.enable", _bool, "true",
            "Whether Fetch v0-3 may be answered by converting stored batches to the old message "
            "formats; when false such fetches get UNSUPPORTED_VERSION."),
        Key("log.message.format.version", _messageFormatVersion, "3.0-IV1",
            "Deprecated (Kafka 3.0): accepted and ignored, as by Kafka 3.x with "
            "inter.broker.protocol.version 3.0 or later; batches are always stored in format v2."),
        Key("log.message.timestamp.difference.max.ms", _long(0), str(LONG_MAX),
            "Deprecated: both limits below when they are unset."),
        Key("log.message.timestamp.before.max.ms", _long(0), str(LONG_MAX),
            "How far a CreateTime timestamp may be behind the broker's clock; older records are "
            "refused with INVALID_TIMESTAMP."),
        Key("log.message.timestamp.after.max.ms", _long(0), str(LONG_MAX),
            "How far a CreateTime timestamp may be ahead of the broker's clock."),
        Key("log.roll.jitter.ms", _optionalLong(0), None,
            "Up to this much is taken off segment.ms per segment, so segments do not all roll at "
            "once."),
        Key("log.roll.jitter.hours", _int(0), "0", "As log.roll.jitter.ms, in hours."),
        Key("log.preallocate", _bool, "false",
            "Kafka preallocates segment files; kafkatwist's segments grow as written (no effect on "
            "what is stored or served)."),
        Key("log.segment.delete.delay.ms", _long(0), "60000",
            "Kafka waits this long before removing a deleted segment's files; kafkatwist removes "
            "them once no reader holds them."),
        Key("compression.gzip.level", _compressionLevel(-1, 1, 9), "-1",
            "Level of gzip when the broker compresses; kafkatwist keeps batches as the producer "
            "compressed them."),
        Key("compression.lz4.level", _compressionLevel(None, 1, 17), "9",
            "Level of lz4 when the broker compresses (see compression.gzip.level)."),
        Key("compression.zstd.level", _compressionLevel(None, -131072, 22), "3",
            "Level of zstd when the broker compresses (see compression.gzip.level)."),
        Key("log.local.retention.ms", _long(-2), "-2",
            "Tiered storage's local retention (-2: retention.ms); without tiered storage all data "
            "is local and retention.ms applies."),
        Key("log.local.retention.bytes", _long(-2), "-2",
            "Tiered storage's local retention (-2: retention.bytes); see log.local.retention.ms."),
        Key("log.cleaner.enable", _bool, "true", "Run the log cleaner, which compacts topics with cleanup.policy=compact."),
        Key("log.cleaner.threads", _int(0, 64), "1", "Cleaner threads, each driving one cleaner process."),
        Key("log.cleaner.dedupe.buffer.size", _long(1 << 16), "134217728",
            "Memory for the key-hash -> offset maps of all cleaner threads together."),
        Key("log.cleaner.io.buffer.size", _int(1 << 12), "524288", "Read and write buffer memory of all cleaner threads together."),
        Key("log.cleaner.io.buffer.load.factor", _double(0.01, 1.0), "0.9",
            "How full a dedupe map may get before a cleaning pass stops mapping."),
        Key("log.cleaner.io.max.bytes.per.second", _double(1.0, 1.7976931348623157e308), "1.7976931348623157E308",
            "Bytes per second the cleaners may read and write together."),
        Key("log.cleaner.backoff.ms", _long(0), "15000", "Sleep of a cleaner thread that found nothing to clean."),
        Key("log.cleaner.min.cleanable.ratio", _double(0.0, 1.0), "0.5",
            "Default min.cleanable.dirty.ratio: dirty share of a log above which it is cleaned."),
        Key("log.cleaner.delete.retention.ms", _long(0), "86400000",
            "Default delete.retention.ms: how long tombstones stay after the cleaner first sees them."),
        Key("log.cleaner.min.compaction.lag.ms", _long(0), "0",
            "Default min.compaction.lag.ms: records younger than this are not compacted."),
        Key("log.cleaner.max.compaction.lag.ms", _long(1), str(LONG_MAX),
            "Default max.compaction.lag.ms: records older than this are compacted whatever the dirty ratio."),
        Key("group.initial.rebalance.delay.ms", _int(0), "3000", "Wait for more members before the first rebalance of an empty group."),
        Key("group.min.session.timeout.ms", _int(0), "6000", "Smallest session timeout a member may ask for."),
        Key("group.max.session.timeout.ms", _int(0), "1800000", "Largest session timeout a member may ask for."),
        Key("group.consumer.heartbeat.interval.ms", _int(1), "5000",
            "Heartbeat interval of consumer-protocol (KIP-848) group members."),
        Key("group.consumer.session.timeout.ms", _int(1), "45000",
            "A consumer-protocol member that does not heartbeat for this long is removed."),
        Key("group.consumer.assignors", _listOf("uniform", "range"), "uniform,range",
            "Server-side assignors of consumer-protocol groups; the first is the default."),
        Key("group.consumer.max.size", _int(1), str(2**31 - 1),
            "Most members of a consumer-protocol group."),
        Key("offsets.retention.minutes", _int(1), "10080", "Committed offsets of empty groups expire after this."),
        Key("producer.id.expiration.ms", _int(1), "86400000", "Idle idempotent producer state is dropped after this."),
        Key("offsets.topic.num.partitions", _int(1), "50", "Partitions of __consumer_offsets."),
        Key("offsets.topic.segment.bytes", _int(1), "65536",
            "segment.bytes of __consumer_offsets when it is created. Kafka's default is 100 MiB; "
            "here 64 KiB, because the cleaner never touches an active segment and loading the "
            "groups replays it: 50 partitions of small segments keep start-up and disk use bounded."),
        Key("offsets.retention.check.interval.ms", _long(1), "600000",
            "How often expired committed offsets are removed."),
        Key("offset.metadata.max.bytes", _int(0), "4096",
            "Largest metadata string an offset commit may carry."),
        Key("transaction.state.log.num.partitions", _int(1), "50", "Partitions of __transaction_state."),
        Key("transaction.state.log.segment.bytes", _int(1), "104857600",
            "segment.bytes of __transaction_state when it is created."),
        Key("transaction.max.timeout.ms", _int(1), "900000",
            "Largest transaction.timeout.ms a transactional producer may ask for."),
        Key("transactional.id.expiration.ms", _int(1), "604800000",
            "A transactional id idle this long (no transaction open) is forgotten."),
        Key("transaction.abort.timed.out.transaction.cleanup.interval.ms", _int(1), "10000",
            "How often transactions past their timeout are aborted."),
        Key("transaction.remove.expired.transaction.cleanup.interval.ms", _int(1), "3600000",
            "How often expired transactional ids are removed."),
        Key("quota.window.num", _int(1), "11", "Samples client quotas measure usage over."),
        Key("quota.window.size.seconds", _int(1), "1", "Length of one client quota sample."),
        Key("request.logging.enable", _bool, "false", "Log every completed request at debug level (Kafka's request logger)."),
        Key("logger.level", _choice("debug", "info", "warn", "error"), "info",
            "The lowest level of log lines written (debug adds tracebacks of handler errors and "
            "the handler chain of every ApiKey)."),
        Key("metrics.http.listener", _optionalString, None, "host:port for Prometheus metrics and the web console over HTTP, or https://host:port over TLS with ssl.keystore.location (off when unset)."),
    ]
}
# Kafka's keys kafkatwist does not use: stored, described and updated as
# Kafka's catalogue says, with no effect here.
KEYS.update(
    (name, _fromCatalogue(_kafkaKey(name, entry)))
    for name, entry in BROKER_CONFIGS.items()
    if name not in KEYS
)

#: keys Kafka knows that make no sense for one broker; accepted silently
_TOLERATED = re.compile(
    r"^(process\.roles|controller\.|inter\.broker\.|zookeeper\.|transaction\.state\.log\."
    r"|num\.recovery\.threads\.per\.data\.dir"
    r"|num\.replica\.|sasl\.mechanism\.inter\.broker\.|sasl\.(jaas|server|login|kerberos)\."
    r"|listener\.name\.)"
)


@dataclass(frozen=True)
class TopicKey:
    """
    A topic-level key and its broker counterpart.

    Its type and validator are its broker key's (C{synonyms[0]}), its
    default is what a broker with no settings hands down.

    @ivar synonyms: C{(broker key, factor)}, finest first: the first one
        set gives the topic's default, times C{factor} (Kafka's
        C{log.retention.hours} for C{retention.ms}; -1 stays -1).
    @ivar fallback: the default as text when every synonym is unset.
    """

    name: str
    synonyms: tuple[tuple[str, int], ...]
    doc: str
    fallback: str | None = None
    #: the validator of a topic key without a broker counterpart
    ownParse: Callable[[str, str], Any] | None = None

    @property
    def brokerKey(self) -> Key | None:
        return KEYS[self.synonyms[0][0]] if self.synonyms else None

    @property
    def type(self) -> ConfigType:
        if self.ownParse is not None:
            return getattr(self.ownParse, "configType", ConfigType.STRING)
        return self.brokerKey.type

    def parse(self, key: str, raw: str) -> Any:
        """
        Validate a topic override: the broker key's validator, without
        its "unset".

        @raise ConfigError: naming C{key}.
        """
        parse = self.ownParse or self.brokerKey.parse
        return getattr(parse, "required", parse)(key, raw)

    def inherit(self, brokerValue: Callable[[str], Any]) -> Any:
        """
        @param brokerValue: broker key -> typed value, or C{None} if unset.
        @return: the typed value a topic inherits.
        """
        for name, factor in self.synonyms:
            value = brokerValue(name)
            if value is not None:
                return value if factor == 1 or value < 0 else value * factor
        return self.parse(self.name, self.fallback)

    @property
    def default(self) -> Any:
        return self.inherit(lambda name: KEYS[name].defaultValue())


def _topicKey(name: str, brokerKey: str, doc: str, **kw) -> TopicKey:
    return TopicKey(name, ((brokerKey, 1),), doc, **kw)


_REPLICA = re.compile(r"^[0-9]+:[0-9]+$")


@_ofType(ConfigType.LIST)
def _throttledReplicas(key: str, raw: str) -> tuple[str, ...]:
    """
    Kafka's C{ThrottledReplicaListValidator}: C{*}, or
    C{partition:broker} items, comma separated.
    """
    items = tuple(item.strip() for item in raw.split(",") if item.strip())
    if items == ("*",) or all(_REPLICA.match(item) for item in items):
        return items
    raise ConfigError(
        key,
        f"{key} must be the literal '*' or a list of replicas in the following format: "
        "[partitionId]:[brokerId],[partitionId]:[brokerId],...",
    )


#: Kafka's topic configs (C{TopicConfig}) kafkatwist knows, documentation shortened.
TOPIC_KEYS: dict[str, TopicKey] = {
    k.name: k
    for k in [
        TopicKey("retention.ms", (("log.retention.ms", 1), ("log.retention.minutes", 60_000),
                                  ("log.retention.hours", 3_600_000)),
                 "How long a log segment is kept before it is deleted, in milliseconds (-1: no "
                 "time limit). Applies with the \"delete\" cleanup policy."),
        _topicKey("retention.bytes", "log.retention.bytes",
                  "Largest size a partition may grow to before old segments are deleted (-1: no "
                  "size limit)."),
        _topicKey("segment.bytes", "log.segment.bytes",
                  "Size of a log segment file; a new segment is rolled when it is full."),
        TopicKey("segment.ms", (("log.roll.ms", 1), ("log.roll.hours", 3_600_000)),
                 "Time after which a segment is rolled even if it is not full, so retention can "
                 "delete or compact old data."),
        _topicKey("segment.index.bytes", "log.index.size.max.bytes",
                  "Size of the index that maps offsets to file positions."),
        _topicKey("index.interval.bytes", "log.index.interval.bytes",
                  "How often an entry is added to the offset index, in bytes."),
        _topicKey("cleanup.policy", "log.cleanup.policy",
                  "\"delete\" (discard old segments past the retention limits) and/or "
                  "\"compact\" (the log cleaner keeps the latest value per key)."),
        _topicKey("delete.retention.ms", "log.cleaner.delete.retention.ms",
                  "How long a tombstone of a compacted topic is kept after the cleaner first "
                  "rewrites it, so consumers reading from the start see the delete."),
        _topicKey("min.compaction.lag.ms", "log.cleaner.min.compaction.lag.ms",
                  "Minimum time a record stays uncompacted."),
        _topicKey("max.compaction.lag.ms", "log.cleaner.max.compaction.lag.ms",
                  "Maximum time a record can stay uncompacted (the active segment rolls sooner "
                  "if needed)."),
        _topicKey("min.cleanable.dirty.ratio", "log.cleaner.min.cleanable.ratio",
                  "Share of the log that must be uncleaned before the cleaner compacts it."),
        _topicKey("message.timestamp.type", "log.message.timestamp.type",
                  "Whether record timestamps are the producer's (CreateTime) or the broker's "
                  "append time (LogAppendTime)."),
        _topicKey("max.message.bytes", "message.max.bytes",
                  "Largest record batch size the broker accepts for this topic."),
        _topicKey("flush.messages", "log.flush.interval.messages",
                  "Fsync the log after this many records (1: before acknowledging)."),
        _topicKey("flush.ms", "log.flush.interval.ms",
                  "Fsync data older than this many milliseconds.", fallback=str(LONG_MAX)),
        _topicKey("min.insync.replicas", "min.insync.replicas",
                  "Replicas that must acknowledge an acks=all produce; one broker always has "
                  "exactly one."),
        _topicKey("compression.type", "compression.type",
                  "Final compression of the topic's data; kafkatwist stores batches as the "
                  "producer compressed them."),
        _topicKey("message.downconversion.enable", "log.message.downconversion.enable",
                  "Whether consumers fetching with Fetch v0-3 get the topic's batches converted "
                  "to the old message formats (else UNSUPPORTED_VERSION)."),
        _topicKey("message.format.version", "log.message.format.version",
                  "Deprecated (Kafka 3.0): accepted and ignored; batches are stored in format v2."),
        _topicKey("message.timestamp.difference.max.ms", "log.message.timestamp.difference.max.ms",
                  "Deprecated: the two limits below when they are unset."),
        _topicKey("message.timestamp.before.max.ms", "log.message.timestamp.before.max.ms",
                  "How far a CreateTime timestamp may be behind the broker's clock (INVALID_TIMESTAMP)."),
        _topicKey("message.timestamp.after.max.ms", "log.message.timestamp.after.max.ms",
                  "How far a CreateTime timestamp may be ahead of the broker's clock (INVALID_TIMESTAMP)."),
        TopicKey("segment.jitter.ms", (("log.roll.jitter.ms", 1), ("log.roll.jitter.hours", 3_600_000)),
                 "Up to this much is taken off segment.ms per segment."),
        TopicKey("leader.replication.throttled.replicas", (),
                 "Replicas whose replication the leader throttles (leader.replication.throttled.rate "
                 "of the leader's broker): partitionId:brokerId items naming the leader, or '*'.",
                 fallback="", ownParse=_throttledReplicas),
        TopicKey("follower.replication.throttled.replicas", (),
                 "Replicas whose replication the follower throttles (follower.replication.throttled.rate "
                 "of its broker): partitionId:brokerId items naming the follower, or '*'.",
                 fallback="", ownParse=_throttledReplicas),
        _topicKey("preallocate", "log.preallocate",
                  "Preallocate segment files (no effect here: segments grow as written)."),
        _topicKey("file.delete.delay.ms", "log.segment.delete.delay.ms",
                  "Delay before a deleted segment's files are removed (here: once no reader holds them)."),
        _topicKey("unclean.leader.election.enable", "unclean.leader.election.enable",
                  "Elect an out-of-sync replica as leader when no in-sync replica is alive "
                  "(data loss); overrides the broker's in a cluster (one broker: no other replica)."),
        _topicKey("compression.gzip.level", "compression.gzip.level", "gzip level when the broker compresses."),
        _topicKey("compression.lz4.level", "compression.lz4.level", "lz4 level when the broker compresses."),
        _topicKey("compression.zstd.level", "compression.zstd.level", "zstd level when the broker compresses."),
        _topicKey("local.retention.ms", "log.local.retention.ms",
                  "Tiered storage's local retention (-2: retention.ms; all data is local here)."),
        _topicKey("local.retention.bytes", "log.local.retention.bytes",
                  "Tiered storage's local retention (-2: retention.bytes; all data is local here)."),
    ]
}


#: Kafka 3.x topic configs kafkatwist refuses, and why (INVALID_CONFIG with
#: this reason rather than "unknown")
UNSUPPORTED_TOPIC_KEYS = {
    "remote.storage.enable": "Tiered Storage functionality is disabled in the broker. Topic cannot "
    "be configured with remote log storage.",
    "remote.log.copy.disable": "Tiered Storage functionality is disabled in the broker.",
    "remote.log.delete.on.disable": "Tiered Storage functionality is disabled in the broker.",
}


def parseProperties(text: str, source: str = "<properties>") -> dict[str, str]:
    """
    Parse Java C{.properties} text: C{key=value}, C{key: value} or
    C{key value}; C{#} and C{!} comments; a trailing backslash continues
    the line; C{\\uXXXX} and the usual escapes.
    """
    result: dict[str, str] = {}
    logical = ""
    for rawLine in text.splitlines():
        line = rawLine.lstrip()
        if not logical and (not line or line[0] in "#!"):
            continue
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2 == 1:
            logical += line[:-1]
            continue
        logical += line
        key, value = _splitProperty(logical)
        result[_unescape(key)] = _unescape(value)
        logical = ""
    if logical:
        key, value = _splitProperty(logical)
        result[_unescape(key)] = _unescape(value)
    return result


def _splitProperty(line: str) -> tuple[str, str]:
    i = 0
    while i < len(line):
        c = line[i]
        if c == "\\":
            i += 2
            continue
        if c in "=: \t":
            break
        i += 1
    key = line[:i]
    rest = line[i:].lstrip(" \t")
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(" \t")
    return key, rest


def _unescape(text: str) -> str:
    if "\\" not in text:
        return text
    out = []
    i = 0
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text):
            n = text[i + 1]
            if n == "u" and i + 5 < len(text):
                out.append(chr(int(text[i + 2 : i + 6], 16)))
                i += 6
                continue
            out.append({"t": "\t", "n": "\n", "r": "\r", "f": "\f"}.get(n, n))
            i += 2
            continue
        out.append(c)
        i += 1
    return "".join(out)


class BrokerConfig:
    """
    Validated broker settings.  Read values with C{config["log.segment.bytes"]}
    (typed) or the attributes for the derived ones.

    @ivar listeners: L{Listener}s to bind.
    @ivar advertisedListeners: L{Listener}s to tell clients about.
    @ivar logDirs: data directories.
    @ivar explicit: the keys set by the file or overrides (for
        DescribeConfigs sources).
    """

    def __init__(self, raw: dict[str, str] | None = None, *, warn=None) -> None:
        raw = dict(raw or {})
        warn = warn or (lambda message: log.warn("{message}", message=message))
        self.raw = raw
        self.explicit = set(raw)
        for key in raw:
            if key not in KEYS and not _TOLERATED.match(key):
                warn(f"Unknown configuration key {key!r} ignored{didYouMean(key)}")
            elif (
                key.startswith("listener.name.")
                and not _LISTENER_MECHANISMS.match(key)
                and listenerKey(key) is None
            ):
                # Per-listener JAAS logins and the like: credentials live in
                # the SCRAM store here.
                warn(f"Configuration key {key!r} is not used by kafkatwist")
        self._values: dict[str, Any] = {}
        for name, spec in KEYS.items():
            text = raw.get(name, spec.default)
            self._values[name] = None if text is None else spec.parse(name, text)

        if raw.get("broker.id") is not None and "node.id" not in raw:
            self._values["node.id"] = self._values["broker.id"]
        if raw.get("broker.id") is not None:
            if self._values["broker.id"] < 0:
                raise ConfigError("broker.id", "automatic broker ids (-1) are not supported: set one")
            if self._values["node.id"] != self._values["broker.id"]:
                raise ConfigError("broker.id", "differs from node.id (one is the other's alias)")
        self._values["broker.id"] = self._values["node.id"]
        if not self._values["zookeeper.connect"] and self._values["default.replication.factor"] > 1:
            raise ConfigError(
                "default.replication.factor", "above 1 needs a cluster (zookeeper.connect)"
            )

        protocolMap = self._values["listener.security.protocol.map"]
        self.listeners = parseListeners("listeners", self._values["listeners"], protocolMap)
        advertised = self._values["advertised.listeners"]
        if advertised:
            self.advertisedListeners = parseListeners("advertised.listeners", advertised, protocolMap)
            names = {l.name for l in self.listeners}
            for listener in self.advertisedListeners:
                if listener.name not in names:
                    raise ConfigError(
                        "advertised.listeners", f"{listener.name} is not a name in listeners"
                    )
        else:
            self.advertisedListeners = [self._advertise(listener) for listener in self.listeners]

        logDirs = self._values["log.dirs"]
        self.logDirs = _list("log.dirs", logDirs) if logDirs else [self._values["log.dir"]]

        self._listenerSsl = self._listenerKeys(raw, listenerSslKey)
        self._listenerConnection = self._listenerKeys(raw, listenerConnectionKey)
        for listener in self.listeners:
            if listener.tls:
                self._checkSsl(listener.name)
        for key in ("ssl.keystore.location", "ssl.truststore.location"):
            _readable(key, self._values[key])
        self._saslMechanisms = self._listenerMechanisms(raw)
        if self._values["group.min.session.timeout.ms"] > self._values["group.max.session.timeout.ms"]:
            raise ConfigError("group.min.session.timeout.ms", "is above group.max.session.timeout.ms")
        metricsListener = self._values["metrics.http.listener"]
        if metricsListener:
            # host:port, or http:// or https:// before it (HTTPS uses
            # ssl.keystore.location).
            scheme, found, rest = metricsListener.partition("://")
            if not found:
                scheme, rest = "http", metricsListener
            host, sep, port = rest.rpartition(":")
            if scheme not in ("http", "https") or not sep or not port.isdigit() or int(port) > 65535:
                raise ConfigError("metrics.http.listener", f"{metricsListener!r} is not host:port")
            if scheme == "https" and not self._values["ssl.keystore.location"]:
                raise ConfigError("metrics.http.listener", "https needs ssl.keystore.location")

    def _listenerMechanisms(self, raw: dict[str, str]) -> dict[str, list[str]]:
        """
        Each SASL listener's mechanisms: its C{listener.name.<name>.} key, or
        C{sasl.enabled.mechanisms}; all must be implemented, and at least one given.
        """
        perListener = {}
        for key, value in raw.items():
            match = _LISTENER_MECHANISMS.match(key)
            if match:
                perListener[match[1].upper()] = (key, _mechanisms(key, value))
        names = {l.name for l in self.listeners}
        for name, (key, _) in perListener.items():
            if name not in names:
                raise ConfigError(key, f"there is no listener {name}")
        result = {}
        for listener in self.listeners:
            if not listener.sasl:
                continue
            key, mechanisms = perListener.get(
                listener.name, ("sasl.enabled.mechanisms", self._values["sasl.enabled.mechanisms"])
            )
            unsupported = [m for m in mechanisms if m not in SASL_MECHANISMS]
            if unsupported:
                raise ConfigError(
                    key,
                    f"{', '.join(unsupported)} not supported on {listener.name}; kafkatwist implements "
                    f"{', '.join(SASL_MECHANISMS)}",
                )
            if not mechanisms:
                raise ConfigError(key, f"listener {listener.name} ({listener.securityProtocol}) needs a SASL mechanism")
            result[listener.name] = mechanisms
        return result

    def _listenerKeys(self, raw: dict[str, str], match) -> dict[str, dict[str, Any]]:
        names = {l.name for l in self.listeners}
        result: dict[str, dict[str, Any]] = {}
        for key, value in raw.items():
            prefixed = match(key)
            if prefixed is None:
                continue
            listener, base = prefixed
            if listener not in names:
                raise ConfigError(key, f"there is no listener {listener}")
            result.setdefault(listener, {})[base] = KEYS[base].parse(key, value)
        return result

    def _checkSsl(self, listenerName: str) -> None:
        settings = self.sslSettings(listenerName)
        prefix = f"listener.name.{listenerName.lower()}."
        where = lambda key: prefix + key if key in self._listenerSsl.get(listenerName, {}) else key
        if not settings["ssl.keystore.location"]:
            raise ConfigError("ssl.keystore.location", "an SSL listener needs a PEM key and certificate")
        if settings["ssl.client.auth"] != "none" and not settings["ssl.truststore.location"]:
            raise ConfigError(
                where("ssl.truststore.location"),
                f"ssl.client.auth={settings['ssl.client.auth']} needs a CA bundle to verify clients",
            )
        for key in ("ssl.keystore.location", "ssl.truststore.location"):
            _readable(where(key), settings[key])

    def sslSettings(self, listenerName: str) -> dict[str, Any]:
        """
        The SSL settings of listener C{listenerName}: its own
        C{listener.name.<name>.ssl.*} keys over the plain C{ssl.*} ones.
        """
        own = self._listenerSsl.get(listenerName, {})
        return {key: own.get(key, self._values[key]) for key in LISTENER_SSL_KEYS}

    def listenerSetting(self, listenerName: str, key: str) -> Any:
        """
        A connection limit of listener C{listenerName}: its own
        C{listener.name.<name>.<key>}, else the broker's C{key} (Kafka
        configures a listener with its prefixed keys over the others).
        """
        return self._listenerConnection.get(listenerName, {}).get(key, self._values[key])

    def saslMechanisms(self, listenerName: str) -> list[str]:
        """
        @return: the mechanisms a SASL listener offers, in order.
        """
        return list(self._saslMechanisms.get(listenerName, ()))

    @staticmethod
    def _advertise(listener: Listener) -> Listener:
        # Advertise what we listen on; an unspecified address cannot be
        # dialled, so fall back to loopback as Kafka falls back to the
        # canonical host name.
        if listener.host in ("", "0.0.0.0"):
            return Listener(listener.name, "127.0.0.1", listener.port, listener.securityProtocol)
        if listener.host == "::":
            return Listener(listener.name, "::1", listener.port, listener.securityProtocol)
        return listener

    def __getitem__(self, key: str) -> Any:
        return self._values[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self._values.get(key, default)

    @property
    def nodeId(self) -> int:
        return self._values["node.id"]

    def topicDefault(self, topicKey: str) -> Any:
        """
        The value a topic inherits for C{topicKey} from these settings.
        """
        return TOPIC_KEYS[topicKey].inherit(self._values.get)

    def retentionMs(self) -> int:
        return self.topicDefault("retention.ms")

    def rollMs(self) -> int:
        return self.topicDefault("segment.ms")

    def describe(self) -> list[tuple[str, str | None, bool]]:
        """
        @return: (key, value as text, set explicitly) for every known key,
            sensitive values hidden.
        """
        rows = []
        for name, spec in sorted(KEYS.items()):
            text = self.raw.get(name, spec.default)
            if spec.sensitive and text is not None:
                text = None
            rows.append((name, text, name in self.explicit))
        for name in sorted(self.raw):
            if listenerKey(name) is not None:
                spec = keySpec(name)
                rows.append((name, None if spec.sensitive else self.raw[name], name in self.explicit))
        return rows


def _readable(key: str, path: str | None) -> None:
    if path:
        try:
            with open(path, "rb"):
                pass
        except OSError as e:
            raise ConfigError(key, f"cannot read {path}: {e.strerror}") from None


def didYouMean(key: str) -> str:
    """
    @return: C{"; did you mean 'x'?"} naming the known key closest to
        C{key} (a typo), or C{""} when none is close.
    """
    close = difflib.get_close_matches(key, KEYS, n=1, cutoff=0.85)
    return f"; did you mean {close[0]!r}?" if close else ""


def loadConfig(path: str | None, overrides: list[tuple[str, str]], *, warn=None) -> BrokerConfig:
    """
    Read C{path} (if any), apply C{overrides} in order, validate.

    @raise ConfigError: for a bad value or an unreadable file.
    """
    raw: dict[str, str] = {}
    if path:
        try:
            with open(path, encoding="utf-8") as f:
                raw.update(parseProperties(f.read(), path))
        except OSError as e:
            raise ConfigError("--config", f"cannot read {path}: {e.strerror}") from None
    for key, value in overrides:
        raw[key] = value
    return BrokerConfig(raw, warn=warn)


if __name__ == "__main__":  # pragma: no cover - a quick way to list the keys
    for name, spec in KEYS.items():
        sys.stdout.write(f"{name}\t{spec.default}\t{spec.update}\t{spec.doc}\n")
