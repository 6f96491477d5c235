"""
docs/protocol-versions.md's table of served versions is the broker's: its kafkatwist
column matches what the built-in handlers serve (what ApiVersions
advertises), its Kafka 4.1 column what kio defines.  On failure, the
message shows the rows as they should read.
"""

from __future__ import annotations

import os
import re

from kio.schema.index import api_key_map, schema_name_map

from kafkatwist.server.registry import HandlerRegistry, discoverPlugins

README = os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "docs", "protocol-versions.md"
)
ROW = re.compile(r"^\| (\d+) \| (\w+) \| ([\d–-]+) \| ([\d–-]+) \| ([\d–-]+) \|$")


def tableRows() -> dict[int, tuple[str, str, str, str]]:
    rows = {}
    with open(README, encoding="utf-8") as f:
        for line in f:
            m = ROW.match(line.strip())
            if m:
                rows[int(m.group(1))] = m.groups()[1:]
    return rows


def served() -> dict[int, str]:
    registry = HandlerRegistry(discoverPlugins())
    out = {}
    for key, chain in registry.chains.items():
        factory = chain[0][0].factory
        out[key] = f"{factory.minVersion}-{factory.maxVersion}"
    return out


def kioRange(key: int) -> str:
    versions = sorted(schema_name_map.get(dict(api_key_map).get(key), {}))
    return f"{versions[0]}-{versions[-1]}" if versions else "–"


def test_readme_table_matches_the_broker():
    rows = tableRows()
    assert len(rows) > 50
    ours = served()
    expected = {}
    for key, (name, kafka39, _, _) in rows.items():
        expected[key] = (name, kafka39, kioRange(key), ours.get(key, "–"))
    missing = set(ours) - set(rows)
    shown = "\n".join(f"| {k} | {' | '.join(v)} |" for k, v in sorted(expected.items()))
    assert not missing, f"ApiKeys served but not in the docs/protocol-versions.md table: {sorted(missing)}"
    assert rows == expected, "docs/protocol-versions.md's table should read:\n" + shown
