"""
The broker as a Twisted service: everything that can fail (configuration,
TLS files, ports, plugins, log recovery) happens in L{BrokerService.prepare}
before the reactor runs, so a bad setting stops the daemon with one line.
"""

from __future__ import annotations

import dataclasses
import gc
import os
import resource
import time

from twisted.application import service
from twisted.internet import defer, task, threads
from twisted.internet.error import CannotListenError
from twisted.logger import Logger

from kafkatwist.server.broker import BrokerParts, BrokerServices, loadOrCreateClusterId, storedClusterId
from kafkatwist.cluster.wiring import (
    UncleanElection,
    clusterDynamicConfig,
    controlledShutdown,
    makeCluster,
    startCluster,
    stopCluster,
)
from kafkatwist.coordinator.transaction.wiring import (
    makeTransactionCoordinator,
    stopTransactionCoordinator,
)
from kafkatwist.coordinator.wiring import makeGroupCoordinator, stopGroupCoordinator
from kafkatwist.util.dirlock import DataDirLock
from kafkatwist.log.errors import StorageError
from kafkatwist.config.dynamic import DynamicBrokerConfig
from kafkatwist.network.server import SocketServer
from kafkatwist.server.reconfigure import (
    ConnectionLimits,
    HandlerThreads,
    ListenerKeystores,
    NetworkThreads,
    ReplicationThrottles,
    brokerLogDefaults,
    makeLogCleaner,
    reconfigurables,
)
from kafkatwist.server.registry import HandlerRegistry, discoverPlugins
from kafkatwist.server.sdnotify import Notifier
from kafkatwist.server.authorizer import loadAuthorizer
from kafkatwist.util.startup import cannotListen

log = Logger()


