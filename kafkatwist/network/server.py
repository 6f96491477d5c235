"""
The SocketServer: Acceptors on the main reactor, Processors in their
threads, the RequestChannel and the handler pool, started and stopped in
Kafka's order.
"""

from __future__ import annotations

import sys
import threading
from collections import Counter
from typing import Any

from twisted.internet import defer, threads
from twisted.logger import Logger

from kafkatwist.network.acceptor import Acceptor
from kafkatwist.util.affinity import availableCpus, requestThreadCpusFor, showCpus
from kafkatwist.network.channel import MemoryPool, RequestChannel
from kafkatwist.network.connectionquotas import ConnectionQuotas, connectionRates
from kafkatwist.network.handlers import HandlerPool
from kafkatwist.network.processor import Processor
from kafkatwist.network.tls import ReloadableContextFactory, listenerContextFactory
from kafkatwist.security.sslprincipal import SslPrincipalBuilder

log = Logger()

#: how long shutdown lets in-flight requests finish
SHUTDOWN_GRACE_SECONDS = 3.0

#: the GIL switch interval the broker runs with (seconds)
SWITCH_INTERVAL = 0.001


class SocketServer:
    """
    Built and bound before the data directory is opened (so a port in use
    leaves it as it was), from the broker's early parts; the services whose
    handlers answer requests come later, once, with L{serve} (Kafka's
    C{enableRequestProcessing}), before L{start}.

    @param mainReactor: the global reactor, which runs the Acceptors (and
        nothing else of the network layer).
    @param parts: the L{kafkatwist.server.broker.BrokerParts} (credentials, client
        quotas, the handler threads' hook).
    """

    #: the L{IBroker} whose handlers serve requests (set by L{serve})
    broker: Any

    def __init__(self, config, parts, mainReactor) -> None:
        self.config = config
        self.parts = parts
        self.mainReactor = mainReactor
        self.listeners = config.listeners
        self.maxRequestSize = config["socket.request.max.bytes"]
        self.idleTimeout = config["connections.max.idle.ms"] / 1000.0
        #: ApiKey -> (min, max) of the handlers (filled by L{serve}; the
        #: Processors share this dict)
        self.supportedVersions: dict = {}
        self.requestLog = config["request.logging.enable"]
        self.memoryPool = MemoryPool(config["queued.max.request.bytes"])
        # Requests per hand-off: small enough that a handler blocked on disk
        # leaves work for the others.
        self.channel = RequestChannel(config["queued.max.requests"], batchSize=8)
        maxRate, listenerRates = connectionRates(config)
        self.quotas = ConnectionQuotas(
            config["max.connections"], config["max.connections.per.ip"],
            config["max.connections.per.ip.overrides"],
            maxRate=maxRate, listenerRates=listenerRates,
            samples=config["quota.window.num"], windowSeconds=config["quota.window.size.seconds"],
            clock=lambda: int(mainReactor.seconds() * 1000),
        )
        # The ip entities' connection_creation_rate (AlterClientQuotas).
        clientQuotas = parts.clientQuotas
        clientQuotas.store.listeners.append(self.quotas.quotasChanged)
        self.quotas.quotasChanged(clientQuotas.store.quotas())
        #: client certificate -> principal (ssl.principal.mapping.rules)
        self.sslPrincipalBuilder = SslPrincipalBuilder(config["ssl.principal.mapping.rules"])
        #: TLS listener name -> its context factory (replaced by a dynamic
        #: keystore update)
        self.tlsContextFactories = {
            l.name: ReloadableContextFactory(listenerContextFactory(config.sslSettings(l.name)))
            for l in self.listeners
            if l.tls
        }
        #: CPUs the Processors and handler threads keep to (None: any)
        self.requestThreadCpus = requestThreadCpusFor(config, availableCpus())
        #: the Processors the Acceptors hand connections to: changed only on
        #: the main reactor once started (L{resizeProcessors})
        self.processors = [Processor(i, self) for i in range(config["num.network.threads"])]
        self._nextProcessorIndex = len(self.processors)
        #: Processors removed by a resize and not yet ended (shutdown waits for them)
        self._retiring: set = set()
        #: what removed Processors counted (the request metrics keep it)
        self.retiredStats: list = []
        self.started = False
        self.handlerPool = HandlerPool(
            self.channel, None, config["num.io.threads"], cpus=self.requestThreadCpus,
            clientQuotas=clientQuotas,
        )
        self.acceptors: list[Acceptor] = []
        self._lock = threading.Lock()
        self.connectionsByListener: Counter[str] = Counter()

    def serve(self, broker) -> None:
        """
        Answer requests with C{broker}'s handlers (its registry is built).
        """
        self.broker = broker
        self.handlerPool.broker = broker
        self.supportedVersions.update(broker.supportedVersions())

    def tlsContextFactoryFor(self, listenerName: str):
        return self.tlsContextFactories.get(listenerName)

    def saslSettings(self, listener) -> tuple:
        """
        What each connection's L{kafkatwist.security.session.SaslSession} on
        the SASL listener C{listener} is made from: its mechanisms, the
        credential store, C{connections.max.reauth.ms}.
        """
        return (
            self.config.saslMechanisms(listener.name),
            self.parts.scramCredentials,
            self.config["connections.max.reauth.ms"],
        )

    def bind(self) -> None:
        """
        Bind every listener; raises C{OSError} if a port is taken.
        """
        if self.acceptors:
            return
        for listener in self.listeners:
            self.acceptors.append(
                Acceptor(
                    self.mainReactor,
                    listener,
                    self.processors,
                    self.quotas,
                    self.config["socket.send.buffer.bytes"],
                    self.config["socket.receive.buffer.bytes"],
                )
            )

    def start(self) -> None:
        """
        Start the threads, then accept.
        """
        self.bind()
        # Processors and handler threads hand requests back and forth: a
        # thread that wants the GIL waits up to the switch interval (5 ms by
        # default) for the one holding it, which put the p99 of produce ->
        # ack at 5-9 ms on 2 cores.  1 ms costs no measurable CPU (bench/RESULTS.md).
        if sys.getswitchinterval() > SWITCH_INTERVAL:
            sys.setswitchinterval(SWITCH_INTERVAL)
        if self.requestThreadCpus is not None:
            log.info(
                "Processors and request handler threads run on CPU {cpus} "
                "(request.threads.cpu.affinity)",
                cpus=showCpus(self.requestThreadCpus),
            )
        for processor in self.processors:
            processor.start()
        self.started = True
        self.handlerPool.start()
        self.parts.handlerCalls.use(self.channel.sendCall)
        for acceptor in self.acceptors:
            acceptor.startListening()

    def resizeProcessors(self, count: int) -> None:
        """
        Run C{count} Processors (a dynamic C{num.network.threads}), in the
        main thread once started.  New ones start their threads and the
        Acceptors hand them connections from their next accept on; removed
        ones take no more connections, let their in-flight requests finish
        for up to L{SHUTDOWN_GRACE_SECONDS}, then close their connections
        (clients reconnect to the others) and end, as Kafka's
        C{Acceptor.removeProcessors} does.
        """
        current = len(self.processors)
        if count > current:
            added = [Processor(self._nextProcessorIndex + i, self) for i in range(count - current)]
            self._nextProcessorIndex += len(added)
            if self.started:
                for processor in added:
                    processor.start()
            self.processors.extend(added)
        elif count < current:
            removed = self.processors[count:]
            del self.processors[count:]
            if self.started:
                deadline = self.mainReactor.seconds() + SHUTDOWN_GRACE_SECONDS
                for processor in removed:
                    self._retire(processor, deadline)
        else:
            return
        log.info(
            "Network threads (num.network.threads) resized from {old} to {new}: processors {indexes}",
            old=current, new=count, indexes=[p.index for p in self.processors],
        )

    def _retire(self, processor, deadline: float) -> None:
        self._retiring.add(processor)

        def ended(result):
            self._retiring.discard(processor)
            self.retiredStats.append(processor.stats)
            return result

        processor.stop(deadline, "network thread removed (num.network.threads)").addBoth(ended)

    def requestStats(self) -> list:
        """
        The request counters of every Processor, including removed ones.
        """
        return [p.stats for p in self.processors] + self.retiredStats

    def boundPorts(self) -> dict[str, int]:
        return {a.listener.name: a.port for a in self.acceptors}

    def connectionOpened(self, connection) -> None:
        with self._lock:
            self.connectionsByListener[connection.listenerName] += 1

    def connectionClosed(self, connection) -> None:
        with self._lock:
            self.connectionsByListener[connection.listenerName] -= 1

    @defer.inlineCallbacks
    def stop(self):
        """
        Stop accepting; let in-flight requests finish and their responses
        go out; close connections; end the Processor and handler threads.
        """
        for acceptor in self.acceptors:
            acceptor.stopListening()
        # A resize from now on starts no thread.
        self.started = False
        deadline = self.mainReactor.seconds() + SHUTDOWN_GRACE_SECONDS
        # Processor clocks are their own reactors; hand each its deadline in
        # its own terms (they all read time.time()).
        yield defer.DeferredList(
            [processor.stop(deadline) for processor in self.processors]
            + [processor._stopped for processor in self._retiring],
            consumeErrors=True,
        )
        self.channel.close(self.handlerPool.numThreads)
        joined = yield threads.deferToThreadPool(
            self.mainReactor, self.mainReactor.getThreadPool(), self.handlerPool.join, 2.0
        )
        if not joined:
            log.warn("Some request handler threads did not stop in time")
        # Nothing takes calls off the channel any more: what still comes
        # (shutdown work) runs where it is asked.
        self.parts.handlerCalls.use(None)
