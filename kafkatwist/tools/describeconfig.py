"""
C{describe-config}: the configuration a broker would run with, every key,
where its value comes from, in the layout of C{kafka-configs.sh --describe
--all}.  Also C{twistd kafkatwist --describe-config}.
"""

from __future__ import annotations

from kafkatwist.config import keySpec


def describeConfig(config, out) -> None:
    out.write(f"All configs for broker {config.nodeId} are:\n")
    for key, text, explicit in config.describe():
        spec = keySpec(key)
        sensitive = spec is not None and spec.sensitive
        shown = "null" if text is None else text
        source = "STATIC_BROKER_CONFIG" if explicit else "DEFAULT_CONFIG"
        synonyms = "" if text is None and not explicit else f"{source}:{key}={shown}"
        out.write(f"  {key}={shown} sensitive={'true' if sensitive else 'false'} synonyms={{{synonyms}}}\n")
