"""
The plugin-facing contract (C{docs/plugins.md}): the objects the broker
really builds provide the interfaces plugins are written against, and so
does the shared test double of the services.
"""

from __future__ import annotations

import dataclasses

from twisted.internet import task
from zope.interface.verify import verifyObject

from kafkatwist.server.broker import BrokerServices
from kafkatwist.config import BrokerConfig
from kafkatwist.interfaces import IBroker, IPartitionLog, IRequestContext
from kafkatwist.log import MemoryLogManager
from kafkatwist.service import BrokerService
from tests.fakeservices import FakeServices
from tests.log.batches import makeBatch


def test_the_shared_fake_provides_the_services_contract():
    assert verifyObject(IBroker, FakeServices())
    assert verifyObject(IBroker, FakeServices(handlers=True))


def test_the_broker_assembles_complete_services(tmp_path):
    """
    The daemon's own services, as C{prepare} builds them: every field a
    real part (C{None} only where a setting says so), and the contract
    verified on them.
    """
    config = BrokerConfig({
        "listeners": "PLAINTEXT://127.0.0.1:0", "log.dir": str(tmp_path), "log.cleaner.enable": "false",
    })
    from twisted.internet import reactor

    service = BrokerService(config, reactor)
    service.prepare()
    try:
        services = service.broker
        assert isinstance(services, BrokerServices)
        assert verifyObject(IBroker, services)
        # None by configuration only: no ZooKeeper, no authorizer, no cleaner.
        absent = {f.name for f in dataclasses.fields(services) if getattr(services, f.name) is None}
        assert absent == {"cluster", "authorizer", "logCleaner"}
        # The handlers were built against these very services.
        assert services.handlerFor(0).broker is services
        assert service.server.broker is services
    finally:
        from kafkatwist.coordinator.transaction.wiring import stopTransactionCoordinator
        from kafkatwist.coordinator.wiring import stopGroupCoordinator

        stopTransactionCoordinator(services.transactionCoordinator)
        stopGroupCoordinator(services.groupCoordinator)
        for acceptor in service.server.acceptors:
            acceptor.socket.close()
        service.broker.replicaManager.clock.stop()
        service.logManager.close()
        service._dirLock.release()


def test_partition_logs_provide_the_log_contract():
    logManager = MemoryLogManager()
    logManager.createTopic("t", 1, {})
    log = logManager.getLog("t", 0)
    log.append(makeBatch(3), 0)
    assert verifyObject(IPartitionLog, log)
    assert log.replicated() is False


def test_request_contexts_provide_the_context_contract():
    from kafkatwist.network.connection import RequestContext
    from kafkatwist.protocol.header import RequestHeader

    connection = type("Connection", (), {
        "connectionId": "c", "listenerName": "PLAINTEXT", "securityProtocol": "PLAINTEXT",
        "principal": "User:ANONYMOUS", "sasl": None, "clientAddress": ("127.0.0.1", 1),
        "owner": type("Owner", (), {"clock": task.Clock(), "authorizer": None})(),
    })()
    header = RequestHeader(0, 9, 1, "cli", 0)
    assert verifyObject(IRequestContext, RequestContext(connection, header, 100))
