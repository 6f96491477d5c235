"""
Choosing the authorizer: C{authorizer.class.name} names an
L{IAuthorizerPlugin}, found like request handler plugins (built in,
installed C{twisted/plugins/}, C{plugin.paths}).  Kafka's
C{org.apache.kafka.metadata.authorizer.StandardAuthorizer} is the built-in
one; an empty value means no authorizer (everything allowed, as in Kafka).

A drop-in module holds one module-level L{AuthorizerPlugin}::

    from kafkatwist.security.plugin import AuthorizerPlugin

    class MyAuthorizer: ...   # provides IAuthorizer

    mine = AuthorizerPlugin("com.example.MyAuthorizer", lambda broker: MyAuthorizer(broker.config))
"""

from __future__ import annotations

from twisted.plugin import IPlugin
from zope.interface import implementer

from kafkatwist.interfaces import IAuthorizerPlugin

__all__ = ["AuthorizerPlugin"]


@implementer(IPlugin, IAuthorizerPlugin)
class AuthorizerPlugin:
    """
    @param name: the C{authorizer.class.name} value that selects it.
    @param factory: called as C{factory(broker)}; returns an L{IAuthorizer}.
    """

    def __init__(self, name: str, factory) -> None:
        self.name = name
        self.factory = factory

    def makeAuthorizer(self, broker):
        return self.factory(broker)

    def __repr__(self) -> str:
        return f"<AuthorizerPlugin {self.name}>"
