"""Untrusted text on the console (``grm.terminal``): never rich markup or emoji codes, control
characters shown as escapes on a rich console and on a terminal, the exact text into a pipe."""

import io

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console
from rich.panel import Panel
from rich.table import Table

from grm.terminal import console, escape_controls, for_stream, one_line, text, write_exact

HOSTILE = (
    "[/] [bold]b[/bold] [link=http://x]l[/link] :x: \x1b[31mred\x1b[0m "
    "\x1b]0;title\x07 \x1b]52;c;Zm9v\x07 \x9b2J bs\x08 cr\r \u202eevil"
)
"""Markup, an emoji code, ANSI colour, a window title and a clipboard write (OSC 52), a one-byte
CSI, backspace, carriage return and a right-to-left override."""


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_escape_controls_shows_each_control_as_its_python_escape():
    assert escape_controls("a\x1b[31mb\rc\x07\x7f\x9b\u202e\u2066\ud800") == "a\\x1b[31mb\\rc\\x07\\x7f\\x9b\\u202e\\u2066\\ud800"
    assert escape_controls("line\n\ttab") == "line\n\ttab"  # newline and tab are text
    assert one_line("a\nb\tc") == "a\\nb\\tc"
    assert escape_controls("é ü 漢字 emoji 💥 [x]") == "é ü 漢字 emoji 💥 [x]"  # printable text unchanged


@settings(max_examples=200, derandomize=True, database=None)
@given(st.text(alphabet=st.characters(exclude_categories=())))
def test_escaped_text_holds_no_control_character_and_keeps_the_printable_rest(s):
    shown = escape_controls(s)
    assert not any(ord(c) < 0x20 and c not in "\n\t" or 0x7F <= ord(c) <= 0x9F for c in shown)
    assert escape_controls(shown) == shown  # idempotent: nothing shown twice-escaped
    assert "\n" not in one_line(s)


def test_a_literal_console_prints_markup_and_emoji_codes_as_written():
    buf = io.StringIO()
    con = console(file=buf, width=400)
    con.print(HOSTILE)
    con.print("[bold]asked for markup[/]", markup=True, emoji=True)  # no call turns it back on
    out = buf.getvalue()
    assert "[/] [bold]b[/bold] [link=http://x]l[/link] :x: \\x1b[31mred\\x1b[0m" in out
    assert "\\x1b]0;title\\x07 \\x1b]52;c;Zm9v\\x07 \\x9b2J bs\\x08 cr\\r \\u202eevil" in out
    assert "[bold]asked for markup[/]" in out
    assert "\x1b" not in out and "\x07" not in out and "\u202e" not in out and "❌" not in out


def test_tables_and_panels_on_any_console_show_untrusted_text_literally():
    for con in (console(file=io.StringIO(), width=400, force_terminal=True), Console(file=io.StringIO(), width=400)):
        table = Table(title=text(HOSTILE))
        table.add_column(text("[red]head"))
        table.add_row(text(HOSTILE))
        con.print(table)
        con.print(Panel(text("body [/]"), title=text("title [/] :x:")))
        out = con.file.getvalue()
        assert out.count("[/] [bold]b[/bold]") == 2 and "[red]head" in out and "title [/] :x:" in out
        assert "\\x1b]52;c;Zm9v" in out and "\x1b]" not in out and "\u202e" not in out and "❌" not in out


def test_write_exact_is_byte_exact_into_a_pipe_and_escaped_on_a_terminal():
    pipe, tty = io.StringIO(), Tty()
    write_exact(pipe, HOSTILE + "\n\ttab")
    write_exact(tty, HOSTILE + "\n\ttab")
    assert pipe.getvalue() == HOSTILE + "\n\ttab"
    assert tty.getvalue() == escape_controls(HOSTILE) + "\n\ttab" and "\x1b" not in tty.getvalue()


@pytest.mark.parametrize("encoding", ["utf-8", "ascii", "latin-1"])
def test_what_a_stream_cannot_encode_is_escaped_not_raised(encoding):
    stream = io.TextIOWrapper(io.BytesIO(), encoding=encoding)
    shown = for_stream("ok é 漢 \ud800", stream)
    stream.write(shown)  # would raise UnicodeEncodeError unescaped
    stream.flush()
    assert shown.startswith("ok ") and "\\ud800" in shown
