"""
What the console tests share: a JSON API call.
"""

import json
import urllib.request


def get(broker, path):
    with urllib.request.urlopen(broker.http + path, timeout=20) as response:
        assert response.headers["content-type"] == "application/json; charset=utf-8"
        return json.loads(response.read())
