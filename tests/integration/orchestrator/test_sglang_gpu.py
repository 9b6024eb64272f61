"""The stand-in run of test_sglang_standin.py against a real SGLang server: a 3-step async
arith-verifier run whose policy rolls out on SGLang (weights pushed from disk after each step).
After each sync the served weights version advances and the served log-probs of a fixed sequence
match the trainer's, so the test fails if weights never reach the server. Needs CUDA and the
sglang extra; skipped on CPU.

The server runs in fp32 so its log-probs can be compared with the trainer's; GPU kernels reduce in
another order than the CPU (and the trainer may use TF32), hence a tolerance of 1e-3 rather than
the stand-in's 1e-4. Each step must still move the log-probs by more than twice that."""

import importlib.util
import json
import sys

import pytest

from grm.process import free_port
from tests.conftest import run_grm
from tests.integration.orchestrator.sglang_checks import RUN_STEPS, WeightWatch, check_served_weights, probe_ids, run_args

pytestmark = [pytest.mark.slow, pytest.mark.gpu]
MODEL = "smollm2-135m-instruct"


def _has_gpu() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:
        return False


@pytest.fixture
def sglang_url(tmp_path):
    from grm.engines.openai_api import ServerProcess
    from grm.models import resolve_model

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = [
        sys.executable,
        "-m",
        "sglang.launch_server",
        "--model-path",
        resolve_model(MODEL),
        "--port",
        str(port),
        "--dtype",
        "float32",
        "--attention-backend",
        "torch_native",  # fp32 attention
        "--mem-fraction-static",
        "0.3",  # the trainer shares the GPU
    ]
    server = ServerProcess(cmd, url, timeout_s=900, log_path=str(tmp_path / "sglang.log"), health_path="/health")
    yield url
    server.stop()


@pytest.mark.skipif(not _has_gpu() or importlib.util.find_spec("sglang") is None, reason="needs a CUDA GPU and sglang")
@pytest.mark.timeout(2400)  # the `grm run` below is allowed 1800 s
def test_async_run_serves_each_synced_version_on_sglang(tmp_path, sglang_url):
    from grm.models import resolve_model

    out = tmp_path / "run"
    path = resolve_model(MODEL)
    with WeightWatch(sglang_url, probe_ids(path)) as watch:
        r = run_grm(*run_args(tmp_path, sglang_url), "pools.train.gpus=1", timeout=1800, env={"RAY_AUTH_MODE": "disabled"})
        assert r.returncode == 0, r.stderr[-4000:]
    ms = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines() if x.strip()]
    assert len(ms) == 3 and all(m["reward_mean"] is not None for m in ms)
    versions = {json.loads(x)["policy_version"] for x in (out / "samples.jsonl").read_text().splitlines()}
    assert 0 in versions and max(versions) >= 1 and versions <= {0, 1, 2}
    check_served_weights(sglang_url, out, watch, path, steps=RUN_STEPS, tol=1e-3)
