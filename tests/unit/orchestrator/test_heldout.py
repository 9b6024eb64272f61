"""grm run's held-out check (``heldout:``): what the pipeline accepts, what a reading writes, what a
resume keeps and what the report says. The answers here are written by the test (the check's logic
does not depend on a model; the real actor's ``answers`` runs in
tests/integration/orchestrator/test_run.py); the verifier is the real ``constraints`` rule."""

import json

import pytest

from grm.base import GrmError
from grm.config.loading import ConfigError
from grm.config.resolve import load_pipeline
from grm.orchestrator.errors import RunError
from grm.orchestrator.heldout import HeldoutCheck, NoCheck
from grm.orchestrator.heldout_file import FILE, read_readings, report_lines
from grm.orchestrator.recorder import Recorder

KEYWORD = "builtin:keyword-grm"


def answers(check, follow):
    """One answer per held-out prompt: it includes the asked-for word when ``follow(i)``."""
    out = []
    for i, p in enumerate(check.prompts):
        (c,) = p.metadata["constraints"]
        out.append(f"A note with the word {c['word']} in it." if follow(i) else "A note.")
    return out


def check(tmp_path, *overrides):
    return HeldoutCheck.load(load_pipeline(KEYWORD, ["heldout.limit=6", *overrides]), tmp_path)


def read(check, step, follow):
    """What the driver does: a due reading is recorded."""
    if check.due(step):
        check.record(step, answers(check, follow), 1.5)
        return True
    return False


def test_the_shipped_quickstart_pipeline_has_a_check_on_other_prompts():
    loaded = load_pipeline(KEYWORD)
    h = loaded.spec.heldout
    assert h is not None and h.prompts != loaded.spec.data.prompts
    assert [spec.name for spec, _ in loaded.heldout] == ["constraints"]


@pytest.mark.parametrize(
    "override, message",
    [
        ("heldout.judges=[builtin:pointwise-logprob]", "runs a model"),
        ("heldout.prompts=builtin:constraints-quick-train", "never trains on"),
        ("heldout.judges=[]", "heldout.judges"),
        ("heldout.limit=0", "heldout.limit"),
        ("heldout.every=-1", "heldout.every"),
        ("heldout.prompts=builtin:nope", "heldout.prompts: unknown builtin data set"),
        ("heldout.judges=[builtin:nope]", "nope"),
    ],
)
def test_a_bad_check_is_refused_naming_its_field(override, message):
    with pytest.raises(ConfigError) as e:
        load_pipeline(KEYWORD, [override])
    assert message in str(e.value)


def test_an_episode_pipeline_takes_no_single_answer_check():
    with pytest.raises(ConfigError, match="grm eval --policy RUN --env"):
        load_pipeline("builtin:calc-episodes", ["heldout={prompts: builtin:arith-prompts, judges: [builtin:numeric-answer]}"])


def test_readings_before_and_after_and_the_paired_change(tmp_path, capsys):
    c = check(tmp_path)
    assert read(c, 0, lambda i: i < 2) and not read(c, 3, lambda i: True)  # 3: neither the last step nor an `every` one
    assert read(c, 12, lambda i: i < 5)  # the last step
    rows = read_readings(tmp_path)
    assert [(r["step"], r["judge"], r["rewards"]) for r in rows] == [
        (0, "constraints", [1.0, 1.0, 0.0, 0.0, 0.0, 0.0]),
        (12, "constraints", [1.0, 1.0, 1.0, 1.0, 1.0, 0.0]),
    ]
    assert all(len(r["answers"]) == 6 and r["ids"] == [p.id for p in c.prompts] and r["format"] == 1 for r in rows)
    out = capsys.readouterr().out
    assert "held-out check before training: constraints 0.333" in out and "after step 12: constraints 0.833" in out
    c.summary()
    assert "held-out constraints: 0.333 at step 0 -> 0.833 at step 12, paired change +0.500" in capsys.readouterr().out
    text = "\n".join(report_lines(tmp_path))
    assert "## Held-out check" in text and "| 12 | constraints | 0.833 |" in text


def test_a_reading_already_in_the_file_is_not_taken_again(tmp_path):
    c = check(tmp_path, "heldout.every=2")
    assert [read(c, s, lambda i: True) for s in (0, 0, 1, 2, 2)] == [True, False, False, True, False]
    assert [r["step"] for r in read_readings(tmp_path)] == [0, 2]


def test_readings_of_other_prompts_are_not_paired(tmp_path, capsys):
    c = check(tmp_path)
    read(c, 0, lambda i: True)
    rows = read_readings(tmp_path)
    other = {**rows[0], "step": 12, "ids": ["x"] * 6}
    (tmp_path / FILE).write_text("".join(json.dumps(r) + "\n" for r in (rows[0], other)))
    c.summary()
    assert "paired change" not in capsys.readouterr().out and "paired change" not in "\n".join(report_lines(tmp_path))


def test_a_resume_cuts_the_readings_of_steps_trained_again_and_a_torn_line(tmp_path):
    c = check(tmp_path, "heldout.every=2")
    for step in (0, 2, 4):
        read(c, step, lambda i: True)
    with open(tmp_path / FILE, "a") as f:
        f.write('{"step": 6, "judge": "constr')  # a kill mid-line
    Recorder(tmp_path).truncate_after(2)  # resumed from the step-2 checkpoint: step 4 is trained again
    assert [r["step"] for r in read_readings(tmp_path)] == [0, 2]
    assert read(c, 4, lambda i: False) and read_readings(tmp_path)[-1]["rewards"] == [0.0] * 6


def test_a_fresh_run_refuses_a_directory_holding_readings(tmp_path):
    loaded = load_pipeline(KEYWORD, [f"out_dir={tmp_path}"])
    (tmp_path / FILE).write_text("")
    with pytest.raises(RunError, match="already holds a run"):
        Recorder.create(loaded.spec, resume=None)


def test_a_damaged_line_is_named_and_the_report_says_so(tmp_path):
    (tmp_path / FILE).write_text('{"step": 0, "judge": "constraints", "rewards": "x", "ids": []}\n')
    with pytest.raises(GrmError, match=rf"{FILE}:1: 'rewards' must be a list"):
        read_readings(tmp_path)
    assert report_lines(tmp_path)[0].startswith("(held-out check not shown:")
    with pytest.raises(RunError, match=FILE):
        check(tmp_path).due(0)
    (tmp_path / FILE).write_text(json.dumps({"step": 0, "judge": "c", "rewards": [], "ids": [], "format": 9}) + "\n")
    with pytest.raises(GrmError, match="newer grm"):
        read_readings(tmp_path)


def test_a_pipeline_without_a_check_is_never_due(tmp_path):
    c = HeldoutCheck.load(load_pipeline("builtin:quickstart"), tmp_path)
    assert type(c) is NoCheck and not any(c.due(s) for s in (0, 5))
    c.summary()
    assert not (tmp_path / FILE).exists() and report_lines(tmp_path) == []
