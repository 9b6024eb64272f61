"""`grm eval --policy --env` end to end on the real SmolLM2-135M-Instruct: three held-out calc
episodes through the command line, the trajectories, summary and report they leave, and a re-run
that resumes without loading the model. About 30 s on a 2-core CPU with OMP_NUM_THREADS=1."""

import json

import pytest

from grm.data.trajectory import Trajectory
from grm.envs.calc import SPLITS
from tests.conftest import run_grm

pytestmark = pytest.mark.slow

N, TOKENS = 3, 96
ENV = {"OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}


def test_three_held_out_calc_episodes_through_grm_eval(tmp_path):
    out = tmp_path / "ev"
    args = ["eval", "--policy", "smollm2-135m-instruct", "--env", "calc", "--split", "heldout"]
    args += ["--limit", str(N), "--max-new-tokens", str(TOKENS), "--out", str(out)]
    r = run_grm(*args, env=ENV, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "success [95% CI]" in r.stdout and "end reasons" in r.stdout

    lines = [json.loads(x) for x in (out / "responses.jsonl").read_text().splitlines()]
    trajs = [Trajectory.from_dict(x) for x in lines]
    assert [t.id for t in trajs] == [f"held_out-{i}" for i in range(N)] and {x["side"] for x in lines} == {"policy"}
    assert [t.task.row["seed"] for t in trajs] == list(SPLITS["held_out"][:N])
    for t in trajs:
        assert t.end_reason is not None and "success" in t.signals  # calc judges every finished turn
        mine = [turn for turn in t.turns if turn.role == "assistant"]
        assert mine and all(0 < len(turn.token_ids) <= TOKENS and len(turn.logprobs) == len(turn.token_ids) for turn in mine)
        view = t.training_view()  # the policy's own tokens, masked as trained
        assert sum(view.loss_mask) == sum(len(turn.token_ids) for turn in mine)

    s = json.loads((out / "summary.json").read_text())
    sm = s["sides"]["policy"]
    successes = sum(t.signals["success"] for t in trajs)
    assert sm["episodes"] == N and sm["success"]["n"] == N and sm["success"]["successes"] == successes
    lo, hi = sm["success"]["ci95"]
    assert 0.0 <= lo <= successes / N <= hi <= 1.0 and hi - lo > 0.3  # three episodes: a wide interval
    assert sum(sm["end_reasons"].values()) == N
    assert sm["turns"]["mean"] == pytest.approx(sum(t.metadata["turns"] for t in trajs) / N)
    assert "success [95% CI]" in (out / "report.md").read_text()

    again = run_grm(*args, env=ENV, timeout=120)
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"resuming: {N} of {N} episodes" in again.stderr and "loading" not in again.stderr
    assert (out / "responses.jsonl").read_text().count("\n") == N  # nothing run twice
