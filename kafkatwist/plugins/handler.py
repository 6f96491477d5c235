"""
Helpers for writing request handler plugins.

A plugin module (built in, under C{kafkatwist/plugins/}, or dropped into a
directory on C{plugin.paths}) holds module-level L{HandlerPlugin} objects;
C{twisted.plugin.getPlugins} finds them::

    from kafkatwist.plugins.handler import Handler, HandlerPlugin

    class Echo(Handler):
        apiKey, minVersion, maxVersion = 1000, 0, 0
        def handle(self, context, request): ...

    echo = HandlerPlugin("example.echo", 1000, Echo)
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from twisted.plugin import IPlugin
from zope.interface import implementer

from kafkatwist.interfaces import CloseConnection, IRequestHandler, IRequestHandlerPlugin, frameAnswerer
from kafkatwist.security.checks import authorize

__all__ = [
    "DEFAULT_DROPIN_PRIORITY", "CloseConnection", "Handler", "HandlerPlugin", "answerByDeadline", "frameAnswerer",
]

#: priority of drop-ins that do not say: above the built-ins (0)
DEFAULT_DROPIN_PRIORITY = 100



@implementer(IRequestHandler)
class Handler:
    """
    Base class: keeps the broker and the handler it wraps, if any.
    """

    apiKey: int
    minVersion: int
    maxVersion: int

    def __init__(self, broker, wrapped=None) -> None:
        self.broker = broker
        self.wrapped = wrapped

    @property
    def authorizer(self):
        """
        The broker's L{kafkatwist.interfaces.IAuthorizer}, or C{None} when
        none is configured (everything allowed).
        """
        return self.broker.authorizer

    def allowed(self, context, operation, resourceType, resourceName: str, logIfDenied: bool = True) -> bool:
        """
        Whether the request's principal may do C{operation} on the resource
        (always, without an authorizer).  See L{kafkatwist.security.acl}.
        """
        authorizer = self.authorizer
        return authorizer is None or authorize(
            authorizer, context, operation, resourceType, resourceName, logIfDenied
        )

    def handle(self, context, request):
        raise NotImplementedError


@implementer(IPlugin, IRequestHandlerPlugin)
class HandlerPlugin:
    """
    Discoverable factory of one ApiKey's handler.

    @param factory: called as C{factory(broker, wrapped)}.
    """

    def __init__(self, name: str, apiKey: int, factory, priority: int = DEFAULT_DROPIN_PRIORITY):
        self.name = name
        self.apiKey = apiKey
        self.factory = factory
        self.priority = priority

    def makeHandler(self, broker, wrapped):
        return self.factory(broker, wrapped)

    def __repr__(self) -> str:
        return f"<HandlerPlugin {self.name} key={self.apiKey} priority={self.priority}>"


def answerByDeadline(context, seconds: float, timedOut: Callable[[], object]):
    """
    An answer that comes from another thread or at a deadline, whichever is
    first, without the handler thread waiting for either (a parked handler
    thread holds up every Produce and Fetch queued behind it).

    @param context: the request's context (C{respondLater}, C{clock}).
    @param seconds: how long the answer may take.
    @param timedOut: builds the answer given at the deadline.
    @return: C{(answer, deferred)}: C{answer(result)} may be called from
        any thread (calls after the deadline, or a second call, are
        ignored); return C{deferred} from C{handle()}.
    """
    pending = context.respondLater()
    lock = threading.Lock()
    state = {"done": False, "timer": None}

    def once(result, fromTimer: bool = False) -> None:
        with lock:
            if state["done"]:
                return
            state["done"] = True
            timer = state["timer"]
        if timer is not None and not fromTimer:
            timer.cancel()
        pending.complete(result)

    timer = context.clock.callLater(seconds, lambda: once(timedOut(), fromTimer=True))
    with lock:
        state["timer"] = timer
    return once, pending.deferred
