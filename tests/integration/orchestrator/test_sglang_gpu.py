"""A 2-step quickstart variant with the policy rolling out on SGLang (launched by the engine on the
pool's GPU, weights pushed from disk each step). Needs CUDA and the sglang extra; skipped on CPU."""

import importlib.util
import json

import pytest

from tests.conftest import run_grm

pytestmark = [pytest.mark.slow, pytest.mark.gpu]


def _has_gpu() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:
        return False


@pytest.mark.skipif(not _has_gpu() or importlib.util.find_spec("sglang") is None, reason="needs a CUDA GPU and sglang")
@pytest.mark.timeout(2000)  # the `grm run` below is allowed 1800 s
def test_quickstart_two_steps_on_sglang(tmp_path):
    out = tmp_path / "run"
    r = run_grm(
        "run",
        "builtin:quickstart",
        f"out_dir={out}",
        "train.steps=2",
        "pools.train.gpus=1",
        "policy.overrides=[engine={type: sglang, tp: 1, mem_fraction_static: 0.3}]",
        timeout=1800,
        env={"RAY_AUTH_MODE": "disabled"},
    )
    assert r.returncode == 0, r.stderr[-4000:]
    ms = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines() if x.strip()]
    assert len(ms) == 2 and all(m["reward_mean"] is not None for m in ms)
    versions = {json.loads(x)["policy_version"] for x in (out / "samples.jsonl").read_text().splitlines()}
    assert versions <= {0, 1} and 0 in versions
