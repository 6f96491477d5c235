"""
ZooKeeper paths and the JSON of their znodes, in ZooKeeper-mode Kafka's
layout (its C{ZkData.scala}), so Kafka's tools reading ZooKeeper make sense
of a kafkatwist cluster.  Decoders raise L{ZkDataError} on anything they
cannot read; callers log it and go on.
"""

from __future__ import annotations

import base64
import json
import time
import uuid
from dataclasses import dataclass, field

from kafkatwist.protocol.entities import NO_LEADER  # noqa: F401 (cluster modules import it from here)

BROKER_IDS = "/brokers/ids"
TOPICS = "/brokers/topics"
CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"
DELETE_TOPICS = "/admin/delete_topics"
REASSIGN_PARTITIONS = "/admin/reassign_partitions"
ISR_CHANGE = "/isr_change_notification"
ISR_CHANGE_PREFIX = ISR_CHANGE + "/isr_change_"
CONFIG_TOPICS = "/config/topics"
#: dynamic broker configs: C{<default>} (the cluster default) and one per broker id
CONFIG_BROKERS = "/config/brokers"
DEFAULT_BROKER_ENTITY = "<default>"
CONFIG_CHANGE_PREFIX = "/config/changes/config_change_"
#: how long a change notification stays (Kafka's C{changeExpirationMs})
CONFIG_CHANGE_EXPIRATION_MS = 15 * 60 * 1000
CLUSTER_ID = "/cluster/id"
PRODUCER_ID_BLOCK = "/latest_producer_id_block"
#: kafkatwist's own: a broker asking the controller to move its leaders away
#: (Kafka sends a ControlledShutdown request to the controller instead)
CONTROLLED_SHUTDOWN = "/kafkatwist/controlled_shutdown"
#: kafkatwist's own: each broker's "my replicas of this topic are deleted",
#: which Kafka's controller learns from StopReplica responses; it removes a
#: topic queued for deletion only once every replica's broker wrote one
DELETED_REPLICAS = "/kafkatwist/deleted_replicas"

#: every persistent parent the cluster writes under (Kafka's C{PersistentZkPaths})
PERSISTENT_PATHS = (
    BROKER_IDS, TOPICS, DELETE_TOPICS, ISR_CHANGE, CONFIG_TOPICS, CONFIG_BROKERS, "/cluster",
    CONTROLLED_SHUTDOWN, DELETED_REPLICAS,
)


class ZkDataError(ValueError):
    """
    A znode's data is not what Kafka's layout says.
    """


def brokerPath(brokerId: int) -> str:
    return f"{BROKER_IDS}/{brokerId}"


def topicPath(topic: str) -> str:
    return f"{TOPICS}/{topic}"


def partitionsPath(topic: str) -> str:
    return f"{TOPICS}/{topic}/partitions"


def partitionPath(topic: str, partition: int) -> str:
    return f"{TOPICS}/{topic}/partitions/{partition}"


def statePath(topic: str, partition: int) -> str:
    return f"{TOPICS}/{topic}/partitions/{partition}/state"


def topicConfigPath(topic: str) -> str:
    return f"{CONFIG_TOPICS}/{topic}"


def brokerConfigPath(entity: str) -> str:
    """
    @param entity: a broker id as text, or L{DEFAULT_BROKER_ENTITY}.
    """
    return f"{CONFIG_BROKERS}/{entity}"


def deleteTopicPath(topic: str) -> str:
    return f"{DELETE_TOPICS}/{topic}"


def controlledShutdownPath(brokerId: int) -> str:
    return f"{CONTROLLED_SHUTDOWN}/{brokerId}"


def deletedReplicasPath(topic: str) -> str:
    return f"{DELETED_REPLICAS}/{topic}"


def deletedReplicaPath(topic: str, brokerId: int) -> str:
    return f"{DELETED_REPLICAS}/{topic}/{brokerId}"


