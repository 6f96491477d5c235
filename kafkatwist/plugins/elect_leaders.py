"""
ElectLeaders (43, KIP-460): preferred and unclean leader elections, run by
the controller.  A broker that is not the controller answers
NOT_CONTROLLER (the admin client retries on the controller); one broker
without ZooKeeper is its own controller and every partition already has
its preferred leader (ELECTION_NOT_NEEDED).  Needs ALTER on the cluster.
"""

from __future__ import annotations

from kafkatwist.cluster.controller import PREFERRED
from kafkatwist.errors import ErrorCode
from kafkatwist.plugins.handler import Handler, HandlerPlugin, answerByDeadline
from kafkatwist.protocol.apis import ELECT_LEADERS, responseType
from kafkatwist.protocol.entities import NO_THROTTLE, durationMs, make, nested
from kafkatwist.security.acl import CLUSTER_NAME, AclOperation, ResourceType


class ElectLeadersHandler(Handler):
    """
    ElectLeaders v0-2 (v0 is preferred only; v1 adds the election type and
    a top-level error code).
    """

    apiKey = ELECT_LEADERS
    minVersion = 0
    maxVersion = 2

    def handle(self, context, request):
        cls = responseType(ELECT_LEADERS, context.apiVersion)
        electionType = getattr(request, "election_type", PREFERRED)
        wanted = None
        if request.topic_partitions is not None:
            wanted = [(t.topic, p) for t in request.topic_partitions for p in t.partitions]
        if not self.allowed(context, AclOperation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME):
            return self._answer(cls, ErrorCode.cluster_authorization_failed, [
                (t, p, ErrorCode.cluster_authorization_failed, None) for t, p in wanted or ()
            ])
        cluster = self.broker.cluster
        if cluster is None:
            return self._answer(cls, ErrorCode.none, self._single(wanted))
        def timedOut():
            code = ErrorCode.request_timed_out
            return self._answer(cls, code, [(t, p, code, None) for t, p in wanted or ()])

        answer, deferred = answerByDeadline(context, max(durationMs(request.timeout), 1000) / 1000.0, timedOut)

        def onDone(result):
            # On the cluster's owner thread.
            if isinstance(result, ErrorCode):
                answer(self._answer(cls, result, [(t, p, result, None) for t, p in wanted or ()]))
            else:
                answer(self._answer(cls, ErrorCode.none, result))

        cluster.electLeaders(electionType, wanted, onDone)
        return deferred

    def _single(self, wanted):
        logManager = self.broker.logManager
        topics = logManager.topics() if logManager is not None else {}
        if wanted is None:
            return []
        results = []
        for topic, partition in wanted:
            info = topics.get(topic)
            known = info is not None and 0 <= partition < info.numPartitions
            code = ErrorCode.election_not_needed if known else ErrorCode.unknown_topic_or_partition
            results.append((topic, partition, code, None))
        return results

    @staticmethod
    def _answer(cls, code, results):
        Result = nested(cls, "ReplicaElectionResult")
        PartitionResult = nested(cls, "PartitionResult")
        byTopic: dict[str, list] = {}
        for topic, partition, error, message in results:
            byTopic.setdefault(topic, []).append(
                make(PartitionResult, partition_id=partition, error_code=error, error_message=message)
            )
        return make(
            cls,
            throttle_time=NO_THROTTLE,
            error_code=code,
            replica_election_results=tuple(
                make(Result, topic=topic, partition_result=tuple(parts)) for topic, parts in byTopic.items()
            ),
        )


electLeaders = HandlerPlugin("builtin.elect_leaders", ELECT_LEADERS, ElectLeadersHandler, priority=0)
