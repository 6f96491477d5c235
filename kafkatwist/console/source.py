"""
What the console shows, read from the broker: the one adapter between the
console and the broker's services.

Everything that a client could ask is asked of the request handlers in
process (L{kafkatwist.console.local}), as the console user: the topics and
partitions (Metadata), configs (DescribeConfigs), groups (ListGroups,
DescribeGroups, ConsumerGroupDescribe, OffsetFetch).  What only this
broker's storage knows (sizes, log start and end offsets) is read from its
logs on a request handler thread, never on the reactor.  Every method
returns a Deferred fired on the main reactor with JSON-ready dicts.
"""

from __future__ import annotations

import datetime
import time

from twisted.internet.defer import Deferred, inlineCallbacks
from twisted.logger import Logger
from twisted.python.failure import Failure

from kafkatwist.console import local
from kafkatwist.console.messages import MAX_PAGE, readPage
from kafkatwist.coordinator import consumerprotocol
from kafkatwist.errors import ErrorCode
from kafkatwist.protocol import apis
from kafkatwist.protocol.entities import make, nested
from kafkatwist.security.acl import AclOperation, AclPermissionType, PatternType, ResourceType
from kafkatwist.security.scram import BY_TYPE
from kafkatwist.security.checks import filterAuthorized


#: DescribeConfigs' config_source values, as Kafka's admin client names them
CONFIG_SOURCES = {
    0: "UNKNOWN",
    1: "DYNAMIC_TOPIC_CONFIG",
    2: "DYNAMIC_BROKER_CONFIG",
    3: "DYNAMIC_DEFAULT_BROKER_CONFIG",
    4: "STATIC_BROKER_CONFIG",
    5: "DEFAULT_CONFIG",
    6: "DYNAMIC_BROKER_LOGGER_CONFIG",
    7: "CLIENT_METRICS_CONFIG",
    8: "GROUP_CONFIG",
}

TOPIC_RESOURCE = 2

log = Logger()


class ConsoleHTTPError(Exception):
    """
    An answer the console gives as an HTTP status (403, 404, 400, 409).
    """

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def errorFor(code, what: str) -> ConsoleHTTPError:
    code = ErrorCode(code)
    if code in (
        ErrorCode.topic_authorization_failed,
        ErrorCode.group_authorization_failed,
        ErrorCode.cluster_authorization_failed,
        ErrorCode.transactional_id_authorization_failed,
    ):
        return ConsoleHTTPError(403, f"Not authorized: {what} ({code.name.upper()})")
    if code in (ErrorCode.unknown_topic_or_partition, ErrorCode.group_id_not_found, ErrorCode.unknown_topic_id):
        return ConsoleHTTPError(404, f"Not found: {what}")
    return ConsoleHTTPError(409, f"{what}: {code.name.upper()}")


def _iso(seconds: float | None) -> str | None:
    if seconds is None:
        return None
    return datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc).isoformat(timespec="seconds")


def parseAssignment(data: bytes) -> list[dict]:
    """
    A classic consumer's assignment (ConsumerProtocolAssignment): its
    (topic, partitions) pairs; anything else reads as nothing.
    """
    try:
        assignment = consumerprotocol.parseAssignment(data)
    except ValueError:
        return []
    return [{"topic": topic, "partitions": sorted(partitions)} for topic, partitions in assignment.partitions]


