"""
A test drop-in (loaded with plugin.paths): a private API through which a
test plays the controller of brokers started without ZooKeeper.  One JSON
command per request, one JSON answer:

  {"op": "roles", "brokers": {"1": ["127.0.0.1", 9092], ...},
   "roles": [{"topic", "partition", "leader", "epoch", "isr", "replicas",
              "partitionEpoch"}]}
      -> becomeLeader / becomeFollower on this broker's replica manager
  {"op": "state"} -> every replicated partition: role, epoch, ISR, HW, LEO,
      log start, leader epochs
  {"op": "dump", "topic", "partition"} -> the partition's whole log,
      base64 (read to the log end, as a follower would)

Its ISR changes are the replica manager's default (accepted at once): the
fake IAlterIsr of these tests.
"""

import base64
import json

from kafkatwist.plugins.handler import Handler, HandlerPlugin
from kafkatwist.protocol.apis import registerSchema
from kafkatwist.protocol.entitytypes import request, response
from kafkatwist.replication.manager import StaticDirectory

STATIC_CONTROLLER = 10017

StaticControllerRequest = request("StaticControllerRequest", STATIC_CONTROLLER, 0, [("command", "string")])
StaticControllerResponse = response("StaticControllerResponse", STATIC_CONTROLLER, 0, [("result", "bytes")])
registerSchema(STATIC_CONTROLLER, "static_controller", 0, StaticControllerRequest, StaticControllerResponse)


class StaticControllerHandler(Handler):
    apiKey = STATIC_CONTROLLER
    minVersion = 0
    maxVersion = 0

    def handle(self, context, req):
        command = json.loads(req.command)
        op = command["op"]
        manager = self.broker.replicaManager
        if op == "roles":
            manager.directory = StaticDirectory(
                {int(k): tuple(v) for k, v in command["brokers"].items()}
            )
            me = self.broker.nodeId
            for r in command["roles"]:
                if r["leader"] == me:
                    manager.becomeLeader(
                        r["topic"], r["partition"], r["epoch"], r["isr"], r["replicas"],
                        r.get("partitionEpoch", 0),
                    )
                else:
                    manager.becomeFollower(
                        r["topic"], r["partition"], r["leader"], r["epoch"], r["replicas"],
                        r.get("partitionEpoch", 0),
                    )
            result = {"ok": True}
        elif op == "state":
            result = {}
            for (topic, partition), p in list(manager._partitions.items()):
                log = p.log
                result[f"{topic}-{partition}"] = {
                    "role": p.role,
                    "epoch": p.leaderEpoch,
                    "isr": sorted(p.isr),
                    "hw": log.highWatermark,
                    "leo": log.logEndOffset,
                    "start": log.logStartOffset,
                    "epochs": [list(e) for e in log.epochs.entries],
                    "pendingIsr": None if p.pendingIsr is None else sorted(p.pendingIsr),
                }
        elif op == "delayIsrWrites":
            # Fault injection: every ISR write is answered C{seconds} late
            # (a slow ZooKeeper), so a test can act while one is in flight.
            manager.alterIsr = _DelayedAlterIsr(manager.alterIsr, float(command["seconds"]))
            result = {"ok": True}
        elif op == "dump":
            log = self.broker.logManager.getLog(command["topic"], command["partition"])
            chunks, offset = [], log.logStartOffset
            while offset < log.logEndOffset:
                info = log.read(offset, 1 << 30, True, False, True)
                data = info.records
                data = bytes(data) if isinstance(data, (bytes, bytearray)) else _regionBytes(data)
                if not data:
                    break
                chunks.append(data)
                offset = _nextOffset(data)
            result = {"data": base64.b64encode(b"".join(chunks)).decode("ascii")}
        else:
            result = {"error": f"unknown op {op}"}
        return StaticControllerResponse(result=json.dumps(result).encode("ascii"))


class _DelayedAlterIsr:
    def __init__(self, inner, seconds):
        self.inner = inner
        self.seconds = seconds

    def alterIsr(self, *args, **kwargs):
        import threading

        timer = threading.Timer(self.seconds, self.inner.alterIsr, args, kwargs)
        timer.daemon = True
        timer.start()


def _regionBytes(region):
    try:
        return region.read()
    finally:
        region.close()


def _nextOffset(data):
    from kafkatwist.protocol.batch import iterBatchHeaders

    last = None
    for _, header in iterBatchHeaders(data):
        last = header
    return last.baseOffset + last.lastOffsetDelta + 1


staticController = HandlerPlugin("test.static_controller", STATIC_CONTROLLER, StaticControllerHandler)
