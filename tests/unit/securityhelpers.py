"""
The security handlers driven in process: a context with its own clock (a refused login's
delayed answer fires when it is advanced), fake services with an authorizer, and L{call},
which passes the request and the answer through the codec.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from twisted.internet.defer import Deferred
from twisted.internet.task import Clock

from kafkatwist.protocol.apis import requestType, responseType
from kafkatwist.protocol.entities import make
from kafkatwist.security.authorizer import StandardAuthorizer
from tests.fakeservices import FakeServices
from tests.unit.adminhelpers import roundTrip

#: connection.failed.authentication.delay.ms of L{securityServices}
DELAY_MS = 100


class FakePending:
    def __init__(self):
        self.deferred = Deferred()

    def complete(self, result):
        self.deferred.callback(result)


@dataclass
class Ctx:
    apiKey: int
    apiVersion: int
    sasl: object = None
    principal: str = "User:ANONYMOUS"
    clientAddress: tuple = ("127.0.0.1", 50000)
    listenerName: str = "SASL_PLAINTEXT"
    clientId: str = "test"
    correlationId: int = 1
    clock: Clock = field(default_factory=Clock)

    def respondLater(self):
        return FakePending()


def securityServices(**overrides):
    """
    The shared fake services, with the failed-authentication delay these
    tests drive on the context's clock.
    """
    return FakeServices({"connection.failed.authentication.delay.ms": DELAY_MS}, **overrides)


def call(handlerClass, broker, version, context=None, **values):
    """
    Encode a request of C{version}, handle it, and decode the answer; a
    delayed answer is fired by advancing the context's clock.
    """
    handler = handlerClass(broker)
    assert handler.minVersion <= version <= handler.maxVersion
    request = roundTrip(make(requestType(handler.apiKey, version), **values))
    context = context or Ctx(handler.apiKey, version)
    context.apiKey, context.apiVersion = handler.apiKey, version
    response = handler.handle(context, request)
    if isinstance(response, Deferred):
        fired = []
        response.addCallback(fired.append)
        assert not fired
        context.clock.advance(DELAY_MS / 1000.0)
        [response] = fired
    assert type(response) is responseType(handler.apiKey, version)
    return roundTrip(response)


ADMIN = "User:admin"


def aclBroker(**kw):
    return securityServices(authorizer=StandardAuthorizer(None, superUsers={ADMIN}, **kw))


def admin(apiKey, version):
    return Ctx(apiKey, version, principal=ADMIN)
