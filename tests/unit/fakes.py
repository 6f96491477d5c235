"""
Test doubles for the network layer: an owner (Processor stand-in) that
records what a connection submits, and frame builders.
"""

import struct

from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport

from twisted.internet.defer import Deferred

from kafkatwist.util.clock import ThreadSafeClock
from kafkatwist.network.pending import PendingResponse
from kafkatwist.network.channel import MemoryPool, Response
from kafkatwist.network.connection import KafkaConnection
from kafkatwist.protocol.codec import encodeRequestFrame
from kafkatwist.security.sslprincipal import SslPrincipalBuilder


class FakeOwner:
    def __init__(self, pool=None, maxRequestSize=1024 * 1024, supported=None):
        self.clock = ThreadSafeClock(Clock())
        self.memoryPool = pool or MemoryPool(-1)
        self.maxRequestSize = maxRequestSize
        self.supportedVersions = supported or {3: (0, 12), 18: (0, 3)}
        self.submitted = []
        self.sslPrincipalBuilder = SslPrincipalBuilder()
        self.opened = []
        self.closed = []

    def submit(self, request):
        self.submitted.append(request)

    def connectionOpened(self, c):
        self.opened.append(c)

    def connectionClosed(self, c):
        self.closed.append(c)

    def responseSent(self, c, request, pickedUpAt):
        pass

    def callInThread(self, f, *args):
        f(*args)

    def offload(self, f, args, then):
        try:
            result = f(*args)
        except Exception as e:
            result = e
        then(result)


class FakeRegion:
    def __init__(self, data):
        import tempfile

        self.file = tempfile.TemporaryFile()
        self.file.write(data)
        self.file.flush()
        self.length = len(data)
        self.closed = False

    def fileno(self):
        return self.file.fileno()

    def position(self):
        return 0

    def read(self):
        self.file.seek(0)
        return self.file.read()

    def close(self):
        self.closed = True


def connect(owner, listener="PLAINTEXT"):
    connection = KafkaConnection(owner, listener, 1)
    transport = StringTransport()
    connection.makeConnection(transport)
    return connection, transport


def apiVersionsFrame(correlationId, version=0):
    from kafkatwist.protocol.apis import requestType

    cls = requestType(18, version)
    kwargs = {}
    if version >= 3:
        kwargs = dict(client_software_name="t", client_software_version="1")
    return encodeRequestFrame(18, version, correlationId, "test", cls(**kwargs))


def metadataFrame(correlationId, version=1):
    from kafkatwist.protocol.apis import requestType

    from kafkatwist.protocol.entities import make

    cls = requestType(3, min(version, 12))
    entity = make(cls, topics=None, allow_auto_topic_creation=True,
                  include_topic_authorized_operations=False,
                  include_cluster_authorized_operations=False)
    frame = encodeRequestFrame(3, min(version, 12), correlationId, "test", entity)
    if version > 12:
        # Only the header matters for version checks.
        frame = frame[:6] + struct.pack(">h", version) + frame[8:]
    return frame


def respond(connection, request, payload=b"ok"):
    frame = struct.pack(">ii", 4 + len(payload), request.header.correlationId) + payload
    connection.sendResponse(Response(request, [frame]))


class RespondsLater:
    """
    Mixin for fake request contexts: C{respondLater()} as the network layer
    gives it, with completions run at once in the completing thread (there
    is no Processor in a unit test).  Run the handler with L{handleLikeThePool}.
    """

    pending = None

    def respondLater(self):
        assert self.pending is None, "respondLater called twice"
        self.pending = PendingResponse(lambda f, *args: f(*args), lambda: True, self)
        return self.pending


def handleLikeThePool(handler, context, request):
    """
    C{handler.handle(context, request)}, then what the handler pool does
    with a pending response once C{handle()} returned.
    """
    result = handler.handle(context, request)
    pending = getattr(context, "pending", None)
    if pending is not None:
        if isinstance(result, Deferred):
            pending.handedOver()
        else:
            pending.abandon()
    return result


class OneHandlerBroker:
    """
    The part of an L{IBroker} the handler pool uses, serving one handler.
    """

    def __init__(self, handler):
        self.handler = handler

    def handlerFor(self, apiKey):
        return self.handler

    def supportedVersions(self):
        return {self.handler.apiKey: (self.handler.minVersion, self.handler.maxVersion)}
