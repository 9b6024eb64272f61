"""Fuzz the whole command line with odd arguments, in process (``grm.cli.main``).

Every path argument of every subcommand is given, in turn, what it cannot take: a directory for a
file, a file for a directory, a FIFO, a character device, a symbolic link loop, a broken link, a
link to a FIFO, a path through a file, a missing path, an unreadable file; each under a generated
name (markup, emoji codes, escape sequences, newlines, any Unicode). Every numeric option is given
a value out of its range or no number at all. The other arguments are kinds the command takes
but contents it refuses, so a check that let the odd value through fails the command elsewhere,
naming something else.

The property (issue #39): exit 2, one line on stderr naming the argument and the value, no
traceback, and no hang: every command runs under an alarm (reading a FIFO blocks for good).
"""

from __future__ import annotations

import math
import os
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grm.terminal import one_line
from tests.unit.fuzz.support import CliResult, budget, count, fresh, run_cli

SECONDS = 20
"""Bound on one command: the slowest here parse arguments and stop, well under a second."""

ROOTED = os.geteuid() == 0


class Hung(Exception):
    pass


@contextmanager
def alarm(seconds: float) -> Iterator[None]:
    def ring(signum: int, frame: object) -> None:
        raise Hung(f"no answer in {seconds} s")

    old = signal.signal(signal.SIGALRM, ring)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def bounded(*argv: str) -> CliResult:
    with alarm(SECONDS):
        return run_cli(*argv)


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Arguments of the right kind whose contents every command refuses."""
    root = tmp_path_factory.mktemp("cli")
    (root / "bad.yaml").write_bytes(b"\xff\xfe not UTF-8, not YAML, not JSON")
    (root / "empty").mkdir()  # neither a run, an eval nor a datasets directory
    return {"file": str(root / "bad.yaml"), "dir": str(root / "empty"), "out": str(root / "out"), "root": str(root)}


# (slot, what it takes, argv with the odd value V, how argparse names the argument)
SLOTS: list[tuple[str, str, Callable[[dict[str, str], str], list[str]], str]] = [
    ("run", "file", lambda b, v: ["run", v], "PIPELINE.yaml"),
    ("run --resume", "dir", lambda b, v: ["run", b["file"], "--resume", v], "--resume"),
    ("validate", "file", lambda b, v: ["validate", b["file"], v], "FILE.yaml"),
    ("judge render", "file", lambda b, v: ["judge", "render", v, "--sample", b["file"]], "JUDGE.yaml"),
    ("judge render --sample", "file", lambda b, v: ["judge", "render", b["file"], "--sample", v], "--sample"),
    ("judge try", "file", lambda b, v: ["judge", "try", v, "--sample", b["file"]], "JUDGE.yaml"),
    ("judge try --sample", "file", lambda b, v: ["judge", "try", b["file"], "--sample", v, "--json"], "--sample"),
    ("judge lint", "file", lambda b, v: ["judge", "lint", b["file"], v], "JUDGE.yaml|TEMPLATE.j2"),
    ("eval JUDGES", "file", lambda b, v: ["eval", f"builtin:numeric-answer,{v}", "--data", b["file"], "--out", b["out"]],
     "JUDGE[,JUDGE2...]"),
    ("eval --data", "data", lambda b, v: ["eval", "builtin:numeric-answer", "--data", v, "--out", b["out"]], "--data"),
    ("eval --out", "out", lambda b, v: ["eval", "builtin:numeric-answer", "--data", b["file"], "--out", v], "--out"),
    ("eval --policy", "model", lambda b, v: ["eval", "--policy", v, "--prompts", b["file"], "--out", b["out"]], "--policy"),
    ("eval --against", "model",
     lambda b, v: ["eval", "--policy", "no-such-model", "--prompts", b["file"], "--against", v, "--out", b["out"]], "--against"),
    ("eval --prompts", "data", lambda b, v: ["eval", "--policy", "no-such-model", "--prompts", v, "--out", b["out"]],
     "--prompts"),
    ("rescore", "dir", lambda b, v: ["rescore", v], "DIR"),
    ("rescore --judge", "file", lambda b, v: ["rescore", b["dir"], "--judge", v], "--judge"),
    ("view", "dir", lambda b, v: ["view", b["dir"], v], "DIR"),
]  # fmt: skip

ODD = {
    "file": ["missing", "dir", "fifo", "device", "loop", "broken", "to-fifo", "through-file", "unreadable"],
    "dir": ["missing", "file", "fifo", "device", "loop", "broken", "through-file", "unreadable"],
    "data": ["missing", "fifo", "device", "loop", "broken", "to-fifo", "through-file", "unreadable"],
    "model": ["fifo", "device", "loop", "broken", "to-fifo"],  # a missing path may be a model alias or hub id
    "out": ["file", "fifo", "device", "loop", "broken", "through-file", "unwritable"],
}

names = st.one_of(
    st.sampled_from(["x", "[/]", "[bold]b[/bold]", ":x:", "\x1b[31mred", "line\nbreak", "tab\there", " space ", "-dash", "%s"]),
    st.text(st.characters(exclude_characters="/,\x00", exclude_categories=("Cs",)), min_size=1, max_size=16),
).filter(lambda s: s not in (".", "..") and len(s.encode()) < 200)


def make(folder: Path, odd: str, name: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """A path of the ``odd`` kind named ``name`` in the empty ``folder`` (what a link points to
    lives beside the folder, so no name can collide with it)."""
    p, beside = folder / name, Path(f"{folder}-target")
    p.parent.mkdir(parents=True, exist_ok=True)  # "[/]" is a folder "[" holding "]"
    if odd == "dir":
        p.mkdir()
    elif odd in ("file", "unreadable", "through-file"):
        p.write_text("a: 1\n")
        if odd == "through-file":
            p = p / "inside"
    elif odd == "unwritable":
        p.mkdir()
    elif odd == "fifo":
        os.mkfifo(p)
    elif odd == "device":
        p.symlink_to("/dev/null")
    elif odd == "loop":
        p.symlink_to(p)
    elif odd == "broken":
        p.symlink_to(beside)
    elif odd == "to-fifo":
        os.mkfifo(beside)
        p.symlink_to(beside)
    if odd in ("unreadable", "unwritable"):
        p.chmod(0o500 if odd == "unwritable" else 0)
        if ROOTED:  # root passes any mode bits: the access check answers as it would for a user
            real = os.access
            monkeypatch.setattr(os, "access", lambda q, mode, **kw: False if Path(q) == p else real(q, mode, **kw))
    return str(p)


@settings(max_examples=budget(300))
@given(slot=st.sampled_from(SLOTS), pick=st.integers(0, 99), name=names, direct_device=st.booleans())
def test_every_path_argument_refuses_what_it_cannot_take_in_one_line(base, slot, pick, name, direct_device):
    label, takes, argv, arg = slot
    odd = ODD[takes][pick % len(ODD[takes])]
    folder = fresh(Path(base["root"]), "")
    folder.mkdir()
    with pytest.MonkeyPatch.context() as mp:
        value = "/dev/null" if odd == "device" and direct_device else make(folder, odd, name, mp)
        res = bounded(*argv(base, value))
    count("cli paths")
    assert_one_line_refusal(res, arg, value, f"{label} given {odd} {value!r}")


def assert_one_line_refusal(res: CliResult, arg: str, value: str, case: str) -> None:
    assert res.code == 2, f"{case}: exit {res.code}\n{res.err}{res.out}"
    assert "Traceback" not in res.err + res.out, f"{case}:\n{res.err}"
    assert res.out == "", f"{case}: printed {res.out!r}"
    assert res.err.endswith("\n") and res.err.count("\n") == 1, f"{case}: not one line:\n{res.err}"
    assert f"argument {arg}: " in res.err, f"{case}: the argument is not named:\n{res.err}"
    assert one_line(value)[:200] in res.err, f"{case}: the value is not named:\n{res.err}"


# option -> (argv before it, lowest, highest, integer?)
NUMBERS: dict[str, tuple[Callable[[dict[str, str]], list[str]], float, float, bool]] = {
    "--batch-size": (lambda b: ["eval", "builtin:numeric-answer", "--data", b["file"], "--out", b["out"]], 1, math.inf, True),
    "--limit": (lambda b: ["eval", "builtin:numeric-answer", "--data", b["file"], "--out", b["out"]], 1, math.inf, True),
    "--max-new-tokens": (lambda b: ["eval", "--policy", "m", "--prompts", b["file"], "--out", b["out"]], 1, math.inf, True),
    "--seed": (lambda b: ["eval", "--policy", "m", "--prompts", b["file"], "--out", b["out"]], 0, 2**31 - 1, True),
    "--temperature": (lambda b: ["eval", "--policy", "m", "--prompts", b["file"], "--out", b["out"]], 0.0, math.inf, False),
    "--port": (lambda b: ["view", b["dir"]], 0, 65535, True),
}


def out_of_range(option: str, value: str) -> bool:
    _, low, high, integral = NUMBERS[option]
    try:
        x = int(value) if integral else float(value)
    except ValueError:
        return True
    return not (low <= x <= high)  # nan compares False: out of range


number_text = st.one_of(
    st.integers(min_value=-(2**80), max_value=2**80).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(["", " ", "nan", "-inf", "1e400", "1e3", "0x10", "1.5", "-0.0", "٣", "1_0", "10" * 3000, "-1\n"]),
    st.text(max_size=8),
)


@settings(max_examples=budget(200))
@given(option=st.sampled_from(sorted(NUMBERS)), value=number_text)
def test_every_numeric_option_refuses_a_value_out_of_range_in_one_line(base, option, value):
    if not out_of_range(option, value):
        return  # in range: taken (test_cli_args checks what it becomes)
    before = NUMBERS[option][0](base)
    res = bounded(*before, f"{option}={value}")  # `=`: a value starting with "-" stays a value
    count("cli numbers")
    assert_one_line_refusal(res, option, value, f"{option}={value!r}")
