"""``one_line`` (every message and title quoting untrusted text) escapes every line break, so a
sample id, a path or a checklist question cannot split an ``error:`` line or a stage title."""

from hypothesis import given
from hypothesis import strategies as st

from grm.terminal import escape_controls, one_line


@given(st.text())
def test_one_line_is_one_line_whatever_the_text(text):
    assert len(one_line(text).splitlines()) <= 1


def test_unicode_line_and_paragraph_separators_are_escaped():
    assert one_line("a\u2028b\u2029c\x85d\re\nf") == "a\\u2028b\\u2029c\\x85d\\re\\nf"
    assert escape_controls("a\u2028b\nc") == "a\\u2028b\nc"  # newline kept where asked, U+2028 never
