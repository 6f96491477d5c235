"""
The baseline the network layer is measured against: a one-reactor Twisted
server doing the same work as kafkatwist, with no threads and no hops.

A plain C{Protocol} on the global epoll reactor frames requests the way
L{kafkatwist.network.connection.KafkaConnection} does (4-byte size, a
bytearray buffer, size bounds, read size grown while a large frame is
pending, the same socket options), parses the header with the same
C{parseRequestHeader}, and calls the same handler objects -- a real
L{kafkatwist.server.broker.Broker} with the plugin registry and the on-disk log
manager -- in-line in C{dataReceived}, then writes C{encodeResponseFrame}'s
chunks.  It skips what a one-reactor server does not need: the
RequestChannel, memory pool, mute/unmute, handler threads.

    python -m bench.onereactor DIRECTORY [key=value ...]

prints C{port N} once listening; SIGTERM stops it.
"""

from __future__ import annotations

import dataclasses
import os
import struct
import sys


def main(argv: list[str]) -> int:
    from twisted.internet import epollreactor

    epollreactor.install()
    from twisted.internet import reactor
    from twisted.internet.protocol import Factory, Protocol

    from kafkatwist.server.broker import BrokerParts, BrokerServices, loadOrCreateClusterId
    from kafkatwist.config.dynamic import DynamicBrokerConfig
    from kafkatwist.config import loadConfig
    from kafkatwist.network.connection import DEFAULT_READ_SIZE, MAX_READ_SIZE
    from kafkatwist.network.transport import tuneSocket
    from kafkatwist.protocol.apis import API_VERSIONS
    from kafkatwist.protocol.codec import MalformedRequest, decodeRequest, encodeResponseFrame
    from kafkatwist.protocol.header import MIN_HEADER_SIZE, MalformedHeader, parseRequestHeader
    from kafkatwist.protocol.versions import unsupportedApiVersionsBody
    from kafkatwist.server.registry import HandlerRegistry, discoverPlugins
    from kafkatwist.service import makeReplicaManager, openLogManager, raiseDescriptorLimit

    directory = argv[0]
    overrides = [("listeners", "PLAINTEXT://127.0.0.1:0"), ("log.dir", os.path.join(directory, "data"))]
    overrides += [tuple(kv.split("=", 1)) for kv in argv[1:]]
    config = loadConfig(None, overrides)
    raiseDescriptorLimit()
    for d in config.logDirs:
        os.makedirs(d, exist_ok=True)
    clusterId = loadOrCreateClusterId(config.logDirs[0], config.nodeId, config["cluster.id"])
    registry = HandlerRegistry(discoverPlugins(config["plugin.paths"]))
    logManager = openLogManager(config)
    parts = BrokerParts.fromConfig(config, reactor)
    replicaManager = makeReplicaManager(parts, config)
    replicaManager.logManager = logManager
    broker = BrokerServices.assemble(
        parts, registry=registry, clusterId=clusterId,
        advertisedListeners=config.advertisedListeners,
        dynamicConfig=DynamicBrokerConfig(config, None), logManager=logManager,
        replicaManager=replicaManager, groupCoordinator=None, transactionCoordinator=None,
        cluster=None, authorizer=None, logCleaner=None,
    )
    registry.build(broker)
    supported = broker.supportedVersions()
    maxRequestSize = config["socket.request.max.bytes"]
    sendBuffer = config["socket.send.buffer.bytes"]
    receiveBuffer = config["socket.receive.buffer.bytes"]
    listener = config.listeners[0]
    _SIZE = struct.Struct(">i")

    class Context:
        __slots__ = (
            "connectionId", "listenerName", "securityProtocol", "principal", "clientAddress",
            "apiKey", "apiVersion", "correlationId", "clientId", "clock",
        )

    class Baseline(Protocol):
        def connectionMade(self) -> None:
            tuneSocket(self.transport.socket, sendBuffer, receiveBuffer)
            self.buffer = bytearray()
            self.frameSize = -1
            peer = self.transport.getPeer()
            self.peer = (peer.host, peer.port)
            self.connectionId = f"{listener.host}:{peer.port}"

        def dataReceived(self, data: bytes) -> None:
            buffer = self.buffer
            buffer += data
            while True:
                if self.frameSize < 0:
                    if len(buffer) < 4:
                        return
                    (size,) = _SIZE.unpack_from(buffer, 0)
                    if size < MIN_HEADER_SIZE or size > maxRequestSize:
                        self.transport.loseConnection()
                        return
                    self.frameSize = size
                end = 4 + self.frameSize
                if len(buffer) < end:
                    self.transport.bufferSize = min(max(end - len(buffer), DEFAULT_READ_SIZE), MAX_READ_SIZE)
                    return
                frame = bytes(memoryview(buffer)[4:end])
                del buffer[:end]
                self.frameSize = -1
                self.transport.bufferSize = DEFAULT_READ_SIZE
                chunks = self.handle(frame)
                if chunks is None:
                    self.transport.loseConnection()
                    return
                self.transport.writeSequence(chunks)

        def handle(self, frame):
            try:
                header = parseRequestHeader(frame)
            except MalformedHeader:
                return None
            versions = supported.get(header.apiKey)
            if versions is None:
                return None
            handler = broker.handlerFor(header.apiKey)
            if not versions[0] <= header.apiVersion <= versions[1]:
                if header.apiKey != API_VERSIONS:
                    return None
                body = unsupportedApiVersionsBody(supported)
                return encodeResponseFrame(API_VERSIONS, 0, header.correlationId, body)
            try:
                body = decodeRequest(header.apiKey, header.apiVersion, frame, header.bodyOffset)
            except MalformedRequest:
                return None
            ctx = Context()
            ctx.connectionId = self.connectionId
            ctx.listenerName = listener.name
            ctx.securityProtocol = "PLAINTEXT"
            ctx.principal = "User:ANONYMOUS"
            ctx.clientAddress = self.peer
            ctx.apiKey = header.apiKey
            ctx.apiVersion = header.apiVersion
            ctx.correlationId = header.correlationId
            ctx.clientId = header.clientId
            ctx.clock = broker.clock
            result = handler.handle(ctx, body)
            return encodeResponseFrame(header.apiKey, header.apiVersion, header.correlationId, result)

    factory = Factory.forProtocol(Baseline)
    port = reactor.listenTCP(0, factory, interface=listener.host, backlog=1024)
    broker.advertisedListeners = [
        dataclasses.replace(l, port=port.getHost().port) if l.port == 0 else l
        for l in broker.advertisedListeners
    ]
    sys.stdout.write(f"port {port.getHost().port}\n")
    sys.stdout.flush()
    reactor.run()
    logManager.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
