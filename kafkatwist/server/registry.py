"""
Finding request handler plugins and deciding which one serves each ApiKey.

Sources:
  1. the built-ins, in the C{kafkatwist.plugins} package;
  2. C{twisted/plugins/} modules of installed packages;
  (both through C{twisted.plugin.getPlugins})
  3. every directory on C{plugin.paths}: each module is imported as
     C{kafkatwist.dropins.<name>} here, so that one that fails to import
     stops start-up (C{plugin.load.failure.policy=fail}) instead of the
     broker starting without it, as C{getPlugins} would.

Rule for several providers of one ApiKey (never import order): the highest
C{priority} serves, and is given the next one down to wrap; equal
priorities for one ApiKey refuse to start.
"""

from __future__ import annotations

import importlib
import keyword
import os
import sys
import traceback
from collections import defaultdict

from twisted.logger import Logger
from twisted.plugin import IPlugin, getPlugins
from zope.interface.verify import verifyObject

from kafkatwist.interfaces import IRequestHandler, IRequestHandlerPlugin
from kafkatwist.protocol.apis import apiName
from kafkatwist.util.startup import StartupError
import kafkatwist.dropins
import kafkatwist.plugins
from kafkatwist.config import ConfigError

log = Logger()


class PluginConflict(ValueError):
    """
    Two providers for one ApiKey with the same priority.
    """


#: C{plugin.load.failure.policy} values
FAIL, SKIP = "fail", "skip"


class PluginLoadError(StartupError):
    """
    A module on C{plugin.paths} could not be imported, and the policy is
    C{fail}: an audit or validation plugin that is missing must not leave
    the broker serving without it.
    """


def discoverPlugins(
    pluginPaths: list[str] = (), failurePolicy: str = FAIL, interface=IRequestHandlerPlugin
) -> list[tuple[object, str]]:
    """
    @param failurePolicy: what a drop-in module that fails to import does:
        C{fail} stops start-up (L{PluginLoadError}), C{skip} logs one line
        and starts without it.
    @param interface: what to look for: request handler plugins, or
        another kind (L{kafkatwist.interfaces.IAuthorizerPlugin}).
    @return: (plugin, where it came from) for every provider found.
    """

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
            raise ConfigError("plugin.paths", f"not a directory: {', '.join(missing)}")
        kafkatwist.dropins.setPaths(pluginPaths)
        for module in _importDropins(pluginPaths, failurePolicy):
            collect(_pluginsIn(module, interface), "plugin.paths")
    return found


def _dropinCandidates(pluginPaths) -> list[tuple[str, str]]:
    """
    (module name, path) of each module on C{plugin.paths} in import order;
    files that cannot be modules, and modules hidden by a same-named one in
    an earlier directory, get a warning.
    """
    chosen: dict[str, str] = {}
    for directory in pluginPaths:
        for entry in sorted(os.listdir(directory)):
            path = os.path.join(directory, entry)
            if entry.endswith(".py"):
                name = entry[:-3]
            elif os.path.isfile(os.path.join(path, "__init__.py")):
                name = entry
            else:
                continue
            if not name.isidentifier() or keyword.iskeyword(name):
                log.warn(
                    "plugin.paths: {path} is not loaded: {name!r} is not a Python module name "
                    "(use letters, digits and underscores)",
                    path=path, name=name,
                )
            elif name in chosen:
                log.warn("plugin.paths: {path} is not loaded: {other} has the same module name",
                         path=path, other=chosen[name])
            else:
                chosen[name] = path
    return list(chosen.items())


def _importDropins(pluginPaths, failurePolicy: str):
    for name, path in _dropinCandidates(pluginPaths):
        qualified = f"kafkatwist.dropins.{name}"
        loaded = sys.modules.get(qualified)
        if loaded is not None and not _samePath(getattr(loaded, "__file__", None), path):
            # An earlier scan of other directories (tests) left a namesake.
            del sys.modules[qualified]
        try:
            yield importlib.import_module(qualified)
        except Exception as e:
            why = _describeImportFailure(e, path)
            if failurePolicy == SKIP:
                log.warn("plugin.paths: {why}; skipped (plugin.load.failure.policy=skip)", why=why)
                continue
            raise PluginLoadError(f"{why} (plugin.load.failure.policy=skip starts without it)") from e


def _samePath(moduleFile, path: str) -> bool:
    if moduleFile is None:
        return False
    if os.path.basename(moduleFile) == "__init__.py":
        moduleFile = os.path.dirname(moduleFile)
    return os.path.realpath(moduleFile) == os.path.realpath(path)


def _describeImportFailure(error: Exception, path: str) -> str:
    """
    One line: the file (and line, where the error is in the plugin itself)
    and the exception.
    """
    where = path
    if isinstance(error, SyntaxError) and error.lineno:
        where = f"{error.filename or path}:{error.lineno}"
        what = f"SyntaxError: {error.msg}"
    else:
        root = os.path.realpath(path)
        for frame, lineno in traceback.walk_tb(error.__traceback__):
            filename = os.path.realpath(frame.f_code.co_filename)
            if filename == root or filename.startswith(root + os.sep):
                where = f"{frame.f_code.co_filename}:{lineno}"
        what = f"{type(error).__name__}: {error}"
    return f"plugin {where} failed to load: {what}"


def _pluginsIn(module, interface):
    """
    What C{twisted.plugin.getPlugins} would find in C{module}: its
    module-level L{IPlugin} providers of C{interface}.
    """
    for value in list(vars(module).values()):
        if IPlugin.providedBy(value):
            adapted = interface(value, None)
            if adapted is not None:
                yield adapted


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

    def summary(self) -> str:
        """
        One line for the start-up log: how many ApiKeys are served, and
        which have a provider that is not built in.
        """
        touched = self.pluggedKeys()
        line = f"{len(self.chains)} ApiKeys served"
        if not touched:
            return line + ", all by built-in handlers (each chain at logger.level=debug)"
        names = ", ".join(f"{key} {apiName(key)}" for key in touched)
        return line + f"; plugins serve {len(touched)} of them: {names} (every chain at logger.level=debug)"

    def pluggedKeys(self) -> list[int]:
        """
        @return: the ApiKeys whose chain has a provider that is not built in.
        """
        return [
            key for key in sorted(self.chains)
            if any(origin != "builtin" for _, origin in self.chains[key])
        ]

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
