"""
AlterPartitionReassignments (45) and ListPartitionReassignments (46),
KIP-455, as ZooKeeper-mode Kafka 3.x's controller serves them: only the
controller answers (others NOT_CONTROLLER, which admin clients retry on the
controller); a reassignment is answered once it is written to ZooKeeper,
and completes on its own (L{kafkatwist.cluster.controller}).  ALTER on the
cluster to reassign, DESCRIBE to list.

One broker without ZooKeeper is a cluster of one: its partitions can only
be "reassigned" to itself (nothing to do), any other broker is not alive.
"""

from __future__ import annotations

from kafkatwist.cluster import reassignment as R
from kafkatwist.errors import ErrorCode
from kafkatwist.plugins.handler import Handler, HandlerPlugin, answerByDeadline
from kafkatwist.protocol.apis import (
    ALTER_PARTITION_REASSIGNMENTS,
    LIST_PARTITION_REASSIGNMENTS,
    responseType,
)
from kafkatwist.protocol.entities import NO_THROTTLE, durationMs, make, nested
from kafkatwist.security.acl import CLUSTER_NAME, AclOperation, ResourceType

_UNKNOWN = "The partition does not exist."
_NO_REASSIGNMENT = "No partition reassignment is in progress."


class AlterPartitionReassignmentsHandler(Handler):
    """
    AlterPartitionReassignments v0: per partition its target replicas, or
    null to cancel the reassignment in progress.
    """

    apiKey = ALTER_PARTITION_REASSIGNMENTS
    minVersion = 0
    maxVersion = 0

    def handle(self, context, request):
        cls = responseType(ALTER_PARTITION_REASSIGNMENTS, context.apiVersion)
        # One answer per partition, the last entry winning (Kafka reads the
        # request into a map).
        latest = {
            (t.name, p.partition_index): None if p.replicas is None else tuple(p.replicas)
            for t in request.topics
            for p in t.partitions
        }
        wanted = [(topic, partition, replicas) for (topic, partition), replicas in latest.items()]
        if not self.allowed(context, AclOperation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME):
            code = ErrorCode.cluster_authorization_failed
            return self._answer(cls, code, "Cluster authorization failed.",
                                [(t, p, code, None) for t, p, _ in wanted])
        cluster = self.broker.cluster
        if cluster is None:
            return self._answer(cls, ErrorCode.none, None, self._single(wanted))
        def timedOut():
            code = ErrorCode.request_timed_out
            return self._answer(cls, code, None, [(t, p, code, None) for t, p, _ in wanted])

        answer, deferred = answerByDeadline(context, max(durationMs(request.timeout), 1000) / 1000.0, timedOut)

        def onDone(result):
            # On the cluster's owner thread.
            if isinstance(result, ErrorCode):
                answer(self._answer(cls, result, None, []))
            else:
                answer(self._answer(cls, ErrorCode.none, None, result))

        cluster.alterReassignments(wanted, onDone)
        return deferred

    def _single(self, wanted):
        logManager = self.broker.logManager
        topics = logManager.topics() if logManager is not None else {}
        me = self.broker.nodeId
        results = []
        for topic, partition, replicas in wanted:
            if replicas is not None:
                message = R.validate(replicas, [r for r in replicas if r != me], {me})
                if message is not None:
                    results.append((topic, partition, ErrorCode.invalid_replica_assignment, message))
                    continue
            info = topics.get(topic)
            if replicas is None:
                # Nothing is ever being reassigned here (Kafka answers this
                # for unknown partitions too).
                results.append((topic, partition, ErrorCode.no_reassignment_in_progress, _NO_REASSIGNMENT))
            elif info is None or not 0 <= partition < info.numPartitions:
                results.append((topic, partition, ErrorCode.unknown_topic_or_partition, _UNKNOWN))
            else:
                results.append((topic, partition, ErrorCode.none, None))
        return results

    @staticmethod
    def _answer(cls, code, message, results):
        Topic = nested(cls, "ReassignableTopicResponse")
        Partition = nested(cls, "ReassignablePartitionResponse")
        byTopic: dict[str, list] = {}
        for topic, partition, error, text in results:
            byTopic.setdefault(topic, []).append(
                make(Partition, partition_index=partition, error_code=error, error_message=text)
            )
        return make(
            cls,
            throttle_time=NO_THROTTLE,
            error_code=code,
            error_message=message,
            responses=tuple(make(Topic, name=t, partitions=tuple(ps)) for t, ps in byTopic.items()),
        )


class ListPartitionReassignmentsHandler(Handler):
    """
    ListPartitionReassignments v0: the partitions being reassigned (all,
    or those asked for), with their replicas and those being added and
    removed.
    """

    apiKey = LIST_PARTITION_REASSIGNMENTS
    minVersion = 0
    maxVersion = 0

    def handle(self, context, request):
        cls = responseType(LIST_PARTITION_REASSIGNMENTS, context.apiVersion)
        if not self.allowed(context, AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
            return self._answer(cls, ErrorCode.cluster_authorization_failed, "Cluster authorization failed.", [])
        cluster = self.broker.cluster
        if cluster is None:
            return self._answer(cls, ErrorCode.none, None, [])
        image = cluster.image
        if image.controllerId != cluster.brokerId:
            return self._answer(cls, ErrorCode.not_controller, None, [])
        if request.topics is None:
            asked = None
        else:
            asked = {(t.name, p) for t in request.topics for p in t.partition_indexes}
        ongoing = []
        for name, assignment in sorted(image.topics.items()):
            for partition in sorted(set(assignment.adding) | set(assignment.removing)):
                if asked is None or (name, partition) in asked:
                    ongoing.append((name, partition, assignment.partitions[partition],
                                    assignment.adding.get(partition, ()), assignment.removing.get(partition, ())))
        return self._answer(cls, ErrorCode.none, None, ongoing)

    @staticmethod
    def _answer(cls, code, message, ongoing):
        Topic = nested(cls, "OngoingTopicReassignment")
        Partition = nested(cls, "OngoingPartitionReassignment")
        byTopic: dict[str, list] = {}
        for topic, partition, replicas, adding, removing in ongoing:
            byTopic.setdefault(topic, []).append(
                make(Partition, partition_index=partition, replicas=tuple(replicas),
                     adding_replicas=tuple(adding), removing_replicas=tuple(removing))
            )
        return make(
            cls,
            throttle_time=NO_THROTTLE,
            error_code=code,
            error_message=message,
            topics=tuple(make(Topic, name=t, partitions=tuple(ps)) for t, ps in byTopic.items()),
        )


alterPartitionReassignments = HandlerPlugin(
    "builtin.alter_partition_reassignments", ALTER_PARTITION_REASSIGNMENTS,
    AlterPartitionReassignmentsHandler, priority=0,
)
listPartitionReassignments = HandlerPlugin(
    "builtin.list_partition_reassignments", LIST_PARTITION_REASSIGNMENTS,
    ListPartitionReassignmentsHandler, priority=0,
)
