"""
The package list in setup.cfg names every package in the tree.
"""

import configparser
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_every_package_is_listed():
    config = configparser.ConfigParser()
    config.read(os.path.join(ROOT, "setup.cfg"))
    listed = set(config["options"]["packages"].split())
    found = set()
    for base, prefix in (("kafkatwist", "kafkatwist"), ("spark/kafkatwist_spark", "kafkatwist_spark")):
        for directory, _, files in os.walk(os.path.join(ROOT, base)):
            if "__init__.py" in files:
                relative = os.path.relpath(directory, os.path.join(ROOT, base))
                found.add(prefix if relative == "." else prefix + "." + relative.replace(os.sep, "."))
    assert found <= listed, f"add to setup.cfg: {sorted(found - listed)}"


def test_twisted_plugins_has_no_init():
    assert not os.path.exists(os.path.join(ROOT, "twisted", "plugins", "__init__.py"))
    assert not os.path.exists(os.path.join(ROOT, "twisted", "__init__.py"))
