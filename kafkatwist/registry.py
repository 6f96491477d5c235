"""
Finding request handler plugins and deciding which one serves each ApiKey.

Sources, all through C{twisted.plugin.getPlugins}:
  1. the built-ins, in the C{kafkatwist.plugins} package;
  2. C{twisted/plugins/} modules of installed packages;
  3. every directory on C{plugin.paths}.

Rule for several providers of one ApiKey (never import order): the highest
C{priority} serves, and is given the next one down to wrap; equal
priorities for one ApiKey refuse to start.
"""

from __future__ import annotations

import os
from collections import defaultdict

from twisted.logger import Logger
from twisted.plugin import getPlugins
from zope.interface.verify import verifyObject

from kafkatwist.interfaces import IRequestHandler, IRequestHandlerPlugin
from kafkatwist.protocol.apis import apiName

log = Logger()


class PluginConflict(ValueError):
    """
    Two providers for one ApiKey with the same priority.
    """


def discoverPlugins(pluginPaths: list[str] = (), interface=IRequestHandlerPlugin) -> list[tuple[object, str]]:
    """
    @param interface: what to look for: request handler plugins, or
        another kind (L{kafkatwist.interfaces.IAuthorizerPlugin}).
    @return: (plugin, where it came from) for every provider found.
    """
    import kafkatwist.plugins

    found: list[tuple[object, str]] = []
    seen: set[int] = set()

    def collect(plugins, origin: str) -> None:
        for plugin in plugins:
            if id(plugin) not in seen:
                seen.add(id(plugin))
                found.append((plugin, origin))

    collect(getPlugins(interface, kafkatwist.plugins), "builtin")
    collect(getPlugins(interface), "installed")
    if pluginPaths:
        missing = [p for p in pluginPaths if not os.path.isdir(p)]
        if missing:
            from kafkatwist.config import ConfigError

            raise ConfigError("plugin.paths", f"not a directory: {', '.join(missing)}")
        import kafkatwist.dropins

        kafkatwist.dropins.setPaths(pluginPaths)
        collect(getPlugins(interface, kafkatwist.dropins), "plugin.paths")
    return found


class HandlerRegistry:
    """
    The route table: ApiKey -> the handler serving it.
    """

    def __init__(self, plugins: list[tuple[object, str]]) -> None:
        byKey: dict[int, list[tuple[object, str]]] = defaultdict(list)
        for plugin, origin in plugins:
            verifyObject(IRequestHandlerPlugin, plugin)
            byKey[plugin.apiKey].append((plugin, origin))
        self.chains: dict[int, list[tuple[object, str]]] = {}
        for key, providers in byKey.items():
            providers.sort(key=lambda p: p[0].priority)
            for (a, oa), (b, ob) in zip(providers, providers[1:]):
                if a.priority == b.priority:
                    raise PluginConflict(
                        f"ApiKey {key} ({apiName(key)}): {a.name} ({oa}) and {b.name} ({ob}) "
                        f"both have priority {a.priority}; give one a different priority"
                    )
            self.chains[key] = providers
        self.handlers: dict[int, object] = {}

    def build(self, broker) -> None:
        """
        Build every chain, lowest priority first, each wrapping the last.
        """
        for key, providers in self.chains.items():
            wrapped = None
            for plugin, origin in providers:
                handler = plugin.makeHandler(broker, wrapped)
                verifyObject(IRequestHandler, handler)
                if handler.apiKey != key:
                    raise PluginConflict(
                        f"{plugin.name} registered for ApiKey {key} built a handler for {handler.apiKey}"
                    )
                wrapped = handler
            self.handlers[key] = wrapped

    def handlerFor(self, apiKey: int):
        return self.handlers.get(apiKey)

    def supportedVersions(self) -> dict[int, tuple[int, int]]:
        return {key: (h.minVersion, h.maxVersion) for key, h in self.handlers.items()}

    def describe(self) -> list[str]:
        """
        One line per ApiKey: versions, and the provider chain, serving first.
        """
        lines = []
        for key in sorted(self.handlers):
            handler = self.handlers[key]
            chain = " -> ".join(
                f"{plugin.name} [{origin}, priority {plugin.priority}]"
                for plugin, origin in reversed(self.chains[key])
            )
            lines.append(
                f"{key:>3} {apiName(key):<28} v{handler.minVersion}-{handler.maxVersion}  {chain}"
            )
        return lines