def _load(data: bytes | None, what: str) -> dict:
    try:
        value = json.loads((data or b"").decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise ZkDataError(f"{what}: not JSON ({e})") from None
    if not isinstance(value, dict):
        raise ZkDataError(f"{what}: not a JSON object")
    return value


def _dump(value: dict) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode("utf-8")


def _nowMs() -> str:
    return str(int(time.time() * 1000))


# -- brokers -------------------------------------------------------------------


@dataclass(frozen=True)
class BrokerInfo:
    """
    A registered broker: its endpoints by listener name.
    """

    brokerId: int
    endpoints: tuple[tuple[str, str, int], ...]  # (listener name, host, port)
    rack: str | None = None
    #: the broker's web console (C{http://host:port}), when it serves one
    console: str | None = None

    def endpoint(self, listenerName: str | None = None) -> tuple[str, int] | None:
        for name, host, port in self.endpoints:
            if listenerName is None or name == listenerName:
                return host, port
        return None


def encodeBroker(brokerId: int, listeners, protocolMap: dict[str, str], rack: str | None = None,
                 console: str | None = None) -> bytes:
    """
    @param listeners: the advertised L{kafkatwist.config.Listener}s.
    @param console: the broker's web console URL, registered beside its
        endpoints (a field Kafka's tools ignore) so every broker's console
        can link to the others'.
    """
    endpoints = [f"{l.name}://{l.host}:{l.port}" for l in listeners]
    first = listeners[0]
    value = {
        "version": 5,
        "host": first.host,
        "port": first.port,
        "endpoints": endpoints,
        "listener_security_protocol_map": {l.name: protocolMap.get(l.name, l.name) for l in listeners},
        "jmx_port": -1,
        "timestamp": _nowMs(),
        "features": {},
    }
    if rack is not None:
        value["rack"] = rack
    if console is not None:
        value["kafkatwist_console"] = console
    return _dump(value)


def decodeBroker(brokerId: int, data: bytes) -> BrokerInfo:
    value = _load(data, f"broker {brokerId}")
    endpoints = []
    for endpoint in value.get("endpoints") or ():
        try:
            name, rest = endpoint.split("://", 1)
            host, _, port = rest.rpartition(":")
            endpoints.append((name, host.strip("[]"), int(port)))
        except (AttributeError, ValueError):
            raise ZkDataError(f"broker {brokerId}: bad endpoint {endpoint!r}") from None
    if not endpoints:
        raise ZkDataError(f"broker {brokerId}: no endpoints")
    console = value.get("kafkatwist_console")
    if not isinstance(console, str) or not console.startswith(("http://", "https://")):
        console = None
    return BrokerInfo(brokerId, tuple(endpoints), value.get("rack"), console)


# -- controller ------------------------------------------------------------------


def encodeController(brokerId: int) -> bytes:
    return _dump({"version": 2, "brokerid": brokerId, "timestamp": _nowMs()})


def decodeController(data: bytes) -> int:
    value = _load(data, "controller")
    brokerId = value.get("brokerid")
    if not isinstance(brokerId, int):
        raise ZkDataError("controller: no brokerid")
    return brokerId


def decodeControllerEpoch(data: bytes) -> int:
    try:
        return int(data.decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        raise ZkDataError(f"controller_epoch: {data[:40]!r} is not a number") from None


# -- topics ----------------------------------------------------------------------


def encodeTopicId(topicId: uuid.UUID) -> str:
    # Kafka's Uuid.toString: URL-safe base64 of the 16 bytes, unpadded.
    return base64.urlsafe_b64encode(topicId.bytes).rstrip(b"=").decode("ascii")


def decodeTopicId(text: str) -> uuid.UUID:
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        return uuid.UUID(bytes=raw)
    except (ValueError, TypeError):
        raise ZkDataError(f"bad topic id {text!r}") from None


@dataclass(frozen=True)
class TopicAssignment:
    """
    A topic's znode: its id and each partition's replicas (the first is the
    preferred leader).  While a partition is reassigned (KIP-455) its
    replicas are the original ones and the target ones together, with those
    being added and those being removed beside them; C{zkVersion} is the
    znode's version, which the controller's writes of it name.
    """

    name: str
    topicId: uuid.UUID
    partitions: dict[int, tuple[int, ...]]
    adding: dict[int, tuple[int, ...]] = field(default_factory=dict)
    removing: dict[int, tuple[int, ...]] = field(default_factory=dict)
    zkVersion: int = -1


def encodeTopic(topicId: uuid.UUID, partitions: dict[int, tuple[int, ...]], adding=None,
                removing=None) -> bytes:
    def listed(replicas: dict | None) -> dict:
        return {str(p): list(r) for p, r in sorted((replicas or {}).items()) if r}

    return _dump({
        "version": 3,
        "topic_id": encodeTopicId(topicId),
        "partitions": {str(p): list(replicas) for p, replicas in sorted(partitions.items())},
        "adding_replicas": listed(adding),
        "removing_replicas": listed(removing),
    })


def _replicaLists(name: str, value, what: str) -> dict[int, tuple[int, ...]]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ZkDataError(f"topic {name}: bad {what}")
    try:
        return {int(p): tuple(int(b) for b in replicas) for p, replicas in value.items()}
    except (TypeError, ValueError):
        raise ZkDataError(f"topic {name}: bad {what}") from None


def decodeTopic(name: str, data: bytes, zkVersion: int = -1) -> TopicAssignment:
    value = _load(data, f"topic {name}")
    topicId = value.get("topic_id")
    partitions = value.get("partitions")
    if not isinstance(partitions, dict) or not isinstance(topicId, str):
        raise ZkDataError(f"topic {name}: no topic_id or partitions")
    assignment = _replicaLists(name, partitions, "partitions")
    adding = {p: r for p, r in _replicaLists(name, value.get("adding_replicas"), "adding_replicas").items()
              if r and p in assignment}
    removing = {p: r for p, r in _replicaLists(name, value.get("removing_replicas"), "removing_replicas").items()
                if r and p in assignment}
    return TopicAssignment(name, decodeTopicId(topicId), assignment, adding, removing, zkVersion)


def encodeReassignment(partitions) -> bytes:
    """
    C{/admin/reassign_partitions} (Kafka's C{ReassignPartitionsZNode}).

    @param partitions: C{[(topic, partition, replicas)]}.
    """
    return _dump({"version": 1, "partitions": [
        {"topic": t, "partition": p, "replicas": list(r)} for t, p, r in partitions
    ]})


def decodeReassignment(data: bytes) -> list[tuple[str, int, tuple[int, ...]]]:
    value = _load(data, "reassign_partitions")
    entries = value.get("partitions")
    if not isinstance(entries, list):
        raise ZkDataError("reassign_partitions: no partitions")
    try:
        return [(str(e["topic"]), int(e["partition"]), tuple(int(b) for b in e["replicas"])) for e in entries]
    except (KeyError, TypeError, ValueError):
        raise ZkDataError("reassign_partitions: bad entry") from None


def encodeDeletedReplica(topicId: uuid.UUID) -> bytes:
    # The topic's id: a broker's word about an older topic of the same
    # name never counts for a newer one.
    return _dump({"version": 1, "topic_id": encodeTopicId(topicId)})


def decodeDeletedReplica(topic: str, data: bytes) -> uuid.UUID:
    topicId = _load(data, f"deleted replica of {topic}").get("topic_id")
    if not isinstance(topicId, str):
        raise ZkDataError(f"deleted replica of {topic}: no topic_id")
    return decodeTopicId(topicId)


def encodeTopicConfig(configs: dict[str, str]) -> bytes:
    return _dump({"version": 1, "config": dict(configs)})


def encodeConfigChange(entityType: str, name: str) -> bytes:
    # Kafka's ConfigEntityChangeNotificationSequenceZNode (version 2).
    return _dump({"version": 2, "entity_path": f"{entityType}/{name}"})


def decodeTopicConfig(name: str, data: bytes) -> dict[str, str]:
    return decodeEntityConfig(f"config of topic {name}", data)


def decodeEntityConfig(what: str, data: bytes) -> dict[str, str]:
    """
    A C{/config/<type>/<name>} znode's configs (Kafka's C{ConfigEntityZNode}).
    """
    value = _load(data, what)
    configs = value.get("config") or {}
    if not isinstance(configs, dict):
        raise ZkDataError(f"{what}: not an object")
    if any(not isinstance(v, (str, int, float, bool)) for v in configs.values()):
        raise ZkDataError(f"{what}: a value is not text")
    # (Kafka writes text; a number or boolean some other tool wrote reads as Kafka's text.)
    return {str(k): json.dumps(v) if isinstance(v, bool) else str(v) for k, v in configs.items()}


# -- partition state ---------------------------------------------------------------


@dataclass(frozen=True)
class PartitionState:
    """
    A partition's C{state} znode (Kafka's C{LeaderIsrAndControllerEpoch});
    C{zkVersion} is the znode's version, the partition epoch every
    conditional write of it names; C{mzxid} the transaction that last
    wrote it (0: not known), compared with a broker's registration (its
    broker epoch, that znode's czxid): a broker registered after the state
    was last written is not the one the state names.
    C{leaderBrokerEpoch} is the broker epoch of the leader the controller
    elected (Kafka's LeaderAndIsr carries it, KIP-380; here an extra JSON
    field, which Kafka's tools ignore; -1: not known).
    C{isrBrokerEpochs} holds, as C{((broker id, broker epoch), ...)}, the
    registration a leader's ISR expansion added each replica under
    (KIP-903; the extra field C{isr_broker_epochs}); a member without one
    is not known.
    """

    leader: int
    leaderEpoch: int
    isr: tuple[int, ...]
    controllerEpoch: int
    zkVersion: int = -1
    mzxid: int = 0
    leaderBrokerEpoch: int = -1
    isrBrokerEpochs: tuple[tuple[int, int], ...] = ()


def encodeState(state: PartitionState) -> bytes:
    value = {
        "controller_epoch": state.controllerEpoch,
        "leader": state.leader,
        "version": 1,
        "leader_epoch": state.leaderEpoch,
        "isr": list(state.isr),
    }
    if state.leaderBrokerEpoch >= 0:
        value["leader_broker_epoch"] = state.leaderBrokerEpoch
    if state.isrBrokerEpochs:
        value["isr_broker_epochs"] = {str(b): e for b, e in state.isrBrokerEpochs}
    return _dump(value)


def decodeState(topic: str, partition: int, data: bytes, zkVersion: int, mzxid: int = 0) -> PartitionState:
    value = _load(data, f"state of {topic}-{partition}")
    try:
        return PartitionState(
            int(value["leader"]), int(value["leader_epoch"]),
            tuple(int(b) for b in value["isr"]), int(value["controller_epoch"]), zkVersion, mzxid,
            _brokerEpochField(value.get("leader_broker_epoch")),
            _isrBrokerEpochs(value.get("isr_broker_epochs")),
        )
    except (KeyError, TypeError, ValueError):
        raise ZkDataError(f"state of {topic}-{partition}: missing or bad fields") from None


def _brokerEpochField(value) -> int:
    """
    An optional broker epoch field: -1 (not known) when absent -- a state
    written by an older version or by Kafka -- or not a non-negative whole
    number, never a value that could match a registration by chance.
    """
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return -1
    return value


def _isrBrokerEpochs(value) -> tuple[tuple[int, int], ...]:
    """
    The optional C{isr_broker_epochs} field: entries that are not a broker
    id with a broker epoch are left out (not known).
    """
    if not isinstance(value, dict):
        return ()
    found = []
    for key, epoch in value.items():
        try:
            brokerId = int(key)
        except (TypeError, ValueError):
            continue
        epoch = _brokerEpochField(epoch)
        if epoch >= 0:
            found.append((brokerId, epoch))
    return tuple(sorted(found))


def encodeIsrChange(partitions) -> bytes:
    return _dump({"version": 1, "partitions": [{"topic": t, "partition": p} for t, p in partitions]})


def encodeClusterId(clusterId: str) -> bytes:
    return _dump({"version": "1", "id": clusterId})


def decodeClusterId(data: bytes) -> str:
    value = _load(data, "cluster id")
    clusterId = value.get("id")
    if not isinstance(clusterId, str):
        raise ZkDataError("cluster id: no id")
    return clusterId


def encodeProducerIdBlock(brokerId: int, start: int, size: int) -> bytes:
    # Kafka's ProducerIdBlockZNode: the last id is inclusive.
    return _dump({"version": 1, "broker": brokerId, "block_start": str(start),
                  "block_end": str(start + size - 1)})


def decodeProducerIdBlockEnd(data: bytes) -> int:
    """
    @return: the last producer id of the latest block (-1: none yet).
    """
    if not data:
        return -1
    value = _load(data, "latest_producer_id_block")
    try:
        return int(value["block_end"])
    except (KeyError, TypeError, ValueError):
        raise ZkDataError("latest_producer_id_block: no block_end") from None
