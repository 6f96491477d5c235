"""
A browser-like HTTP client for the console's forms: keeps the session
cookie, reads the CSRF token from a page, posts forms, follows redirects.
"""

from __future__ import annotations

import http.cookiejar
import html
import re
import urllib.error
import urllib.parse
import urllib.request


class FormClient:
    def __init__(self, base: str) -> None:
        self.base = base
        self.jar = http.cookiejar.CookieJar()
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.jar))

    def get(self, path: str) -> tuple[int, str]:
        try:
            with self.opener.open(self.base + path, timeout=30) as response:
                return response.status, response.read().decode("utf-8")
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode("utf-8", "replace")

    def csrf(self, path: str) -> str:
        status, body = self.get(path)
        assert status == 200, (status, body[:500])
        return html.unescape(re.search(r'name="csrf" value="([^"]+)"', body).group(1))

    def post(self, path: str, fields: dict, csrf: str | None = None, origin: str | None = None,
             page: str | None = None) -> tuple[int, str, str]:
        """
        @return: (status, body, the URL it ended on).
        """
        if csrf is None:
            csrf = self.csrf(page or path)
        data = urllib.parse.urlencode({"csrf": csrf, **fields}).encode()
        request = urllib.request.Request(self.base + path, data=data, method="POST")
        request.add_header("Origin", origin or self.base)
        try:
            with self.opener.open(request, timeout=60) as response:
                return response.status, response.read().decode("utf-8"), response.url
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode("utf-8", "replace"), self.base + path


def flash(body: str) -> str | None:
    found = re.search(r'<div class="flash (\w+)" id="flash" role="status">(.*?)</div>', body, re.S)
    return f"{found.group(1)}: {html.unescape(found.group(2))}" if found else None