def raiseDescriptorLimit() -> int:
    """
    Raise the soft RLIMIT_NOFILE to the hard one: each connection costs
    two descriptors while it is adopted, and accept() at the limit fails.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY:
        hard = 1 << 20
    if soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            return hard
        except (ValueError, OSError):
            pass
    return soft


def openLogManager(config):
    """
    The on-disk log under C{log.dirs}, recovered.
    """
    from kafkatwist.log import LogManager

    return LogManager(config.logDirs, brokerLogDefaults(config))


def makeReplicaManager(parts, config):
    """
    The replica manager, always: a single broker's is idle (nothing calls
    C{becomeLeader}), so every log stays a lone leader.  With
    C{zookeeper.connect} the cluster layer drives it.

    @param parts: the L{BrokerParts} (the purgatories it wakes, the
        follower throttle).
    """
    from kafkatwist.util.timers import TimerThread
    from kafkatwist.replication.manager import ReplicaManager

    replicaManager = ReplicaManager(
        config.nodeId, None, config, TimerThread("replica-manager"), wake=parts.wakePartition,
        producePurgatory=parts.producePurgatory,
    )
    replicaManager.followerQuota = parts.replicationQuotas.follower
    return replicaManager


def useLogManager(replicaManager, config, logManager, cluster=None) -> None:
    """
    Give the replica manager the open log, and the cluster layer (with
    C{zookeeper.connect}) as its L{IAlterIsr} and L{IBrokerDirectory}.  In
    a cluster, logs wait for the controller's word before taking appends.
    """
    replicaManager.logManager = logManager
    if cluster is not None:
        replicaManager.alterIsr = cluster
        replicaManager.directory = cluster
        replicaManager.brokerEpoch = cluster.currentBrokerEpoch
    if logManager is not None and _clustered(config):
        logManager.newLogsLead = False
        for partitionLog in logManager.logs():
            partitionLog.isLeader = False


def awaitCoordinatorReplication(broker, config) -> None:
    """
    The coordinators' appends wait for the ISR of a replicated partition
    (Kafka's coordinators write with acks=-1), so a committed offset or a
    transaction's state survives its leader; so do end-transaction markers,
    up to request.timeout.ms (Kafka's WriteTxnMarkers path).  Both through
    the replica manager's append path.
    """
    replicaManager = broker.replicaManager
    waiter = replicaManager.replicationWaiter(config["offsets.commit.timeout.ms"])
    broker.groupCoordinator.runtime.awaitReplication = waiter
    broker.transactionCoordinator.runtime.awaitReplication = waiter
    broker.transactionCoordinator.markerWriter.awaitReplication = replicaManager.replicationWaiter(
        config["request.timeout.ms"]
    )


def _clustered(config) -> bool:
    try:
        return bool(config["zookeeper.connect"])
    except KeyError:
        return False


class BrokerService(service.Service):
    """
    @param reactor: the main (global) reactor, passed in by C{tap.py}.
    """

    name = "kafkatwist"

    def __init__(self, config, reactor, logManagerFactory=openLogManager, notifier=None) -> None:
        self.config = config
        #: tells systemd (Type=notify) when the broker is ready and stopping
        self.notifier = notifier if notifier is not None else Notifier()
        self.reactor = reactor
        self.logManagerFactory = logManagerFactory
        self.broker = None
        self.server = None
        self.logManager = None
        self._periodic: list = []
        self._metricsPort = None
        #: the web console on the metrics listener (its figures' timer)
        self._metricsConsole = None
        self._metricsSite = None
        #: the HTTP listener is HTTPS
        self._metricsTls = False
        self._dirLock: DataDirLock | None = None
        #: the L{kafkatwist.cluster.service.ClusterService} with zookeeper.connect
        self.cluster = None

    def prepare(self) -> None:
        """
        Do everything that may fail; raises L{kafkatwist.config.ConfigError},
        L{kafkatwist.server.registry.PluginConflict},
        L{kafkatwist.util.startup.StartupError} (a damaged ACL or credential file
        among them) or C{OSError}.

        Order matters to an operator: nothing is written to the data
        directory until every port is bound and the directory's C{.lock} is
        held, so a port in use or a second broker on the same directory
        leaves it as it was.  So the network layer is built and bound from
        the broker's early parts (L{BrokerParts}: what needs the
        configuration alone); the L{BrokerServices} are assembled once, when
        every part exists, and only then are the plugins' handlers built
        and given to the network layer (Kafka's order: KafkaApis last).
        """
        config = self.config
        raiseDescriptorLimit()
        self._checkDataDirs()
        registry = HandlerRegistry(
            discoverPlugins(config["plugin.paths"], config["plugin.load.failure.policy"])
        )
        parts = BrokerParts.fromConfig(config, self.reactor)
        replicaManager = makeReplicaManager(parts, config)
        self.server = SocketServer(config, parts, self.reactor)
        advertisedListeners = self._bindListeners()
        self._bindMetrics()

        self._dirLock = DataDirLock(config.logDirs)
        self._dirLock.acquire()
        # Security state is read once the directory is ours (nothing here
        # writes); a bad authorizer setting stops start-up before anything is.
        parts.scramCredentials.load()
        parts.clientQuotas.store.load()
        # (An authorizer is made from the settings alone, as Kafka's
        # Authorizer.configure sees only the configs.)
        authorizer = loadAuthorizer(
            parts,
            config["authorizer.class.name"],
            config["plugin.paths"],
            config["plugin.load.failure.policy"],
        )
        configuredClusterId = config["cluster.id"]
        if config["zookeeper.connect"]:
            self.cluster = makeCluster(config, advertisedListeners, replicaManager)
            self.cluster.consoleUrl = self._consoleUrl(advertisedListeners)
            # The cluster's id is ZooKeeper's; a data directory of another
            # cluster is refused (Kafka's InconsistentClusterIdException).
            # The directories' meta.properties get ZooKeeper's id only (the
            # loser of the race to create /cluster/id must not have written
            # its own first).
            configuredClusterId = self.cluster.connect(
                lambda: configuredClusterId or storedClusterId(config.logDirs, config.nodeId)
            )
        clusterId = loadOrCreateClusterId(config.logDirs, config.nodeId, configuredClusterId)
        # The dynamic broker configs stored by earlier runs: what is built
        # from here on reads them; what was built before the directory was
        # ours (the network layer) is reconfigured.
        # (In a cluster: ZooKeeper's, read by connect().)
        if self.cluster is not None:
            dynamic = clusterDynamicConfig(self.cluster, config, self.reactor)
            clusterOnly = [UncleanElection(self.cluster)]
        else:
            dynamic = DynamicBrokerConfig.inDirectory(config)
            dynamic.load()
            clusterOnly = []
        for reconfigurable in [
            HandlerThreads(self.server), NetworkThreads(self.server), ConnectionLimits(self.server),
            ListenerKeystores(self.server), ReplicationThrottles(parts),
        ] + clusterOnly:
            reconfigurable.reconfigure(config, dynamic.current)
        config = dynamic.current
        if self.logManagerFactory is not None:
            self._dirLock.handOver()
            try:
                self.logManager = self.logManagerFactory(config)
            except StorageError:
                # Another broker took the directory after the hand-over.
                self._dirLock.check()
                raise
        # In a cluster the coordinators start empty and load the partitions
        # of their internal topic this broker comes to lead.
        single = self.cluster is None
        groupCoordinator = makeGroupCoordinator(parts, config, self.logManager, loadAll=single)
        transactionCoordinator = makeTransactionCoordinator(
            parts, config, self.logManager, loadAll=single, cluster=self.cluster,
            groupCoordinator=groupCoordinator,
        )
        self.broker = BrokerServices.assemble(
            parts,
            registry=registry,
            clusterId=clusterId,
            advertisedListeners=advertisedListeners,
            dynamicConfig=dynamic,
            logManager=self.logManager,
            replicaManager=replicaManager,
            groupCoordinator=groupCoordinator,
            transactionCoordinator=transactionCoordinator,
            cluster=self.cluster,
            authorizer=authorizer,
            logCleaner=makeLogCleaner(config, self.logManager),
        )
        registry.build(self.broker)
        self.server.serve(self.broker)
        self._serveMetrics()
        for reconfigurable in reconfigurables(self.broker, self.server) + clusterOnly:
            dynamic.addReconfigurable(reconfigurable)
        useLogManager(replicaManager, config, self.logManager, self.cluster)
        awaitCoordinatorReplication(self.broker, config)

    def _checkDataDirs(self) -> None:
        """
        What start-up would refuse in the data directories -- another
        broker holding them, a bad C{meta.properties}, a topic without
        usable metadata -- checked before any port is bound, reading only:
        a broker about to refuse its directory never accepts a connection
        (a port-based health check would see it up).
        """
        from kafkatwist.log.manager import checkTopicMetadata

        config = self.config
        DataDirLock(config.logDirs).probe()
        storedClusterId(config.logDirs, config.nodeId, config["cluster.id"])
        if self.logManagerFactory is openLogManager:
            checkTopicMetadata(config.logDirs)

    def _bindListeners(self) -> list:
        """
        @return: the advertised listeners, a listener on port 0 (tests)
            advertising the port it really got.
        """
        try:
            self.server.bind()
        except OSError as e:
            # bind() creates the Acceptors in listener order.
            bound = len(self.server.acceptors)
            failed = self.server.listeners[bound] if bound < len(self.server.listeners) else None
            raise cannotListen(str(failed or self.config["listeners"]), "listeners", e) from None
        ports = self.server.boundPorts()
        return [
            dataclasses.replace(l, port=ports[l.name]) if l.port == 0 and l.name in ports else l
            for l in self.config.advertisedListeners
        ]

    def _bindMetrics(self) -> None:
        """
        Bound here, with the other listeners, before the data directory is
        opened, the reactor runs and twistd daemonizes, so a port in use is
        one line on the terminal that started the broker and leaves the
        directory as it was.  What it serves (L{_serveMetrics}) needs the
        services: it is put in place once they exist, before the reactor
        runs (so before any request can come).
        """
        address = self.config["metrics.http.listener"]
        if not address:
            return
        from twisted.web.resource import Resource
        from twisted.web.server import Site

        from kafkatwist.server.http import parseHttpListener

        tls, host, port = parseHttpListener(address)
        self._metricsTls = tls
        from kafkatwist.console.site import LimitedRequest

        # bodies are limited from the first connection on, before the console is served
        self._metricsSite = Site(Resource(), requestFactory=LimitedRequest)
        try:
            if tls:
                from kafkatwist.network.tls import ServerContextFactory

                config = self.config
                contextFactory = ServerContextFactory(
                    config["ssl.keystore.location"], config["ssl.key.password"], None, "none",
                    config["ssl.enabled.protocols"], config["ssl.cipher.suites"],
                )
                self._metricsPort = self.reactor.listenSSL(port, self._metricsSite, contextFactory, interface=host)
            else:
                self._metricsPort = self.reactor.listenTCP(port, self._metricsSite, interface=host)
        except CannotListenError as e:
            raise cannotListen(address, "metrics.http.listener", e) from None

    def _consoleUrl(self, advertisedListeners) -> str | None:
        """
        The web console's URL as other brokers' consoles link to it: the
        HTTP listener's bound port, on its host (the first advertised
        listener's host when it listens on every address).
        """
        if self._metricsPort is None:
            return None
        from kafkatwist.server.http import parseHttpListener

        tls, host, _ = parseHttpListener(self.config["metrics.http.listener"])
        if host in ("", "0.0.0.0", "::"):
            host = advertisedListeners[0].host
        if ":" in host:
            host = f"[{host}]"
        return f"{'https' if tls else 'http'}://{host}:{self._metricsPort.getHost().port}"

    def _serveMetrics(self) -> None:
        if self._metricsSite is None:
            return
        from kafkatwist.console.site import httpSite

        site = httpSite(self.broker, self.server, self.reactor, secure=self._metricsTls)
        self._metricsSite.resource = site.resource
        self._metricsSite.displayTracebacks = site.displayTracebacks
        self._metricsSite.requestFactory = site.requestFactory
        self._metricsConsole = site.console

    def startService(self) -> None:
        super().startService()
        if self.server is None:
            self.prepare()
        if self.cluster is not None:
            # Here, not in prepare(): kazoo's threads must be started in the
            # process that serves (twistd daemonizes in between).
            startCluster(self.cluster, self.broker)
        # Everything built so far lives as long as the broker: keep it out of
        # the collector's way, so a full collection does not walk it (a
        # multi-millisecond pause in the request path otherwise).  Before the
        # ports are bound: a client that connects at once must not wait
        # behind the start-up collection.
        gc.collect()
        gc.freeze()
        self.server.start()
        ports = self.server.boundPorts()
        for listener in self.config.listeners:
            log.info(
                "Listening on {listener} (port {port}), advertised as {advertised}",
                listener=str(listener),
                port=ports.get(listener.name),
                advertised=str(self.broker.advertisedListenerFor(listener.name)),
            )
        self._checkServerCertificate()
        log.info("Data directory: {dirs}", dirs=", ".join(os.path.abspath(d) for d in self.config.logDirs))
        log.info(
            "{processors} network threads, {handlers} request handler threads",
            processors=self.config["num.network.threads"],
            handlers=self.server.handlerPool.numThreads,
        )
        registry = self.broker.registry
        log.info("Request handlers: {summary}", summary=registry.summary())
        plugged = set(registry.pluggedKeys())
        for key, line in zip(sorted(registry.handlers), registry.describe()):
            # The chains plugins take part in, at info; the built-in rest at debug.
            (log.info if key in plugged else log.debug)("ApiKey {line}", line=line)
        self._startLogTasks()
        self.broker.replicaManager.start()
        if self.broker.logCleaner is not None:
            self.broker.logCleaner.start()
        self._announceMetricsListener()
        # What the start-up built since (threads, ports, tasks) joins it; a
        # freeze without a collection moves lists, it does not walk objects.
        gc.freeze()
        _stopOnce(self.reactor)
        # twistd starts services before the reactor installs its SIGINT and
        # SIGTERM handlers; "started" is the line supervisors and tests wait
        # for, so it must come after them (a signal sent on it was lost).
        self.reactor.callWhenRunning(self._announceStarted)

    def _checkServerCertificate(self) -> None:
        keystore = self.config["ssl.keystore.location"]
        if not keystore or not any(l.tls for l in self.config.listeners):
            return
        from kafkatwist.server.servercert import advertisedHostWarnings

        for warning in advertisedHostWarnings(keystore, self.broker.advertisedListeners):
            log.warn("{warning}", warning=warning)

    def _announceStarted(self) -> None:
        log.info("kafkatwist node {nodeId} of cluster {clusterId} started",
                 nodeId=self.broker.nodeId, clusterId=self.broker.clusterId)
        self.notifier.ready(f"serving node {self.broker.nodeId} of cluster {self.broker.clusterId}")
        if self.notifier.watchdogSeconds:
            # The main reactor is alive while this keeps firing.
            call = task.LoopingCall(self.notifier.watchdog)
            call.clock = self.reactor
            self._periodic.append((call, call.start(self.notifier.watchdogSeconds / 2, now=True)))

    def _announceMetricsListener(self) -> None:
        if self._metricsPort is None:
            return
        from kafkatwist.server.http import parseHttpListener

        address = self._metricsPort.getHost()
        tls, host, _ = parseHttpListener(self.config["metrics.http.listener"])
        log.info(
            "Prometheus metrics on {scheme}://{host}:{port}/metrics, web console on {scheme}://{host}:{port}/",
            scheme="https" if tls else "http", host=host, port=address.port,
        )

    def _startLogTasks(self) -> None:
        """
        Retention and time-based flushing, on the main reactor's clock; the
        file work itself runs in the reactor's thread pool so the Acceptors
        never wait on a disk.
        """
        if self.logManager is None:
            return
        pool = self.reactor.getThreadPool()

        def inPool(f):
            def run():
                return threads.deferToThreadPool(
                    self.reactor, pool, f, int(time.time() * 1000)
                ).addErrback(lambda failure: log.failure("{f} failed", failure, f=f.__name__))

            return run

        for f, intervalMs in (
            (self.logManager.runRetention, self.config["log.retention.check.interval.ms"]),
            (self.logManager.flushDirty, self.config["log.flush.scheduler.interval.ms"]),
        ):
            call = task.LoopingCall(inPool(f))
            call.clock = self.reactor
            # Fires once stopped *and* any run in the pool has finished.
            self._periodic.append((call, call.start(intervalMs / 1000.0, now=False)))

    @defer.inlineCallbacks
    def stopService(self):
        super().stopService()
        self.notifier.stopping()
        # What waits on others (the controller, ZooKeeper) is bounded by
        # this; the logs are flushed and closed after it whatever happened.
        deadline = time.monotonic() + self.config["broker.shutdown.timeout.ms"] / 1000.0
        for call, _ in self._periodic:
            if call.running:
                call.stop()
        # A retention or flush pass still running in the pool must finish
        # before the log is closed under it.
        yield defer.DeferredList([done for _, done in self._periodic], consumeErrors=True)
        cleaner = self.broker.logCleaner if self.broker is not None else None
        if cleaner is not None:
            # Abandons a pass in progress (its cleaner process is killed)
            # and waits for a swap under way: in the pool, not here.
            yield threads.deferToThreadPool(self.reactor, self.reactor.getThreadPool(), cleaner.stop)
        if self._metricsConsole is not None:
            self._metricsConsole.stop()
        if self._metricsPort is not None:
            yield self._metricsPort.stopListening()
        if self.cluster is not None and self.config["controlled.shutdown.enable"]:
            # Leaders move away while this broker still serves (its
            # followers fetch the last records from it).
            yield threads.deferToThreadPool(
                self.reactor, self.reactor.getThreadPool(), controlledShutdown, self.cluster, self.config, deadline
            )
        if self.server is not None:
            yield self.server.stop()
        if self.cluster is not None:
            # It waits for the owner thread and ZooKeeper (up to the
            # deadline): in the pool, never on the reactor.
            yield threads.deferToThreadPool(
                self.reactor, self.reactor.getThreadPool(), stopCluster, self.cluster, deadline
            )
        if self.broker is not None:
            # Fetchers stopped and high watermarks written before the logs
            # close; in the pool, since it joins threads and writes files.
            yield threads.deferToThreadPool(
                self.reactor, self.reactor.getThreadPool(), self.broker.replicaManager.stop
            )
        if self.broker is not None:
            stopTransactionCoordinator(self.broker.transactionCoordinator)
            stopGroupCoordinator(self.broker.groupCoordinator)
            if self.broker.authorizer is not None:
                self.broker.authorizer.close()
        if self.logManager is not None:
            self.logManager.close()
        if self._dirLock is not None:
            self._dirLock.release()
        log.info("kafkatwist stopped")


def _stopOnce(reactor) -> None:
    """
    A second SIGINT or SIGTERM while the broker stops (an impatient Ctrl-C,
    a supervisor's repeat) logs one line instead of the reactor's critical
    C{ReactorNotRunning} traceback: Twisted's handlers call C{stop} again.
    The reactor reads its handlers from these attributes when it starts
    running, which is after this service starts.
    """
    stopping = []

    def once(name):
        original = getattr(reactor, name)

        def handler(number, frame=None):
            if stopping:
                log.info("Received signal {number} while stopping: already stopping", number=number)
                return
            stopping.append(number)
            original(number, frame)

        return handler

    for name in ("sigInt", "sigTerm", "sigBreak"):
        if callable(getattr(reactor, name, None)):
            setattr(reactor, name, once(name))
