"""The judge canary's readings, drift and alarms, with a real rule verifier and a scripted judge
whose judgment worsens (no Ray, no model)."""

import json
import math
from types import SimpleNamespace

import pytest

from grm.config.resolve import load_pipeline
from grm.data.items import labelled_pairs
from grm.judges.types import JudgeResult
from grm.orchestrator.canary import Canaries, Reading, describe, drift, read, report_lines

PAIRS = "builtin:arith-pairs"


def res(score=None, verdict=None, margin=None):
    return JudgeResult(judge="j", score=score, verdict=verdict, margin=margin)


def test_a_reading_counts_ties_and_masked_pairs_as_wrong():
    items = labelled_pairs(PAIRS, 4, "t")  # labels alternate 1, 2, 1, 2
    per_item = [
        [res(1.0), res(0.0)],  # prefers 1: right
        [res(0.0), res(1.0)],  # prefers 2: right
        [res(1.0), res(1.0)],  # tie: wrong
        [res(None), res(1.0)],  # masked: wrong
    ]
    r = read("rule", items, per_item)
    assert r == Reading(accuracy=0.5, score_mean=5 / 7, masked=1)
    pairwise = read("pairwise", items[:2], [[res(1.0, "1", 2.0)], [res(1.0, "1", 1.0)]])
    assert pairwise == Reading(accuracy=0.5, score_mean=1.5, masked=0)  # pairwise: the margin is its number


@pytest.mark.parametrize(
    ("now", "alarm"),
    [(0.8, False), (0.7, False), (0.69, True), (0.9, False), (float("nan"), True)],
)
def test_a_fall_beyond_max_drop_alarms_and_exactly_max_drop_does_not(now, alarm):
    m = drift("j", Reading(now, 3.0, 0), Reading(0.8, 4.0, 0), max_drop=0.1)
    assert m["canary/j/alarm"] is alarm
    assert m["canary/j/score_drift"] == -1.0
    if not math.isnan(now):
        assert m["canary/j/accuracy_drift"] == pytest.approx(now - 0.8)


class Scripted:
    """A local judge whose n-th batch scores the correct response lower and lower."""

    def __init__(self, items):
        self.items, self.calls = items, 0

    def score_batch(self, samples):
        self.calls += 1
        out = []
        for s in samples:
            item = next(it for it in self.items if s.id.startswith(it.id + "/"))
            good = s.id.endswith(f"/{item.label - 1}")
            worse = self.calls - 1  # from the second reading on, this many pairs flip
            flip = int(item.id.split("-")[1]) < worse
            out.append(res(1.0 if good != flip else 0.0))
        return out


def pipeline(tmp_path, canary: str):
    (tmp_path / "prompts.jsonl").write_text('{"prompt": "hi"}\n')
    p = tmp_path / "p.yaml"
    p.write_text(
        "name: t\npools: {a: {cpus: 1}}\npolicy: {spec: builtin:smollm2-135m-instruct, pool: a}\n"
        f"judges:\n  - {{spec: builtin:numeric-answer, canary: {canary}}}\ndata: {{prompts: prompts.jsonl}}\n"
    )
    return load_pipeline(p)


def test_the_real_verifier_reads_every_kth_step_with_no_drift(tmp_path):
    from grm.judges import build_judge

    loaded = pipeline(tmp_path, f"{{data: {PAIRS}, every: 2, limit: 10}}")
    handle = SimpleNamespace(name="numeric-answer", local=build_judge(loaded.judges[0].spec), actor=None)
    canaries = Canaries.load(loaded)
    assert canaries.after_step(1, [handle]) == {}  # not due
    m = canaries.after_step(2, [handle])
    assert m["canary/numeric-answer/accuracy"] == 1.0 and m["canary/numeric-answer/accuracy_drift"] == 0.0
    assert m["canary/numeric-answer/score_mean"] == 0.5  # one right (1.0) and one wrong (0.0) answer a pair
    assert m["canary/numeric-answer/alarm"] is False and m["canary/numeric-answer/seconds"] >= 0


