"""
Plugin discovery and the priority rule.
"""

import pytest
from zope.interface.verify import verifyObject

from kafkatwist.handler import Handler, HandlerPlugin
from kafkatwist.interfaces import IRequestHandler, IRequestHandlerPlugin
from kafkatwist.registry import HandlerRegistry, PluginConflict, discoverPlugins


class Echo(Handler):
    apiKey = 1000
    minVersion = 0
    maxVersion = 2

    def handle(self, context, request):
        return ("echo", request, self.wrapped)


def test_builtins_are_discovered_and_provide_the_interfaces():
    plugins = discoverPlugins()
    names = {p.name for p, origin in plugins if origin == "builtin"}
    assert {"builtin.api_versions", "builtin.metadata", "builtin.produce", "builtin.fetch"} <= names
    for plugin, _ in plugins:
        verifyObject(IRequestHandlerPlugin, plugin)


def test_highest_priority_serves_and_wraps_the_next():
    low = HandlerPlugin("low", 1000, Echo, priority=0)
    high = HandlerPlugin("high", 1000, Echo, priority=10)
    registry = HandlerRegistry([(high, "a"), (low, "b")])
    registry.build(broker=None)
    handler = registry.handlerFor(1000)
    verifyObject(IRequestHandler, handler)
    assert handler.handle(None, "x")[2] is not None
    assert handler.wrapped.wrapped is None
    assert registry.supportedVersions() == {1000: (0, 2)}
    assert "high [a, priority 10] -> low [b, priority 0]" in registry.describe()[0]


def test_equal_priorities_refuse_to_start():
    a = HandlerPlugin("a", 1000, Echo, priority=5)
    b = HandlerPlugin("b", 1000, Echo, priority=5)
    with pytest.raises(PluginConflict, match="a .*and b .*both have priority 5"):
        HandlerRegistry([(a, "x"), (b, "y")])


def test_dropin_directory(tmp_path):
    (tmp_path / "mine.py").write_text(
        "from kafkatwist.handler import HandlerPlugin\n"
        "from tests.unit.test_registry import Echo\n"
        "mine = HandlerPlugin('dropin.echo', 1000, Echo)\n"
    )
    plugins = discoverPlugins([str(tmp_path)])
    assert ("dropin.echo", "plugin.paths") in {(p.name, o) for p, o in plugins}


def test_missing_plugin_directory_is_a_config_error(tmp_path):
    from kafkatwist.config import ConfigError

    with pytest.raises(ConfigError, match="plugin.paths"):
        discoverPlugins([str(tmp_path / "nope")])
