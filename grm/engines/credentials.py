"""Credentials bound to an origin, and what an error message may show of a server's text.

A key is sent only to the origin (scheme, host, port) it was configured for (``grm.engines.http``
asks ``header_for`` on every hop). A message shows URLs without ``user:password@``, untrusted text
as one bounded line of printable characters, and every spelling of a credential a server may echo
(raw, percent-, JSON-, HTML-encoded, repr) as ``[redacted]``; redaction runs on the whole text
before it is cut, so no part of a key survives the cut.
"""

from __future__ import annotations

import base64
import html
import json
import re
from collections.abc import Callable
from typing import Any
from urllib.parse import quote, quote_plus, unquote, urlsplit

from pydantic import ValidationError

from grm.engines.base import EngineError

SHOWN_CHARS = 300
"""Characters of server text a message shows."""

REDACTED = "[redacted]"

Origin = tuple[str, str, int]
_PORTS = {"http": 80, "https": 443}
# scheme://user:password@ -> scheme:// ; greedy to the last @ of the authority (a password may hold @)
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s?#]*@")


def public_url(url: str) -> str:
    """``url`` without ``user:password@``, for messages."""
    return _USERINFO.sub(r"\1", url)


def origin(url: str) -> Origin:
    """(scheme, host, port) of an http(s) URL; EngineError for anything else."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as e:
        raise EngineError(f"{plain(public_url(url))}: not a valid URL ({e})") from None
    scheme = parts.scheme.lower()
    if scheme not in _PORTS or not parts.hostname:
        raise EngineError(f"{plain(public_url(url))}: not an http:// or https:// URL with a host")
    return scheme, parts.hostname, port or _PORTS[scheme]


def plain(text: str, limit: int = SHOWN_CHARS) -> str:
    """Untrusted text for a one-line message: whitespace runs as one space, other unprintable
    characters (terminal escapes, bidi overrides) escaped, at most ``limit`` characters kept."""
    text = " ".join(text.split())
    text = "".join(c if c.isprintable() else c.encode("unicode_escape").decode() for c in text)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} chars)"


def glimpse(x: Any, redact: Callable[[str], str]) -> str:
    """A short description of a JSON value for a message: scalars shown, containers counted."""
    if isinstance(x, str):  # redacted whole before it is cut, so no part of a key survives the cut
        return plain(redact(json.dumps(x, ensure_ascii=False)), 80)
    if x is None or isinstance(x, (bool, int, float)):
        return plain(repr(x), 80)
    if isinstance(x, dict):
        return f"an object with {len(x)} field(s)"
    if isinstance(x, (list, tuple)):
        return f"a list of {len(x)}"
    return type(x).__name__


def shape_error(e: ValidationError, redact: Callable[[str], str]) -> str:
    """The first problem pydantic found in a reply: where, what, and what came instead."""
    err = e.errors(include_url=False)[0]
    where = ".".join(str(p) for p in err["loc"]) or "the reply"
    more = f" (and {e.error_count() - 1} more)" if e.error_count() > 1 else ""
    return f"{where}: {err['msg']}, got {glimpse(err.get('input'), redact)}{more}"


def _spellings(secret: str) -> set[str]:
    """The ways a server or a message may spell ``secret``."""
    js = json.dumps(secret)[1:-1]
    forms = {
        secret,
        quote(secret, safe=""),
        quote(secret),
        quote_plus(secret),
        js,
        js.replace("/", "\\/"),
        json.dumps(secret, ensure_ascii=False)[1:-1],
        repr(secret)[1:-1],
        html.escape(secret),
        html.escape(secret, quote=False),
    }
    return {f for f in forms if f}


class Credentials:
    """``Authorization`` values by origin, and the secrets kept out of every message. Its repr
    names origins only."""

    def __init__(self) -> None:
        self._by_origin: dict[Origin, str] = {}
        self._forms: set[str] = set()
        self._pattern: re.Pattern[str] | None = None

    def bind(self, url: str, api_key: str | None = None) -> str:
        """Bind ``api_key`` (as ``Bearer``) or the URL's ``user:password@`` (as HTTP Basic) to
        the URL's origin; returns the URL without its userinfo."""
        shown = public_url(url)
        o = origin(url)
        parts = urlsplit(url)
        user, password = unquote(parts.username or ""), unquote(parts.password or "")
        if api_key is not None:
            api_key = api_key.strip()
            if user or password:
                raise EngineError(f"{shown}: the URL carries user:password and an API key is given too; give one of them")
            if not api_key:
                raise EngineError(f"{shown}: the API key is empty")
            if not (api_key.isascii() and api_key.isprintable()):  # an HTTP header carries neither
                raise EngineError(f"{shown}: the API key holds characters an HTTP header cannot carry")
            value, secrets = f"Bearer {api_key}", [api_key]
        elif user or password:
            token = base64.b64encode(f"{user}:{password}".encode()).decode()
            # the user name is a secret only when it stands alone (a token passed as http://TOKEN@host)
            value, secrets = f"Basic {token}", [token, f"{user}:{password}", password or user]
        else:
            return shown
        if self._by_origin.get(o, value) != value:
            raise EngineError(f"{shown}: two different credentials for one server")
        self._by_origin[o] = value
        for s in secrets:
            self._forms |= _spellings(s) if s else set()
        alternatives = sorted(self._forms, key=len, reverse=True)  # longest first: no partial match left behind
        self._pattern = re.compile("|".join(map(re.escape, alternatives)), re.IGNORECASE)
        return shown

    def header_for(self, url: str) -> str | None:
        return self._by_origin.get(origin(url))

    def redact(self, text: str) -> str:
        if self._pattern is not None:
            text = self._pattern.sub(REDACTED, text)
        return public_url(text)

    def redact_secrets(self, text: str) -> str:
        """``text`` with every spelling of a bound secret as ``[redacted]`` and nothing else changed
        (``redact`` also strips ``user@`` from URLs: right for a message, wrong for a model's text)."""
        return self._pattern.sub(REDACTED, text) if self._pattern is not None else text

    def redact_cut(self, text: str) -> str:
        """``redact`` for text cut from a longer whole (a reply body's first bytes): a secret the
        cut split is gone from ``redact``'s view, so an end of ``text`` that begins any spelling
        of one is redacted too. A server that pads its echo of the key to the cut (with whitespace
        a one-line message then collapses) would otherwise choose how much of the key is shown."""
        text = self.redact(text)
        lowered = text.lower()
        cut = max(
            (k for f in (form.lower() for form in self._forms) for k in range(len(f) - 1, 3, -1) if lowered.endswith(f[:k])),
            default=0,
        )  # the longest end (4 characters or more) that begins any spelling
        return text[:-cut] + REDACTED if cut else text

    def __repr__(self) -> str:
        return f"Credentials({sorted(f'{s}://{h}:{p}' for s, h, p in self._by_origin)})"
