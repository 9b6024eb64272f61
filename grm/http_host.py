"""Which ``Host`` headers a local HTTP server answers, against DNS rebinding: a web page can make the
browser send requests to 127.0.0.1 through a name it points there, and the browser then sends that
name as ``Host``. ``grm view`` and the policy's agent endpoint both refuse such requests with 403."""

from __future__ import annotations

import ipaddress
import re

WILDCARDS = ("", "0.0.0.0", "::")
"""Bind addresses that mean every interface."""
LOCAL_HOSTS = ("localhost", "127.0.0.1", "[::1]")
_HOST = re.compile(r"(?:\[(?P<v6>[0-9A-Fa-f:.]{2,45})\]|(?P<name>[A-Za-z0-9.-]{1,253}))(?::[0-9]{1,5})?")


class HostCheck:
    """Which ``Host`` headers a server bound to ``bound`` answers: that address, localhost, 127.0.0.1
    and [::1], each with a port or none; bound to every interface (0.0.0.0), also any IP address (no
    rebinding without a name)."""

    def __init__(self, bound: str) -> None:
        self.open = bound in WILDCARDS
        b = bound.lower()
        self.names = {*LOCAL_HOSTS, f"[{b}]" if ":" in b else b}

    def allows(self, header: str | None) -> bool:
        m = _HOST.fullmatch((header or "").strip(" \t"))
        if not m:
            return False
        host = f"[{m['v6'].lower()}]" if m["v6"] else m["name"].lower()
        if host in self.names:
            return True
        if not self.open:
            return False
        try:
            ipaddress.ip_address(m["v6"] or m["name"])
        except ValueError:
            return False
        return True
