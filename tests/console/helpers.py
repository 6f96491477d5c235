"""
What the console tests share: a JSON API call, the console's port.
"""

import json
import urllib.request


def get(broker, path):
    with urllib.request.urlopen(broker.http + path, timeout=20) as response:
        assert response.headers["content-type"] == "application/json; charset=utf-8"
        return json.loads(response.read())


def consolePort(broker) -> int:
    """
    The port of the broker's HTTP listener (the console), from its log.
    """
    import re

    return int(re.search(r"metrics on http://[^:]+:(\d+)/metrics", broker.output()).group(1))
