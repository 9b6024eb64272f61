"""The run display (``grm.orchestrator.live``) fed fake events: one plain line per step when stdout
is not a terminal, the live panel's content on one, and when the panel is chosen."""

import io
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from rich.console import Console

from grm.judges.cost import COUNTS
from grm.orchestrator.live import RunDisplay, live_wanted

ROOT = Path(__file__).resolve().parents[3]


def metrics(step: int) -> dict:
    return {
        "step": step,
        "reward_mean": 0.5,
        "reward_std": 0.25,
        "masked": 1,
        "masked_by_judge": {"helpful": 1},
        "kl": 0.0012,
        "response_len_mean": 40.0,
        "seconds_rollout": 2.0,
        "seconds_judging": 3.0,
        "seconds_reference": 0.5,
        "seconds_training": 4.0,
        "seconds_sync": 0.1,
        "seconds_step": 10.0,
        "reward/helpful": 0.625,
        "reward/math": 0.375,
        **{f"judge_cost/helpful/{k}": v for k, v in zip(COUNTS, (17, 3, 4321, 3500, 987, 6), strict=True)},
        "judge_cost/helpful/seconds": 2.5,
        **{f"judge_cost/math/{k}": v for k, v in zip(COUNTS, (16, 0, 0, 0, 0, 0), strict=True)},
        "judge_cost/math/seconds": 0.01,
    }


def feed(d: RunDisplay, step: int) -> None:
    d.begin(step)
    d.landed(step, 8)
    d.judged(step, "helpful", 0, 8)
    d.judged(step, "math", None, 8)
    d.landed(step, 8)
    d.judged(step, "helpful", 1, 8)
    d.judged(step, "math", None, 8)
    d.set_phase("training")
    d.done(metrics(step + 1))


SCRIPT = """
from grm.orchestrator.live import RunDisplay, live_wanted
from tests.unit.orchestrator.test_live import feed
d = RunDisplay("t", 3, 16, {"helpful": 2, "math": 0}, live_wanted())
d.start()
for s in range(3):
    feed(d, s)
d.stop()
print("live" if live_wanted() else "plain")
"""


def test_not_a_terminal_prints_exactly_one_plain_line_per_step():
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "80"}
    env.pop("CI", None)
    env.pop("FORCE_COLOR", None)
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(SCRIPT)], cwd=ROOT, env=env, capture_output=True, text=True, check=True
    ).stdout
    lines = out.splitlines()
    assert lines[-1] == "plain"  # stdout is a pipe: no panel
    assert [ln.split(" reward")[0] for ln in lines[:-1]] == ["step 1/3", "step 2/3", "step 3/3"]
    assert all(len(ln) > 80 for ln in lines[:-1])  # longer than the pipe's 80 columns, still one line each
    assert "\x1b" not in out and "[bold]" not in out


def test_when_the_panel_is_shown(monkeypatch):
    tty = Console(force_terminal=True, file=io.StringIO())
    monkeypatch.delenv("CI", raising=False)
    assert live_wanted(console=tty)
    assert not live_wanted(no_live=True, console=tty)
    assert not live_wanted(console=Console(file=io.StringIO()))  # a file: not a terminal
    monkeypatch.setenv("CI", "true")
    assert not live_wanted(console=tty)
    monkeypatch.setenv("CI", "false")
    assert live_wanted(console=tty)


def test_panel_shows_progress_per_judge_and_replica_and_the_last_steps_cost():
    con = Console(force_terminal=True, width=120, record=True, file=io.StringIO())
    d = RunDisplay("quick", 5, 16, {"helpful": 2, "math": 0}, live=False, console=con)
    feed(d, 0)  # step 1 done
    d.begin(1)
    d.landed(1, 8)
    d.judged(1, "helpful", 1, 8)
    d.landed(2, 4)  # async: the next step's rollouts already landing
    con.print(d.render())
    text = con.export_text()
    assert "grm run quick" in text and "step 2/5" in text and "rollout + judging" in text
    assert "8/16 samples" in text
    helpful = next(ln for ln in text.splitlines() if "judge helpful" in ln)
    assert "8/16" in helpful and "#0 0 #1 8" in helpful
    math_line = next(ln for ln in text.splitlines() if "judge math" in ln)
    assert "0/16" in math_line and "#0" not in math_line  # a judge in this process has no replicas
    assert "next step: 4 samples landed" in text
    assert "ETA 0:40" in text  # 10 s per step, 4 steps to go
    # the last step: rewards, masking and each judge's cost
    row = next(ln for ln in text.splitlines() if ln.lstrip("│ ").startswith("helpful"))
    assert row.strip("│ ").split()[1:10] == ["0.625", "1", "17", "3", "4321", "3500", "987", "6", "2.5"]
    assert "step 1: reward 0.500±0.250  masked 1  kl 0.0012" in text


def test_training_phase_shows_micro_batches_against_the_previous_step():
    con = Console(force_terminal=True, width=120, record=True, file=io.StringIO())
    d = RunDisplay("quick", 2, 4, {"math": 0}, live=True, console=con)
    assert d.wants_training  # the scheduler polls the policy only for a panel
    d.begin(0)
    d.set_phase("training")
    d.training(3, None)  # the first step: no earlier count to size a bar
    con.print(d.render())
    text = con.export_text()  # (export clears what the console recorded)
    assert "3 micro-batches (rank 0)" in text and "ETA -" in text
    d.set_phase("training")  # the next step's training starts from nothing
    con.print(d.render())
    assert "0 micro-batches (rank 0)" in con.export_text()
    d.training(5, 8)
    con.print(d.render())
    assert "5/8 micro-batches (rank 0)" in con.export_text()
    assert not RunDisplay("quick", 2, 4, {}, live=False, console=con).wants_training


def test_live_mode_starts_and_stops_a_panel_and_keeps_step_lines():
    buf = io.StringIO()
    con = Console(force_terminal=True, width=120, file=buf)
    d = RunDisplay("quick", 2, 16, {"helpful": 2, "math": 0}, live=True, console=con)
    d.start()
    assert d._live is not None
    feed(d, 0)
    d.stop()
    assert d._live is None
    out = buf.getvalue()
    assert "step 1/2" in out and "grm run quick" in out
    # after the last step: no empty progress bars, what is left to do instead
    feed(d, 1)
    con = Console(force_terminal=True, width=120, record=True, file=io.StringIO())
    con.print(d.render())
    text = con.export_text()
    assert "writing the checkpoint and report" in text and "samples" not in text and "step 2: reward" in text


def test_names_from_the_yaml_enter_the_panel_and_the_step_line_as_text():
    con = Console(force_terminal=True, width=200, record=True, file=io.StringIO())  # markup on by default
    d = RunDisplay("[bold]run[/] :x:", 2, 16, {"[red]j[/]": 2, "k\x1b[2J": 0}, live=False, console=con)
    d.begin(0)
    d.judged(0, "[red]j[/]", 1, 8)
    d.judged(1, "[red]j[/]", 0, 4)  # the next step's line names it too
    con.print(d.render())
    d.done({**metrics(1), "masked_by_judge": {}})
    text = con.export_text()
    assert "grm run [bold]run[/] :x:" in text and "judge [red]j[/]" in text and "judge k\\x1b[2J" in text
    assert "judged: [red]j[/] 4" in text and "step 1/2 reward 0.500" in text
    assert "❌" not in text and "\x1b[2J" not in con.file.getvalue()
