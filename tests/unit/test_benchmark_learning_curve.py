"""benchmarks/learning_curve.py without running grm: system names with schedules and seeds, and the
two-level bootstrap that pools seeds."""

from __future__ import annotations

import pytest

from tests.unit.beside import script


@pytest.fixture(scope="module")
def lc():
    with script("benchmarks", "learning_curve") as module:
        yield module


def test_system_names_with_schedule_and_seed(lc):
    assert lc.parts("verifier:sync@1") == ("verifier", "sync", 1)
    assert lc.parts("grm") == ("grm", "", None)
    assert lc.folder("verifier:sync") == "verifier-sync"  # the directories of earlier invocations keep their names
    assert lc.folder("verifier:interruptible-2@2") == "verifier-interruptible-2-seed2"
    assert [lc.known(s) for s in ("verifier:sync@1", "length", "grm@0")] == [True, True, True]
    assert not any(lc.known(s) for s in ("verifier@", "verifier@x", "grm@-1", "verifier:nope", "nope@1"))


def test_a_segment_already_evaluated_is_not_trained_again(lc, tmp_path):
    assert not lc.evaluated(tmp_path, 20)
    (tmp_path / "eval-step20").mkdir()
    (tmp_path / "eval-step20" / "summary.json").write_text("{}")
    assert lc.evaluated(tmp_path, 20) and not lc.evaluated(tmp_path, 40)


def test_seeds_bootstrap_pools_seeds_and_keeps_their_spread(lc):
    prompts = [str(i) for i in range(40)]
    a = [{p: 1.0 for p in prompts}, {p: 0.0 for p in prompts}]  # two seeds that disagree completely
    b = [{p: 0.5 for p in prompts}]
    pooled = lc.seeds_bootstrap(a)
    assert pooled["mean"] == pytest.approx(0.5) and pooled["seeds"] == [2, 0] and pooled["prompts"] == 40
    lo, hi = pooled["ci95"]
    assert lo == 0.0 and hi == 1.0  # resampling the seeds alone spans both: prompts cannot narrow it
    diff = lc.seeds_bootstrap(a, b)
    assert diff["mean"] == pytest.approx(0.0) and diff["seeds"] == [2, 1]

    same = [{p: float(i % 2) for i, p in enumerate(prompts)}] * 3  # seeds that agree: only the prompts' spread
    lo, hi = lc.seeds_bootstrap(same)["ci95"]
    assert 0.25 < lo < 0.5 < hi < 0.75


def test_seeds_bootstrap_drops_prompts_some_run_left_unscored(lc):
    a = [{"x": 1.0, "y": None, "z": 0.0}, {"x": 1.0, "y": 1.0}]
    r = lc.seeds_bootstrap(a)
    assert r["prompts"] == 1 and r["mean"] == pytest.approx(1.0)
    assert lc.seeds_bootstrap([{"x": None}])["mean"] is None
