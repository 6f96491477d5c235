"""
The plugin example of docs/plugins.md loads and wraps the built-in Produce as
the text says.
"""

import os
import re

from kafkatwist.server.registry import HandlerRegistry, discoverPlugins

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NAME = "# my_plugins/logging_produce.py"


def example(path):
    with open(os.path.join(ROOT, path)) as f:
        blocks = re.findall(r"```python\n(.*?)```", f.read(), re.S)
    [block] = [b for b in blocks if b.startswith(NAME)]
    return block


def test_the_example_loads_and_wraps_produce(tmp_path):
    directory = tmp_path / "my_plugins"
    directory.mkdir()
    (directory / "logging_produce.py").write_text(example("docs/plugins.md"))
    plugins = discoverPlugins([str(directory)])
    assert ("mine.logging_produce", "plugin.paths") in {(p.name, o) for p, o in plugins}
    registry = HandlerRegistry(plugins)
    assert [p.name for p, _ in registry.chains[0]][-2:] == ["builtin.produce", "mine.logging_produce"]
