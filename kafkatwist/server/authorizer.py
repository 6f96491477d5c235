"""
Choosing the authorizer at start-up: C{authorizer.class.name} names an
L{IAuthorizerPlugin<kafkatwist.interfaces.IAuthorizerPlugin>}
(L{kafkatwist.security.plugin.AuthorizerPlugin}), found like request
handler plugins (built in, installed C{twisted/plugins/}, C{plugin.paths}).
"""

from __future__ import annotations

from twisted.logger import Logger
from zope.interface.verify import verifyObject

from kafkatwist.config import ConfigError
from kafkatwist.interfaces import IAuthorizer, IAuthorizerPlugin
from kafkatwist.server.registry import discoverPlugins

__all__ = ["loadAuthorizer"]

log = Logger()


def loadAuthorizer(broker, name: str | None, pluginPaths=(), failurePolicy: str = "fail"):
    """
    @return: the L{IAuthorizer} C{name} selects, or C{None} for no name.
    @raise kafkatwist.config.ConfigError: no plugin, or two, by that name.
    """
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
