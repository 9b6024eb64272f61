"""Untrusted text on the console: shown, never obeyed.

Prompts, responses, critiques, data cells, judge and pipeline names, paths and error messages
quoting them all reach the console. Two mechanisms could turn such text into instructions:

- rich markup and emoji codes: ``[/]`` in a critique raised rich's ``MarkupError`` in
  ``grm judge try``, ``[link=...]`` makes a hyperlink, ``:x:`` became an emoji in
  ``grm judge render``. Every rich console grm prints on comes from ``console()``: markup, emoji
  codes and highlighting are off for every string printed on it, even where a call asks for
  markup, so only grm's own code styles anything (with ``rich.text.Text``).
- terminal control characters: ESC starts sequences that recolour, move the cursor, clear the
  screen, retitle the window or set the clipboard (OSC 52); CR and backspace overwrite what was
  printed; bidirectional overrides reorder a line (Trojan Source, CVE-2021-42574). Rich drops CR,
  BS, BEL, VT and FF silently and passes ESC through. ``escape_controls`` shows each such
  character as its Python escape (``\\x1b``, ``\\r``, ``\\u202e``); newline and tab stay.

Where each rule applies:

- through rich (tables, panels, progress lines, status lines): control characters are always
  escaped, on a terminal or not; that output is a view of the text, not the text.
- ``grm judge render``'s prompts (``write_exact``): byte for byte into a pipe or a file (to diff or
  to replay), escaped on a terminal.
- ``error: ...`` lines on stderr: always escaped (a log is read on a terminal later); argument
  errors on one line, newlines escaped too.
- ``--json`` output needs nothing: JSON escapes control characters itself.

Lone surrogates (valid in JSON, not encodable as UTF-8) are escaped everywhere: written as they
are, they raise ``UnicodeEncodeError``.
"""

from __future__ import annotations

import functools
import re
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console
    from rich.text import Text

_CONTROLS = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
"""C0 (``keep`` lets newline and tab through), DEL, C1 (0x9b is a one-byte CSI to some
terminals; U+0085 is a line break), the line and paragraph separators U+2028/U+2029 (line breaks
to Python's ``splitlines``, editors and log viewers: raw, a one-line message or title from untrusted
text would read as two), the bidirectional embeddings, overrides and isolates, and surrogates."""


def _escape(match: re.Match[str]) -> str:
    return match.group().encode("unicode_escape").decode("ascii")


def escape_controls(text: str, keep: str = "\n\t") -> str:
    """``text`` with every control character not in ``keep`` shown as its Python escape."""
    return _CONTROLS.sub(lambda m: m.group() if m.group() in keep else _escape(m), text)


def one_line(text: str) -> str:
    """``text`` escaped to a single line: for a value quoted in a message or a title (a path, an
    argument, a sample id, a checklist question). Every line break is escaped: ``\\n``, ``\\r``,
    U+0085, U+2028, U+2029 (and every other control character)."""
    return escape_controls(text, keep="")


def is_terminal(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


def for_stream(text: str, stream: Any) -> str:
    """``text`` as it may be written to ``stream``: escaped on a terminal, unchanged elsewhere but
    for what the stream's encoding cannot carry (backslash escapes, never ``UnicodeEncodeError``)."""
    if is_terminal(stream):
        text = escape_controls(text)
    encoding = getattr(stream, "encoding", None) or "utf-8"
    return text.encode(encoding, "backslashreplace").decode(encoding)


def write_exact(stream: IO[str], text: str) -> None:
    """``text`` on ``stream`` byte for byte (no markup, no wrapping, no tab expansion), escaped on
    a terminal (``for_stream``)."""
    stream.write(for_stream(text, stream))
    stream.flush()


def text(value: str, style: str = "") -> Text:
    """A rich ``Text`` of untrusted ``value``: never markup, whatever console renders it (a panel's
    title, a progress column and a caller's own console do not go through ``console()``)."""
    from rich.text import Text

    return Text(escape_controls(value), style=style)


def console(**kwargs: Any) -> Console:
    """A rich ``Console`` (``kwargs`` as for rich's) on which every string prints literally."""
    return _literal_console()(**kwargs)


@functools.cache
def _literal_console() -> type[Console]:
    # Built on first use: rich stays out of `import grm` and `grm --help`.
    from rich.console import Console

    class LiteralConsole(Console):
        """Every string rich renders passes through ``render_str``: print arguments, table cells,
        table titles and headers, live renderables."""

        def __init__(self, **kwargs: Any) -> None:
            super().__init__(**{**kwargs, "markup": False, "emoji": False, "highlight": False})

        def render_str(self, text: str, **kwargs: Any) -> Text:
            kwargs.update(markup=False, emoji=False, highlight=False)
            return super().render_str(escape_controls(text), **kwargs)

    return LiteralConsole