class ConsoleSource:
    """
    @param broker: the broker (its services: logManager, cluster,
        groupCoordinator, authorizer, handlers).
    @param reactor: the main reactor, where answers are delivered.
    @param history: the L{kafkatwist.console.history.History}.
    """

    def __init__(self, broker, reactor, history, startedAt: float | None = None) -> None:
        self.broker = broker
        self.reactor = reactor
        self.history = history
        self.startedAt = startedAt if startedAt is not None else time.time()

    # -- plumbing -------------------------------------------------------------

    def context(self, principal: str = "User:ANONYMOUS", clientAddress=("127.0.0.1", 0)) -> local.ConsoleContext:
        listener = self.broker.advertisedListeners[0]
        return local.ConsoleContext(self.broker, self.reactor, principal, listener, clientAddress)

    def onHandlerThread(self, f, *args) -> Deferred:
        """
        Run C{f(*args)} on a request handler thread (where the logs may be
        read); its result or failure comes back on the main reactor.
        """
        done: Deferred = Deferred()
        reactor = self.reactor

        def run() -> None:
            try:
                result = f(*args)
            except Exception:
                result = Failure()
            reactor.callFromThread(local._fire, done, result)

        self.broker.callInHandlerThread(run)
        return done

    def call(self, context, apiKey: int, build) -> Deferred:
        return local.call(self.broker, context, apiKey, build)

    def remoteCall(self, brokerId: int, apiKey: int, build, timeout: float = 5.0) -> Deferred:
        """
        Ask another broker of the cluster over the wire, as this broker's
        replica fetchers do (its first listener, a fresh connection), on
        the reactor's thread pool (a blocking socket: never a reactor or
        request handler thread).  Its answer is what that broker lets this
        connection see; the console then filters it by the user's ACLs.
        """
        from twisted.internet.threads import deferToThreadPool

        from kafkatwist.client.connection import BrokerConnection
        from kafkatwist.protocol.apis import requestType

        endpoint = self.broker.cluster.endpoint(brokerId)

        def run():
            if endpoint is None:
                raise ConsoleHTTPError(503, f"broker {brokerId} is not alive")
            connection = BrokerConnection(
                endpoint[0], endpoint[1], clientId=f"broker-{self.broker.nodeId}-console", timeout=timeout,
            )
            connection.connect()
            try:
                version = connection.pick(apiKey)
                if version is None:
                    raise ConsoleHTTPError(503, f"broker {brokerId} does not serve API {apiKey}")
                return connection.request(apiKey, version, build(version, requestType(apiKey, version)), timeout=timeout)
            finally:
                connection.close()

        return deferToThreadPool(self.reactor, self.reactor.getThreadPool(), run)

    def metadata(self, context, topics=None) -> Deferred:
        def build(version, cls):
            Topic = nested(cls, "MetadataRequestTopic")
            wanted = None if topics is None else tuple(make(Topic, name=t, topic_id=None) for t in topics)
            return make(
                cls,
                topics=wanted,
                allow_auto_topic_creation=False,
                include_cluster_authorized_operations=False,
                include_topic_authorized_operations=False,
            )

        return self.call(context, apis.METADATA, build)

    def _localLogs(self, keys) -> dict:
        """
        On a handler thread: (size, log start, log end) of this broker's
        replicas among C{keys} (topic, partition).
        """
        logManager = self.broker.logManager
        out = {}
        if logManager is None:
            return out
        for topic, partition in keys:
            log = logManager.getLog(topic, partition)
            if log is not None:
                out[(topic, partition)] = (log.size, log.logStartOffset, log.highWatermark)
        return out

    def consoles(self) -> dict[int, str]:
        """
        Each live broker's web console URL, from the cluster image (what
        the brokers registered in ZooKeeper); empty for a single broker.
        """
        cluster = self.broker.cluster
        image = cluster.image if cluster is not None else None
        if image is None:
            return {}
        return {i: b.console for i, b in image.brokers.items() if b.console}

    def _diskUse(self) -> int:
        logManager = self.broker.logManager
        total = 0
        if logManager is None:
            return total
        for name, info in list(logManager.topics().items()):
            for p in range(info.numPartitions):
                log = logManager.getLog(name, p)
                if log is not None:
                    total += log.size
        return total

    # -- the cluster -------------------------------------------------------------

    @inlineCallbacks
    def lagHistory(self, context, groupId: str):
        """
        A group's total lag over the last minutes (the group must be one
        the user may describe).
        """
        yield self.committedOffsets(context, groupId)
        series = [[round(at, 3), lag] for at, lag in self.history.groupLag.get(groupId, ())]
        return {"interval": self.history.interval, "group": groupId, "lag": series}

    @inlineCallbacks
    def brokers(self, context, withHistory: bool = False):
        meta = yield self.metadata(context)
        disk = yield self.onHandlerThread(self._diskUse)
        led: dict[int, int] = {}
        under = offline = 0
        for topic in meta.topics:
            for p in topic.partitions:
                if p.leader_id >= 0:
                    led[p.leader_id] = led.get(p.leader_id, 0) + 1
                else:
                    offline += 1
                if len(p.isr_nodes) < len(p.replica_nodes):
                    under += 1
        me = self.broker.nodeId
        consoles = self.consoles()
        brokers = []
        for b in sorted(meta.brokers, key=lambda b: b.node_id):
            mine = b.node_id == me
            brokers.append({
                "id": b.node_id,
                "host": b.host,
                "port": b.port,
                "address": f"{b.host}:{b.port}",
                "rack": b.rack,
                "controller": b.node_id == meta.controller_id,
                "partitionsLed": led.get(b.node_id, 0),
                "diskBytes": disk if mine else None,
                "upSince": _iso(self.startedAt) if mine else None,
                "thisBroker": mine,
                "console": consoles.get(b.node_id),
            })
        rates = self.history.rates()
        rates.pop("recordsPerSec", None)
        return {
            "clusterId": meta.cluster_id,
            "controllerId": meta.controller_id,
            "thisBroker": me,
            "brokers": brokers,
            "topics": len(meta.topics),
            "partitions": sum(len(t.partitions) for t in meta.topics),
            "underReplicatedPartitions": under,
            "offlinePartitions": offline,
            **rates,
            **({"history": self.history.series(), "historyInterval": self.history.interval} if withHistory else {}),
        }

    # -- topics -------------------------------------------------------------------

    @inlineCallbacks
    def topics(self, context, search: str = ""):
        meta = yield self.metadata(context)
        wanted = [t for t in meta.topics if t.error_code == ErrorCode.none and search.lower() in t.name.lower()]
        me = self.broker.nodeId
        keys = [(t.name, p.partition_index) for t in wanted for p in t.partitions if me in p.replica_nodes]
        logs = yield self.onHandlerThread(self._localLogs, keys)
        records = self.history.rates()["recordsPerSec"]
        out = []
        for t in sorted(wanted, key=lambda t: t.name):
            size = 0
            known = True
            under = offline = 0
            for p in t.partitions:
                info = logs.get((t.name, p.partition_index))
                if info is None:
                    known = False
                else:
                    size += info[0]
                if len(p.isr_nodes) < len(p.replica_nodes):
                    under += 1
                if p.leader_id < 0:
                    offline += 1
            out.append({
                "name": t.name,
                "internal": bool(t.is_internal),
                "partitions": len(t.partitions),
                "replicationFactor": max((len(p.replica_nodes) for p in t.partitions), default=0),
                "sizeBytes": size,
                "sizeComplete": known,
                "recordsPerSec": records.get(t.name, 0.0),
                "underReplicated": under,
                "offline": offline,
            })
        return {"topics": out, "count": len(out)}

    @inlineCallbacks
    def topic(self, context, name: str):
        meta = yield self.metadata(context, [name])
        if not meta.topics:
            raise ConsoleHTTPError(404, f"Not found: topic {name}")
        t = meta.topics[0]
        if t.error_code != ErrorCode.none:
            raise errorFor(t.error_code, f"topic {name}")
        me = self.broker.nodeId
        keys = [(name, p.partition_index) for p in t.partitions if me in p.replica_nodes]
        logs = yield self.onHandlerThread(self._localLogs, keys)
        consoles = self.consoles()
        partitions = []
        for p in sorted(t.partitions, key=lambda p: p.partition_index):
            info = logs.get((name, p.partition_index))
            partitions.append({
                "partition": p.partition_index,
                "leader": p.leader_id,
                "leaderConsole": consoles.get(p.leader_id) if p.leader_id != self.broker.nodeId else None,
                "leaderEpoch": p.leader_epoch,
                "replicas": list(p.replica_nodes),
                "isr": list(p.isr_nodes),
                "offlineReplicas": list(p.offline_replicas),
                "underReplicated": len(p.isr_nodes) < len(p.replica_nodes),
                "local": info is not None,
                "sizeBytes": info[0] if info else None,
                "logStartOffset": info[1] if info else None,
                "logEndOffset": info[2] if info else None,
            })
        configs = yield self.topicConfigs(context, name)
        return {
            "name": t.name,
            "topicId": str(t.topic_id),
            "internal": bool(t.is_internal),
            "partitions": partitions,
            "replicationFactor": max((len(p["replicas"]) for p in partitions), default=0),
            "sizeBytes": sum(p["sizeBytes"] or 0 for p in partitions),
            "recordsPerSec": self.history.rates()["recordsPerSec"].get(name, 0.0),
            "configs": configs,
            "thisBroker": self.broker.nodeId,
        }

    @inlineCallbacks
    def topicConfigs(self, context, name: str):
        def build(version, cls):
            Resource = nested(cls, "DescribeConfigsResource")
            return make(
                cls,
                resources=(make(Resource, resource_type=TOPIC_RESOURCE, resource_name=name, configuration_keys=None),),
                include_synonyms=False,
                include_documentation=False,
            )

        answer = yield self.call(context, apis.DESCRIBE_CONFIGS, build)
        result = answer.results[0]
        if result.error_code != ErrorCode.none:
            if result.error_code == ErrorCode.topic_authorization_failed:
                return None
            raise errorFor(result.error_code, f"configs of topic {name}")
        configs = []
        for c in sorted(result.configs, key=lambda c: c.name):
            source = CONFIG_SOURCES.get(c.config_source, str(c.config_source))
            configs.append({
                "name": c.name,
                "value": None if c.is_sensitive else c.value,
                "source": source,
                "dynamic": c.config_source == 1,
                "readOnly": bool(c.read_only),
                "sensitive": bool(c.is_sensitive),
            })
        return configs

    # -- groups -------------------------------------------------------------------

    def _listGroups(self, context) -> Deferred:
        return self.call(context, apis.LIST_GROUPS, lambda version, cls: make(cls, states_filter=(), types_filter=()))

    def _describeClassic(self, context, ids) -> Deferred:
        return self.call(
            context, apis.DESCRIBE_GROUPS,
            lambda version, cls: make(cls, groups=tuple(ids), include_authorized_operations=False),
        )

    def _describeConsumer(self, context, ids) -> Deferred:
        return self.call(
            context, apis.CONSUMER_GROUP_DESCRIBE,
            lambda version, cls: make(cls, group_ids=tuple(ids), include_authorized_operations=False),
        )

    def _endOffsets(self, context, keys) -> dict:
        """
        On a handler thread: the high watermark of each partition among
        C{keys} this broker holds and the principal may describe.
        """
        topics = filterAuthorized(
            self.broker.authorizer, context, AclOperation.DESCRIBE, ResourceType.TOPIC,
            {t for t, _ in keys}, logIfDenied=False,
        )
        logManager = self.broker.logManager
        out = {}
        if logManager is None:
            return out
        hosts = replicaTest(self.broker)
        for topic, partition in keys:
            if topic not in topics or not hosts(topic, partition):
                continue
            log = logManager.getLog(topic, partition)
            if log is not None:
                out[(topic, partition)] = log.highWatermark
        return out

    @inlineCallbacks
    def groups(self, context, search: str = ""):
        listed = yield self._listGroups(context)
        if listed.error_code != ErrorCode.none:
            raise errorFor(listed.error_code, "groups")
        groups = [g for g in listed.groups if search.lower() in g.group_id.lower()]
        classic = [g.group_id for g in groups if (g.group_type or "classic") != "consumer"]
        consumer = [g.group_id for g in groups if g.group_type == "consumer"]
        members: dict[str, int] = {}
        if classic:
            described = yield self._describeClassic(context, classic)
            for d in described.groups:
                if d.error_code == ErrorCode.none:
                    members[d.group_id] = len(d.members)
        if consumer:
            described = yield self._describeConsumer(context, consumer)
            for d in described.groups:
                if d.error_code == ErrorCode.none:
                    members[d.group_id] = len(d.members)
        coordinator = self.broker.groupCoordinator
        published = coordinator.publishedGroups() if coordinator is not None else {}
        keys = set()
        for g in groups:
            cell = published.get(g.group_id)
            if cell is not None:
                keys.update(cell.offsets)
        ends = yield self.onHandlerThread(self._endOffsets, context, keys)
        out = []
        for g in sorted(groups, key=lambda g: g.group_id):
            cell = published.get(g.group_id)
            offsets = dict(cell.offsets) if cell is not None else {}
            lag = 0
            complete = True
            topics = set()
            for (topic, partition), committed in offsets.items():
                if committed < 0:
                    continue
                topics.add(topic)
                end = ends.get((topic, partition))
                if end is None:
                    complete = False
                    continue
                lag += max(0, end - committed)
            if complete:
                self.history.noteLag(g.group_id, lag)
            else:
                lag = None
            out.append({
                "groupId": g.group_id,
                "state": g.group_state,
                "protocol": "consumer" if g.group_type == "consumer" else "classic",
                "protocolType": g.protocol_type,
                "members": members.get(g.group_id, 0),
                "topics": len(topics),
                "lag": lag,
            })
        me = self.broker.nodeId
        consoles = self.consoles()
        for g in out:
            g["coordinator"] = me
        others = {str(i): url for i, url in sorted(consoles.items()) if i != me}
        unanswered = []
        cluster = self.broker.cluster
        if cluster is not None:
            # Every other broker at once: one that does not answer costs its
            # timeout once, not once per broker.
            from twisted.internet.defer import DeferredList

            others = [i for i in sorted(cluster.image.brokers) if i != me]
            answers = yield DeferredList(
                [self._remoteGroups(context, i, search) for i in others], consumeErrors=True
            )
            for brokerId, (ok, remote) in zip(others, answers):
                if not ok:
                    log.info("Console: broker {broker} did not list its groups: {error}",
                             broker=brokerId, error=remote.getErrorMessage())
                    unanswered.append(brokerId)
                    continue
                for g in remote:
                    g["console"] = consoles.get(brokerId)
                out.extend(remote)
            out.sort(key=lambda g: g["groupId"])
        return {"groups": out, "count": len(out), "coordinator": me, "otherConsoles": others,
                "unanswered": unanswered}

    @inlineCallbacks
    def _remoteGroups(self, context, brokerId: int, search: str):
        """
        The groups another broker coordinates that the user may describe:
        ListGroups, DescribeGroups and ConsumerGroupDescribe sent to it
        (their lag is on that broker's console).
        """
        listed = yield self.remoteCall(
            brokerId, apis.LIST_GROUPS, lambda version, cls: make(cls, states_filter=(), types_filter=())
        )
        groups = [g for g in listed.groups if search.lower() in g.group_id.lower()]
        visible = yield self.onHandlerThread(
            filterAuthorized, self.broker.authorizer, context, AclOperation.DESCRIBE, ResourceType.GROUP,
            [g.group_id for g in groups], False,
        )
        groups = [g for g in groups if g.group_id in visible]
        classic = [g.group_id for g in groups if (g.group_type or "classic") != "consumer"]
        consumer = [g.group_id for g in groups if g.group_type == "consumer"]
        members: dict[str, int] = {}
        if classic:
            described = yield self.remoteCall(brokerId, apis.DESCRIBE_GROUPS, lambda version, cls: make(
                cls, groups=tuple(classic), include_authorized_operations=False))
            members.update({d.group_id: len(d.members) for d in described.groups if d.error_code == ErrorCode.none})
        if consumer:
            described = yield self.remoteCall(brokerId, apis.CONSUMER_GROUP_DESCRIBE, lambda version, cls: make(
                cls, group_ids=tuple(consumer), include_authorized_operations=False))
            members.update({d.group_id: len(d.members) for d in described.groups if d.error_code == ErrorCode.none})
        return [{
            "groupId": g.group_id,
            "state": g.group_state,
            "protocol": "consumer" if g.group_type == "consumer" else "classic",
            "protocolType": g.protocol_type,
            "members": members.get(g.group_id, 0),
            "topics": None,
            "lag": None,
            "coordinator": brokerId,
        } for g in groups]

    @inlineCallbacks
    def group(self, context, groupId: str):
        listed = yield self._listGroups(context)
        kind = None
        for g in listed.groups:
            if g.group_id == groupId:
                kind = "consumer" if g.group_type == "consumer" else "classic"
                break
        result = {"groupId": groupId, "protocol": kind or "classic", "members": []}
        if kind == "consumer":
            described = yield self._describeConsumer(context, [groupId])
            d = described.groups[0]
            if d.error_code != ErrorCode.none:
                raise errorFor(d.error_code, f"group {groupId}")
            result.update(state=d.group_state, protocolType="consumer", assignor=d.assignor_name,
                          groupEpoch=d.group_epoch)
            for m in d.members:
                result["members"].append({
                    "memberId": m.member_id,
                    "instanceId": m.instance_id,
                    "clientId": m.client_id,
                    "host": m.client_host,
                    "subscribed": list(m.subscribed_topic_names),
                    "assignment": [
                        {"topic": tp.topic_name, "partitions": sorted(tp.partitions)}
                        for tp in m.assignment.topic_partitions
                    ],
                })
        else:
            described = yield self._describeClassic(context, [groupId])
            d = described.groups[0]
            if d.error_code != ErrorCode.none:
                raise errorFor(d.error_code, f"group {groupId}")
            if kind is None and d.group_state == "Dead":
                raise ConsoleHTTPError(404, f"Not found: group {groupId}")
            result.update(state=d.group_state, protocolType=d.protocol_type, assignor=d.protocol_data)
            for m in d.members:
                result["members"].append({
                    "memberId": m.member_id,
                    "instanceId": m.group_instance_id,
                    "clientId": m.client_id,
                    "host": m.client_host,
                    "assignment": parseAssignment(m.member_assignment)
                    if d.protocol_type == "consumer" else [],
                })
        offsets = yield self.committedOffsets(context, groupId)
        # Every partition assigned to a member, committed or not, as
        # kafka-consumer-groups.sh --describe lists them: the owner's member,
        # client and host on an assigned partition's row; committed offset and
        # lag None ("-") where nothing is committed.
        owners: dict = {}
        for m in result["members"]:
            for a in m["assignment"]:
                for p in a["partitions"]:
                    owners.setdefault((a["topic"], p), m)
        keys = sorted(set(offsets) | set(owners))
        ends = yield self.onHandlerThread(self._endOffsets, context, keys)
        rows = []
        total = 0
        complete = True
        uncommitted = 0
        for topic, partition in keys:
            committed = offsets.get((topic, partition))
            end = ends.get((topic, partition))
            if committed is None:
                lag = None
                uncommitted += 1
            else:
                lag = max(0, end - committed) if end is not None and committed >= 0 else None
                complete = complete and lag is not None
                total += lag or 0
            row = {"topic": topic, "partition": partition, "committed": committed,
                   "logEndOffset": end, "lag": lag}
            owner = owners.get((topic, partition))
            if owner is not None:
                row.update(memberId=owner["memberId"], clientId=owner["clientId"], host=owner["host"])
            rows.append(row)
        if complete:
            self.history.noteLag(groupId, total)
        result["offsets"] = rows
        #: Kafka's tool's total: the sum over partitions with a committed offset
        result["totalLag"] = total
        #: assigned partitions with no committed offset (not in totalLag)
        result["uncommitted"] = uncommitted
        #: false when some partitions' end offsets are on other brokers
        result["lagComplete"] = complete
        result["lagHistory"] = [[round(at, 3), lag] for at, lag in self.history.groupLag.get(groupId, ())]
        return result

    @inlineCallbacks
    def committedOffsets(self, context, groupId: str):
        def build(version, cls):
            Group = nested(cls, "OffsetFetchRequestGroup")
            return make(
                cls,
                groups=(make(Group, group_id=groupId, member_id=None, member_epoch=-1, topics=None),),
                require_stable=False,
            )

        answer = yield self.call(context, apis.OFFSET_FETCH, build)
        group = answer.groups[0]
        if group.error_code != ErrorCode.none:
            raise errorFor(group.error_code, f"offsets of group {groupId}")
        out = {}
        for topic in group.topics:
            for p in topic.partitions:
                if p.error_code == ErrorCode.none and p.committed_offset >= 0:
                    out[(topic.name, p.partition_index)] = p.committed_offset
        return out

    # -- records -----------------------------------------------------------------

    @inlineCallbacks
    def messages(self, context, name: str, partition: int | None = None, mode: str = "newest",
                 offset: int | None = None, timestamp: int | None = None, cursor: str = "",
                 limit: int = MAX_PAGE):
        """
        A page of records (see L{kafkatwist.console.messages}).

        @param partition: one partition, or C{None} for all (the page is
            shared between them).
        @param mode: C{newest} (the last records, newest first), C{oldest},
            C{offset} (from C{offset}) or C{timestamp} (from the first
            record at or after C{timestamp}, in ms).
        @param cursor: C{p:o,p:o...}: where each partition's page starts
            (forward modes) or ends (newest), from a previous page's
            C{next}/C{older}.
        """
        if mode not in ("newest", "oldest", "offset", "timestamp"):
            raise ConsoleHTTPError(400, f"unknown mode {mode!r}")
        limit = max(1, min(limit, MAX_PAGE))
        meta = yield self.metadata(context, [name])
        t = meta.topics[0] if meta.topics else None
        if t is None or t.error_code != ErrorCode.none:
            raise errorFor(t.error_code if t is not None else ErrorCode.unknown_topic_or_partition, f"topic {name}")
        leaders = {p.partition_index: p.leader_id for p in t.partitions}
        hosted = {p.partition_index for p in t.partitions if self.broker.nodeId in p.replica_nodes}
        if partition is not None and partition not in leaders:
            raise ConsoleHTTPError(404, f"Not found: partition {partition} of topic {name}")
        selected = [partition] if partition is not None else sorted(leaders)
        positions = _parseCursor(cursor)
        page = yield self.onHandlerThread(
            self._readMessages, context, name, selected, mode, offset, timestamp, positions, limit, hosted
        )
        page["leaders"] = {str(p): leaders[p] for p in selected}
        page["allPartitions"] = sorted(leaders)
        consoles = self.consoles()
        page["leaderConsoles"] = {str(p): consoles.get(leaders[p]) for p in page["notHere"]}
        page["thisBroker"] = self.broker.nodeId
        return page

    def _readMessages(self, context, name, selected, mode, offset, timestamp, positions, limit, hosted) -> dict:
        if not context.allowed(AclOperation.READ, ResourceType.TOPIC, name):
            raise ConsoleHTTPError(403, f"Not authorized: reading topic {name} (TOPIC_AUTHORIZATION_FAILED)")
        logManager = self.broker.logManager
        logs = {}
        notHere = []
        for p in selected:
            log = logManager.getLog(name, p) if logManager is not None and p in hosted else None
            if log is None:
                notHere.append(p)
            else:
                logs[p] = log
        if positions:
            # a later page: only the partitions its cursor carries on
            logs = {p: log for p, log in logs.items() if p in positions}
        share = max(1, limit // max(1, len(logs)))
        left = limit
        records: list[dict] = []
        nextCursor: dict[int, int] = {}
        olderCursor: dict[int, int] = {}
        ranges = {}
        for p, log in logs.items():
            start, hw = log.logStartOffset, log.highWatermark
            ranges[str(p)] = {"logStartOffset": start, "highWatermark": hw}
            # the page holds at most `limit` records: partitions past a full
            # page are not read, their place is carried in the cursor
            take = min(share, left)
            if mode == "newest":
                end = min(positions.get(p, hw), hw)
                if take <= 0:
                    if end > start:
                        olderCursor[p] = end
                    continue
                begin = max(start, end - take)
                got, _ = readPage(log, begin, take, end)
                records.extend(got)
                left -= len(got)
                if begin > start:
                    olderCursor[p] = begin
                continue
            if p in positions:
                begin = positions[p]
            elif mode == "oldest":
                begin = start
            elif mode == "offset":
                begin = start if offset is None else max(offset, start)
            else:
                found = log.offsetForTimestamp(timestamp if timestamp is not None else 0)
                begin = found[0] if found is not None else hw
            if take <= 0:
                if begin < hw:
                    nextCursor[p] = begin
                continue
            got, after = readPage(log, begin, take, hw)
            records.extend(got)
            left -= len(got)
            if after < hw:
                nextCursor[p] = after
        if mode == "newest":
            records.sort(key=lambda r: (r["timestamp"] or 0, r["offset"]), reverse=True)
        else:
            records.sort(key=lambda r: (r["timestamp"] or 0, r["partition"], r["offset"]))
        return {
            "topic": name,
            "mode": mode,
            "partitions": selected,
            "records": records,
            "next": _formatCursor(nextCursor),
            "older": _formatCursor(olderCursor),
            "ranges": ranges,
            "notHere": notHere,
        }

    # -- security ------------------------------------------------------------------

    @inlineCallbacks
    def acls(self, context):
        """
        Every ACL (DescribeAcls with a match-anything filter): needs DESCRIBE
        on the cluster, as the request does.
        """

        def build(version, cls):
            return make(
                cls, resource_type_filter=int(ResourceType.ANY), resource_name_filter=None,
                pattern_type_filter=int(PatternType.ANY), principal_filter=None, host_filter=None,
                operation=int(AclOperation.ANY), permission_type=int(AclPermissionType.ANY),
            )

        answer = yield self.call(context, apis.DESCRIBE_ACLS, build)
        if answer.error_code == ErrorCode.security_disabled:
            return None
        _raiseUnless(answer.error_code, "ACLs")
        out = []
        for resource in answer.resources:
            for acl in resource.acls:
                out.append({
                    "resourceType": ResourceType(resource.resource_type).name,
                    "resourceName": resource.resource_name,
                    "patternType": PatternType(resource.pattern_type).name,
                    "principal": acl.principal,
                    "host": acl.host,
                    "operation": AclOperation(acl.operation).name,
                    "permission": AclPermissionType(acl.permission_type).name,
                })
        return out

    @inlineCallbacks
    def scramUsers(self, context):
        """
        SCRAM users with their mechanisms and iteration counts
        (DescribeUserScramCredentials: never a salt or a key).
        """
        answer = yield self.call(context, apis.DESCRIBE_USER_SCRAM_CREDENTIALS, lambda version, cls: make(cls, users=None))
        _raiseUnless(answer.error_code, "SCRAM users")
        out = []
        for result in answer.results:
            if result.error_code != ErrorCode.none:
                continue
            out.append({
                "user": result.user,
                "mechanisms": [
                    {"mechanism": BY_TYPE[i.mechanism].name if i.mechanism in BY_TYPE else str(i.mechanism),
                     "iterations": i.iterations}
                    for i in result.credential_infos
                ],
            })
        return sorted(out, key=lambda u: u["user"])

    @inlineCallbacks
    def security(self, context):
        acls, users = None, None
        errors = {}
        try:
            acls = yield self.acls(context)
        except ConsoleHTTPError as e:
            errors["acls"] = e.message
        try:
            users = yield self.scramUsers(context)
        except ConsoleHTTPError as e:
            errors["scramUsers"] = e.message
        return {
            "authorizer": self.broker.authorizer is not None,
            "acls": acls,
            "scramUsers": users,
            "errors": errors,
        }


def replicaTest(broker):
    """
    C{hosts(topic, partition)}: whether this broker holds a replica of the
    partition (in a cluster a broker keeps empty logs of the others, which
    must not pass for the partition's).
    """
    cluster = broker.cluster
    if cluster is None:
        return lambda topic, partition: True
    image = cluster.image
    me = broker.nodeId

    def hosts(topic: str, partition: int) -> bool:
        assignment = image.topics.get(topic)
        return assignment is not None and me in assignment.partitions.get(partition, ())

    return hosts


def _parseCursor(text: str) -> dict[int, int]:
    out = {}
    for part in (text or "").split(","):
        if not part.strip():
            continue
        p, sep, o = part.partition(":")
        try:
            out[int(p)] = int(o)
        except ValueError:
            raise ConsoleHTTPError(400, f"bad cursor {text!r}") from None
    return out


def _formatCursor(positions: dict[int, int]) -> str | None:
    return ",".join(f"{p}:{o}" for p, o in sorted(positions.items())) or None



def _raiseUnless(code, what: str) -> None:
    if code != ErrorCode.none:
        raise errorFor(code, what)
