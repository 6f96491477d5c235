"""
Plugin discovery and the priority rule.
"""

import pytest
from zope.interface.verify import verifyObject

from kafkatwist.plugins.handler import Handler, HandlerPlugin
from kafkatwist.interfaces import IRequestHandler, IRequestHandlerPlugin
from kafkatwist.server.registry import HandlerRegistry, PluginConflict, discoverPlugins


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
        "from kafkatwist.plugins.handler import HandlerPlugin\n"
        "from tests.unit.test_registry import Echo\n"
        "mine = HandlerPlugin('dropin.echo', 1000, Echo)\n"
    )
    plugins = discoverPlugins([str(tmp_path)])
    assert ("dropin.echo", "plugin.paths") in {(p.name, o) for p, o in plugins}


def test_missing_plugin_directory_is_a_config_error(tmp_path):
    from kafkatwist.config import ConfigError

    with pytest.raises(ConfigError, match="plugin.paths"):
        discoverPlugins([str(tmp_path / "nope")])


def _events():
    from twisted.logger import globalLogPublisher

    seen = []
    globalLogPublisher.addObserver(seen.append)
    return seen, lambda: globalLogPublisher.removeObserver(seen.append)


def _text(events):
    from twisted.logger import formatEvent

    return [formatEvent(e) for e in events]


def test_dropin_that_fails_to_import_refuses_to_start(tmp_path):
    from kafkatwist.server.registry import PluginLoadError

    (tmp_path / "audit_gate.py").write_text("import json\n\nraise RuntimeError('no audit sink')\n")
    with pytest.raises(PluginLoadError) as refused:
        discoverPlugins([str(tmp_path)])
    assert str(refused.value) == (
        f"plugin {tmp_path / 'audit_gate.py'}:3 failed to load: RuntimeError: no audit sink "
        "(plugin.load.failure.policy=skip starts without it)"
    )


def test_syntax_error_names_file_and_line(tmp_path):
    from kafkatwist.server.registry import PluginLoadError

    (tmp_path / "typo.py").write_text("x = 1\ndef f(:\n")
    with pytest.raises(PluginLoadError, match=r"typo.py:2 failed to load: SyntaxError"):
        discoverPlugins([str(tmp_path)])


def test_skip_policy_logs_one_line_and_loads_the_rest(tmp_path):
    (tmp_path / "broken.py").write_text("import no_such_module_here\n")
    (tmp_path / "mine.py").write_text(
        "from kafkatwist.plugins.handler import HandlerPlugin\n"
        "from tests.unit.test_registry import Echo\n"
        "mine = HandlerPlugin('dropin.echo.skip', 1000, Echo)\n"
    )
    seen, stop = _events()
    try:
        plugins = discoverPlugins([str(tmp_path)], "skip")
    finally:
        stop()
    assert "dropin.echo.skip" in {p.name for p, _ in plugins}
    lines = [l for l in _text(seen) if "broken.py" in l]
    assert lines == [
        f"plugin.paths: plugin {tmp_path / 'broken.py'}:1 failed to load: ModuleNotFoundError: "
        "No module named 'no_such_module_here'; skipped (plugin.load.failure.policy=skip)"
    ]


def test_files_that_cannot_be_plugins_are_named(tmp_path):
    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir()
    second.mkdir()
    (first / "my-plugin.py").write_text("")
    (first / "class.py").write_text("")
    (first / "notes.txt").write_text("")
    (first / "dup.py").write_text("")
    (second / "dup.py").write_text("")
    seen, stop = _events()
    try:
        discoverPlugins([str(first), str(second)])
    finally:
        stop()
    warnings = [l for l in _text(seen) if l.startswith("plugin.paths:")]
    assert sorted(warnings) == sorted([
        f"plugin.paths: {first / 'my-plugin.py'} is not loaded: 'my-plugin' is not a Python module "
        "name (use letters, digits and underscores)",
        f"plugin.paths: {first / 'class.py'} is not loaded: 'class' is not a Python module "
        "name (use letters, digits and underscores)",
        f"plugin.paths: {second / 'dup.py'} is not loaded: {first / 'dup.py'} has the same module name",
    ])


def test_dropin_directory_gets_no_cache_file(tmp_path):
    (tmp_path / "quiet.py").write_text("")
    discoverPlugins([str(tmp_path)])
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "__pycache__") == ["quiet.py"]


def test_start_up_summary_is_one_line_naming_what_plugins_serve():
    builtins = discoverPlugins()
    registry = HandlerRegistry(builtins)
    summary = registry.summary()
    assert summary.startswith(f"{len(registry.chains)} ApiKeys served, all by built-in handlers")
    assert registry.pluggedKeys() == []
    mine = HandlerPlugin("mine", 1000, Echo, priority=0)
    registry = HandlerRegistry([*builtins, (mine, "plugin.paths")])
    assert registry.pluggedKeys() == [1000]
    assert "plugins serve 1 of them: 1000 " in registry.summary()