def test_a_worsening_judge_warns_and_resume_keeps_the_first_reading(tmp_path, capsys):
    loaded = pipeline(tmp_path, f"{{data: {PAIRS}, every: 1, limit: 10, max_drop: 0.15}}")
    canaries = Canaries.load(loaded)
    judge = Scripted(canaries.canaries[0].items)
    handle = SimpleNamespace(name="numeric-answer", local=judge, actor=None)
    logged = []
    for step in (1, 2, 3):
        logged.append({"step": step, **canaries.after_step(step, [handle])})
    accs = [m["canary/numeric-answer/accuracy"] for m in logged]
    assert accs == [1.0, 0.9, 0.8]  # 0, 1, 2 pairs flipped
    assert [m["canary/numeric-answer/alarm"] for m in logged] == [False, False, True]
    out = capsys.readouterr().out
    assert "canary warning: step 3: judge 'numeric-answer' accuracy 0.800 is 0.200 below its first reading 1.000" in out
    assert "step 2" not in out

    resumed = Canaries.load(loaded)
    resumed.restore(logged[:2])
    judge.calls = 2  # the third reading again, by a fresh process
    again = resumed.after_step(3, [handle])
    assert again["canary/numeric-answer/accuracy_drift"] == pytest.approx(-0.2)  # against step 1, not its own reading

    lines = "\n".join(report_lines(tmp_path, logged))
    assert "## Judge canary" in lines and "| 3 | numeric-answer | 0.800 | -0.200 |" in lines
    assert "**warning**: step 3: judge 'numeric-answer' accuracy fell 0.200" in lines and "Judge gate" not in lines


def test_report_lists_the_gate_and_dry_run_describes_both(tmp_path):
    gate = {
        "j": {
            "judge": "j",
            "passed": True,
            "accuracy": 0.9,
            "ci95": [0.8, 1.0],
            "min_accuracy": 0.7,
            "pairs": 20,
            "eval_dir": "d",
        }
    }
    (tmp_path / "gate.json").write_text(json.dumps(gate))
    assert "| j | True | 0.900 | 0.800-1.000 | 0.7 | 20 | `d` |" in report_lines(tmp_path, [])
    assert report_lines(tmp_path / "none", [{"step": 1}]) == []  # neither: no section
    loaded = pipeline(tmp_path, f"{{data: {PAIRS}, every: 5}}")
    assert describe(loaded) == [
        "canary: judge 'numeric-answer' re-scores the first 32 pairs of builtin:arith-pairs every 5 step(s); "
        "a fall of more than 0.1 accuracy points below its first reading is a warning"
    ]


def test_a_failed_canary_call_is_a_masked_reading_that_alarms_not_the_end_of_the_run(tmp_path, capsys):
    from grm.judges.errors import JudgeError

    class Broken:
        def score_batch(self, samples):
            raise JudgeError("the judge fell over")

    loaded = pipeline(tmp_path, f"{{data: {PAIRS}, every: 1, limit: 4}}")
    canaries = Canaries.load(loaded)
    good = SimpleNamespace(name="numeric-answer", local=Scripted(canaries.canaries[0].items), actor=None)
    canaries.after_step(1, [good])
    m = canaries.after_step(2, [SimpleNamespace(name="numeric-answer", local=Broken(), actor=None)])
    assert m["canary/numeric-answer/masked"] == 4 and m["canary/numeric-answer/accuracy"] == 0.0
    assert m["canary/numeric-answer/alarm"] is True and "4 pair(s) masked" in capsys.readouterr().out


def test_the_dry_run_plan_lists_the_gate_and_the_canary(tmp_path):
    from grm.orchestrator import dry_run
    from grm.orchestrator.pools import Pool, role_pools

    (tmp_path / "prompts.jsonl").write_text('{"prompt": "hi"}\n')
    p = tmp_path / "p.yaml"
    p.write_text(
        "name: t\npools: {a: {cpus: 1}}\npolicy: {spec: builtin:smollm2-135m-instruct, pool: a}\n"
        f"judges:\n  - {{spec: builtin:numeric-answer, gate: {{data: {PAIRS}, min_accuracy: 0.9, limit: 50}},"
        f" canary: {{data: {PAIRS}, every: 2}}}}\ndata: {{prompts: prompts.jsonl}}\n"
    )
    loaded = load_pipeline(p)
    roles = role_pools(loaded.spec, ["numeric-answer"])
    lines = dry_run.describe(loaded, {"a": Pool("a", loaded.spec.pools["a"], None, roles["a"])})  # the plan Ray is not asked for
    assert lines[-2:] == [
        "gate: judge 'numeric-answer' is evaluated on the first 50 pairs of builtin:arith-pairs before the policy loads; "
        "below accuracy 0.9 the run stops",
        "canary: judge 'numeric-answer' re-scores the first 32 pairs of builtin:arith-pairs every 2 step(s); "
        "a fall of more than 0.1 accuracy points below its first reading is a warning",
    ]
