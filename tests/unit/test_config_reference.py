"""
docs/configuration.md is generated from config.KEYS and TOPIC_KEYS: the
committed page must be what the generator writes now.
"""

from kafkatwist.config import KEYS, TOPIC_KEYS
from kafkatwist.tools.configreference import PAGE, render


def test_the_committed_reference_is_current():
    with open(PAGE, encoding="utf-8") as f:
        committed = f.read()
    assert committed == render(), (
        "docs/configuration.md is out of date: run "
        "`.venv/bin/python -m kafkatwist.tools.configreference --write`"
    )


def test_every_key_is_in_it():
    text = render()
    for name in [*KEYS, *TOPIC_KEYS]:
        assert f"| `{name}` |" in text, name
