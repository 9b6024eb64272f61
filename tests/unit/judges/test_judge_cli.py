"""``grm judge render`` and ``grm judge try`` on hostile text: the prompt comes out byte for byte
into a pipe and with its control characters escaped on a terminal; critiques, names and error
messages are never rich markup or emoji codes. ``try`` runs on the scripted engine (no model)."""

import io
import json
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

import grm.judges.runtime as runtime
from grm.cli import main
from grm.judges.cli import read_samples
from grm.judges.errors import JudgeError
from grm.judges.render import render
from grm.terminal import escape_controls
from tests.unit.judges.fake_engine import ScriptedEngine

HOSTILE = "[/] [bold]b[/bold] :x: \x1b[31mred\x1b[0m \x1b]0;title\x07 bs\x08 \x9b2J \u202eevil\ttab"
"""Rich markup, an emoji code, ANSI colour, a window title, backspace, a one-byte CSI, a
right-to-left override and a tab."""


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def judge_files(tmp_path: Path) -> tuple[Path, Path]:
    (tmp_path / "t.j2").write_text("{# expects: prompt, response #}T " + HOSTILE + "\nQ: {{ prompt }}\nA: {{ response }}\n")
    judge = tmp_path / "j.yaml"
    spec = {
        "name": "hostile",
        "mode": "pointwise",
        "model": "fuzz-model",
        "template": "t.j2",
        "parser": {"type": "regex", "range": [1, 10]},
    }
    judge.write_text(json.dumps(spec))
    sample = tmp_path / "s.json"
    sample.write_text(json.dumps({"prompt": "P " + HOSTILE, "response": "R :smile: [red]", "id": "[bold]id[/] :x:"}))
    return judge, sample


def cli(stdout: io.StringIO, *argv: str, stderr: io.StringIO | None = None) -> int:
    with redirect_stdout(stdout), redirect_stderr(stderr or io.StringIO()):
        return main(list(argv))


def rendered_prompt(judge: Path, sample: Path) -> str:
    [stage] = render(runtime.load(judge), read_samples(str(sample))[0])
    [message] = stage["request"].messages
    return message["content"]


def test_render_prints_the_exact_prompt_into_a_pipe(tmp_path):
    judge, sample = judge_files(tmp_path)
    prompt = rendered_prompt(judge, sample)
    assert "T " + HOSTILE in prompt and "Q: P " + HOSTILE in prompt  # what the model gets holds it all
    out = io.StringIO()
    assert cli(out, "judge", "render", str(judge), "--sample", str(sample)) == 0
    header, body = out.getvalue().split("\n", 1)
    assert header.startswith("── judge view 0") and "(chat messages" in header
    assert body == f"[user]\n{prompt}\n"  # byte for byte, then one newline


def test_render_on_a_terminal_shows_control_characters_as_escapes(tmp_path):
    judge, sample = judge_files(tmp_path)
    prompt = rendered_prompt(judge, sample)
    out = Tty()
    assert cli(out, "judge", "render", str(judge), "--sample", str(sample)) == 0
    text = out.getvalue()
    assert escape_controls(prompt) in text and "[/] [bold]b[/bold] :x: \\x1b[31mred" in text
    for raw in ("\x1b[31m", "\x1b]0;", "\x07", "\x08", "\x9b", "\u202e"):
        assert raw not in text


def test_try_prints_critiques_with_markup_and_escapes_as_text(tmp_path, monkeypatch):
    judge, sample = judge_files(tmp_path)
    engine = ScriptedEngine(lambda prompt, j, call: f"crit {HOSTILE} [/red] Score: 7" if j == 0 else f"[/] no score {HOSTILE}")
    real_load = runtime.load
    monkeypatch.setattr(runtime, "load", lambda ref, **kw: real_load(ref, engine=engine, **kw))
    monkeypatch.setenv("COLUMNS", "1000")  # each critique on one line of the table
    out = io.StringIO()
    assert cli(out, "judge", "try", str(judge), "--sample", str(sample), "sampling.n=2", "on_failure.retries=0") == 0
    text = out.getvalue()
    shown = escape_controls(HOSTILE).split("\t")[0]  # (a table expands the tab to spaces)
    assert f"crit {shown}" in text and "tab [/red]" in text  # was rich's MarkupError on "[/]"
    assert f"[/] no score {shown}" in text and "hostile on [bold]id[/] :x:" in text
    assert "❌" not in text and "😄" not in text and "\x1b" not in text and "\u202e" not in text
    assert '"score": 7.0' in text


def test_an_error_quoting_user_text_prints_literally_with_its_control_characters_escaped(tmp_path):
    judge, _ = judge_files(tmp_path)
    bad = tmp_path / "s [red]:x:\x1b[2J.json"
    bad.write_text("{not json")
    shown = escape_controls(str(bad))  # in a log file too: someone reads it on a terminal later
    for err in (io.StringIO(), Tty()):
        assert cli(io.StringIO(), "judge", "render", str(judge), "--sample", str(bad), stderr=err) == 2
        assert err.getvalue() == f"error: {shown}:1: invalid JSON: Expecting property name enclosed in double quotes\n"


@pytest.mark.parametrize(
    "content,needle",
    [
        (b'{"prompt": "p", "response": "r \\ud800"}', "a lone surrogate ('\\ud800')"),
        (b"\xef\xbb\xbf" + b'{"prompt": "p", "response": "r", "id": "bom"}', None),
        (b'{"prompt": "p", "response": "' + b"9" * 10 + b'", "id": ' + b"9" * 5000 + b"}", "invalid JSON"),
        (b"[" * 100_000, "invalid JSON"),
    ],
)
def test_sample_files_that_json_reads_but_no_prompt_can_carry_are_refused(tmp_path, content, needle):
    s = tmp_path / "s.json"
    s.write_bytes(content)
    if needle is None:
        assert read_samples(str(s))[0].id == "bom"
        return
    with pytest.raises(JudgeError, match=f"^{s}"):
        read_samples(str(s))
    with pytest.raises(JudgeError) as e:
        read_samples(str(s))
    assert needle in str(e.value)


def test_try_warns_on_stderr_when_the_judgment_passes_the_judges_deadline(tmp_path, monkeypatch):
    judge, sample = judge_files(tmp_path)
    engine = ScriptedEngine(lambda *a: "Score: 7")
    real_load = runtime.load
    monkeypatch.setattr(runtime, "load", lambda ref, **kw: real_load(ref, engine=engine, **kw))
    for deadline, warned in (("1.0e-9", True), ("600", False)):
        out, err = io.StringIO(), io.StringIO()
        assert (
            cli(out, "judge", "try", str(judge), "--sample", str(sample), "--json", f"limits.deadline_s={deadline}", stderr=err)
            == 0
        )
        assert json.loads(out.getvalue())[0]["score"] == 7.0  # still scored; stdout stays one JSON document
        assert ("past its 0 s deadline" in err.getvalue()) is warned, err.getvalue()
