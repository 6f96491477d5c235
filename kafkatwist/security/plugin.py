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

from twisted.logger import Logger
from twisted.plugin import IPlugin
from zope.interface import implementer
from zope.interface.verify import verifyObject

from kafkatwist.interfaces import IAuthorizer, IAuthorizerPlugin

__all__ = ["AuthorizerPlugin", "loadAuthorizer"]

log = Logger()


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


def loadAuthorizer(broker, name: str | None, pluginPaths=(), failurePolicy: str = "fail"):
    """
    @return: the L{IAuthorizer} C{name} selects, or C{None} for no name.
    @raise kafkatwist.config.ConfigError: no plugin, or two, by that name.
    """
    from kafkatwist.config import ConfigError
    from kafkatwist.server.registry import discoverPlugins

    if not name:
        return None
    plugins = discoverPlugins(pluginPaths, failurePolicy, interface=IAuthorizerPlugin)
    chosen = [(plugin, origin) for plugin, origin in plugins if plugin.name == name]
    if not chosen:
        known = ", ".join(sorted(plugin.name for plugin, _ in plugins)) or "none"
        raise ConfigError("authorizer.class.name", f"no authorizer plugin is named {name} (found: {known})")
    if len(chosen) > 1:
        where = " and ".join(f"{plugin!r} ({origin})" for plugin, origin in chosen)
        raise ConfigError("authorizer.class.name", f"{name} is provided twice: {where}")
    [(plugin, origin)] = chosen
    authorizer = plugin.makeAuthorizer(broker)
    verifyObject(IAuthorizer, authorizer)
    log.info("Authorizer: {name} ({origin})", name=name, origin=origin)
    return authorizer
