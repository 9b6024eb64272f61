"""grm run's held-out check (``heldout:``): what the pipeline accepts, what a reading writes, what a
resume keeps and what the report says. The policy here is a stand-in handle (the check's logic does
not depend on a model; the real actor's ``answers`` runs in tests/integration/orchestrator/test_run.py);
the verifier is the real ``constraints`` rule."""

import json

import pytest

from grm.base import GrmError
from grm.config.loading import ConfigError
from grm.config.resolve import load_pipeline
from grm.orchestrator.heldout import FILE, HeldoutCheck, NoCheck, read_readings, report_lines

KEYWORD = "builtin:keyword-grm"


class Answers:
    """A policy handle's ``answers``: each prompt's answer includes its word when ``follow``."""

    def __init__(self, follow):
        self.follow, self.calls = follow, 0

    def remote(self, prompts, max_new_tokens):
        self.calls += 1
        out = []
        for i, p in enumerate(prompts):
            (c,) = p.metadata["constraints"]
            out.append(f"A note with the word {c['word']} in it." if self.follow(i) else "A note.")
        return out


class Policy:
    def __init__(self, follow):
        self.answers = Answers(follow)


def check(tmp_path, *overrides):
    loaded = load_pipeline(KEYWORD, ["heldout.limit=6", *overrides])
    return HeldoutCheck.load(loaded, tmp_path)


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
        ("heldout.prompts=builtin:nope", "unknown builtin data set"),
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
    before, after = Policy(lambda i: i < 2), Policy(lambda i: i < 5)
    c.after(0, before, lambda x: x)
    c.after(3, before, lambda x: x)  # not due: neither the last step nor an `every` step
    c.after(12, after, lambda x: x)  # the last step
    assert before.answers.calls == 1 and after.answers.calls == 1
    rows = read_readings(tmp_path)
    assert [(r["step"], r["judge"], r["rewards"]) for r in rows] == [
        (0, "constraints", [1.0, 1.0, 0.0, 0.0, 0.0, 0.0]),
        (12, "constraints", [1.0, 1.0, 1.0, 1.0, 1.0, 0.0]),
    ]
    assert all(len(r["answers"]) == 6 and r["format"] == 1 for r in rows)
    out = capsys.readouterr().out
    assert "held-out check before training: constraints 0.333" in out and "after step 12: constraints 0.833" in out
    c.summary()
    assert "held-out constraints: 0.333 at step 0 -> 0.833 at step 12, paired change +0.500" in capsys.readouterr().out
    text = "\n".join(report_lines(tmp_path))
    assert "## Held-out check" in text and "| 12 | constraints | 0.833 |" in text


def test_a_reading_already_in_the_file_is_not_taken_again(tmp_path):
    c = check(tmp_path, "heldout.every=2")
    p = Policy(lambda i: True)
    for step in (0, 0, 2, 2):
        c.after(step, p, lambda x: x)
    assert p.answers.calls == 2 and [r["step"] for r in read_readings(tmp_path)] == [0, 2]


def test_a_resume_drops_the_readings_of_steps_trained_again_and_a_torn_line(tmp_path):
    c = check(tmp_path, "heldout.every=2")
    p = Policy(lambda i: True)
    for step in (0, 2, 4):
        c.after(step, p, lambda x: x)
    with open(tmp_path / FILE, "a") as f:
        f.write('{"step": 6, "judge": "constr')  # a kill mid-line
    c.restore(2)  # resumed from the step-2 checkpoint: step 4 is trained again
    assert [r["step"] for r in read_readings(tmp_path)] == [0, 2]
    c.after(4, Policy(lambda i: False), lambda x: x)
    assert read_readings(tmp_path)[-1]["rewards"] == [0.0] * 6


def test_a_damaged_line_is_named_and_the_report_says_so(tmp_path):
    (tmp_path / FILE).write_text('{"step": 0, "judge": "constraints", "rewards": "x"}\n')
    with pytest.raises(GrmError, match=rf"{FILE}:1: 'rewards' must be a list"):
        read_readings(tmp_path)
    assert report_lines(tmp_path)[0].startswith("(held-out check not shown:")
    (tmp_path / FILE).write_text(json.dumps({"step": 0, "judge": "c", "rewards": [], "format": 9}) + "\n")
    with pytest.raises(GrmError, match="newer grm"):
        read_readings(tmp_path)


def test_a_pipeline_without_a_check_reads_nothing(tmp_path):
    c = HeldoutCheck.load(load_pipeline("builtin:quickstart"), tmp_path)
    assert type(c) is NoCheck
    c.restore(0)
    c.after(0, None, None)
    c.summary()
    assert not (tmp_path / FILE).exists() and report_lines(tmp_path) == []


def test_the_step_line_shows_each_judge_beside_the_reward_when_there_are_several():
    from grm.orchestrator.step_rows import console_line

    m = {"step": 3, "reward_mean": 0.6, "reward_std": 0.1, "masked": 0, "kl": 0.01, "response_len_mean": 80.0}
    m |= {f"seconds_{k}": 1.0 for k in ("rollout", "judging", "reference", "training", "sync", "step")}
    one = console_line({**m, "reward/judge": 0.6}, 12)
    assert one.startswith("step 3/12 reward 0.600±0.100 masked 0")
    two = console_line({**m, "reward/judge": 0.6, "reward/constraints": 0.875, "reward/off": None}, 12)
    assert two.startswith("step 3/12 reward 0.600±0.100 (judge 0.600, constraints 0.875) masked 0")  # a monitor's too
