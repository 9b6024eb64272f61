"""A real ``grm run`` whose judge is served: two replicas, each launching its own llama.cpp server
(llama-cpp-python, the serving extra) with the SmolLM2 GGUF, on the judge's pool; one server is
SIGKILLed mid-run. The run completes with every sample judged once, the dead server started again
(``judge_usage/<judge>/<replica>/server_restarts``) and each replica's server-reported usage in the
metrics. ``make test-serving``."""

import json
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest
import yaml

pytest.importorskip("llama_cpp.server", reason="needs the serving extra: make test-serving")

from tests.conftest import NO_EXPORT, ROOT  # noqa: E402
from tests.integration.orchestrator.test_run import ENV, SMALL, metrics  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.serving]
JUDGE = "served-pointwise"
LAUNCH = [
    *(sys.executable, "-m", "llama_cpp.server", "--model", "{gguf}", "--host", "127.0.0.1", "--port", "{port}"),
    *("--n_threads", "1", "--n_ctx", "2048", "--logits_all", "true", "--model_alias", "smollm2-135m-instruct"),
]


def servers() -> list[psutil.Process]:
    return [p for p in psutil.process_iter(["cmdline"]) if "llama_cpp.server" in " ".join(p.info["cmdline"] or [])]


def test_a_run_with_a_served_judge_survives_a_killed_server(tmp_path):
    spec = yaml.safe_load((ROOT / "judges" / "helpfulness-pointwise-logprob.yaml").read_text())
    spec["name"] = JUDGE
    spec["engine"] = {"type": "openai", "launch": LAUNCH, "launch_timeout_s": 120, "concurrency": 2, "backoff_s": 0.2}
    judge = tmp_path / "served.yaml"
    judge.write_text(yaml.safe_dump(spec))
    out = tmp_path / "run"
    args = [
        *(sys.executable, "-m", "grm", "run", "builtin:quickstart", f"out_dir={out}", *SMALL),
        f"judges.0.spec={judge}",
        "judges.0.replicas=2",
        "schedule.stream_prompts=1",  # two calls per step, so both replicas judge
        *("train.steps=3", "schedule.mode=sync", "train.backend.type=torch", "checkpoint.every=0", NO_EXPORT),
    ]
    before = {p.pid for p in servers()}
    p = subprocess.Popen(args, cwd=ROOT, env={**os.environ, **ENV}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.time() + 600
        while time.time() < deadline and p.poll() is None and not (out / "metrics.jsonl").exists():
            time.sleep(0.2)
        assert p.poll() is None, "the run ended before step 1 was logged"
        launched = [s for s in servers() if s.pid not in before]
        assert len(launched) == 2, [s.info["cmdline"] for s in launched]  # one server per replica
        launched[1].send_signal(signal.SIGKILL)  # during step 2
        log, _ = p.communicate(timeout=900)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 0, log[-4000:]
    ms = metrics(out)
    assert [m["step"] for m in ms] == [1, 2, 3]
    assert sum(m["masked"] for m in ms) == 0, log[-4000:]
    samples = [json.loads(x) for x in (out / "samples.jsonl").read_text().splitlines()]
    assert len(samples) == 3 * 4 and all(s["judges"][JUDGE]["score"] is not None for s in samples)  # 0 lost, 0 masked
    items = [sum(m.get(f"judge_items/{JUDGE}/{i}", 0) for m in ms) for i in range(2)]
    assert sum(items) == 3 * 4 and min(items) > 0, items  # both replicas judged, each sample once
    counters = ("requests", "server_restarts", "prompt_tokens")
    usage = {(i, k): sum(m.get(f"judge_usage/{JUDGE}/{i}/{k}", 0) for m in ms) for i in range(2) for k in counters}
    assert usage[0, "requests"] > 0 and usage[1, "requests"] > 0 and usage[0, "prompt_tokens"] > 0, usage
    assert usage[0, "server_restarts"] + usage[1, "server_restarts"] == 1, usage  # the killed one, started again
    assert sum(m[f"judge_cost/{JUDGE}/usage_server_restarts"] for m in ms) == 1
    assert not [s for s in servers() if s.pid not in before], "launched servers outlived the run"
    print(json.dumps({f"{i}/{k}": v for (i, k), v in usage.items()}), f"items {items}")  # for the record (-s)
