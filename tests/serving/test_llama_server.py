"""The openai engine against a real OpenAI-compatible server: llama-cpp-python serving the SmolLM2
GGUF from the model store. Optional group (llama-cpp-python compiles for ~7 min at install):

    make test-serving
"""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("llama_cpp.server", reason="needs the serving extra: make test-serving")

from grm.engines.base import GenerationRequest as Req  # noqa: E402
from grm.engines.base import SamplingParams  # noqa: E402
from grm.engines.openai_api import OpenAIEngine, ServerProcess  # noqa: E402
from grm.process import free_port  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.serving]
MODEL = "smollm2-135m-instruct"
ENV = {**os.environ, "HF_HUB_OFFLINE": "1"}


def server_command(port: int, gguf: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "llama_cpp.server",
        "--model",
        gguf,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--n_threads",
        "1",
        "--n_ctx",
        "4096",
        "--logits_all",
        "true",
        "--model_alias",
        MODEL,
    ]


@pytest.fixture(scope="module")
def gguf():
    from grm.models import gguf_path

    return str(gguf_path(MODEL))


@pytest.fixture(scope="module")
def server(gguf):
    port = free_port()
    s = ServerProcess(server_command(port, gguf), f"http://127.0.0.1:{port}/v1", timeout_s=120)
    s.port = port
    yield s
    s.stop()


@pytest.fixture(scope="module")
def engine(server):
    from transformers import AutoTokenizer

    from grm.models import resolve_model

    return OpenAIEngine(server.base_url, MODEL, tokenizer=AutoTokenizer.from_pretrained(resolve_model(MODEL)), concurrency=2)


def _chat(text):
    return Req(messages=[{"role": "user", "content": text}])


def test_generation_greedy_is_deterministic_and_counts_tokens(engine):
    sp = SamplingParams(temperature=0.0, max_new_tokens=16)
    a = engine.generate([_chat("What is the capital of France?")], sp)[0]
    b = engine.generate([_chat("What is the capital of France?")], sp)[0]
    assert a.text.strip() and a.text == b.text
    assert 0 < a.n_tokens <= 16 and a.prompt_tokens > 10
    c = engine.generate([Req(text="The capital of France is")], SamplingParams(temperature=0.0, max_new_tokens=3))[0]
    assert "Paris" in c.text


def test_n_samples_seeded_are_reproducible_and_distinct(engine):
    sp = SamplingParams(n=3, temperature=1.0, max_new_tokens=12, seed=7)
    r = [_chat("Write a word.")]
    first, again = engine.generate(r, sp), engine.generate(r, sp)
    # llama.cpp reuses the cached prompt between requests, which moves logits by float noise, so a
    # rerun under the same seed agrees on how each sample starts, not always on where it stops.
    assert [g.text.split()[:1] for g in first] == [g.text.split()[:1] for g in again]
    assert len({g.text for g in first}) > 1


def test_stop_string_cuts_text(engine):
    g = engine.generate([Req(text="Count: 1, 2, 3, 4, 5,")], SamplingParams(temperature=0.0, max_new_tokens=16, stop=("8",)))[0]
    assert "8" not in g.text and "7" in g.text and g.finish_reason == "stop"


def test_logprob_scoring_ranks_paris(engine):
    (row,) = engine.score_continuations([Req(text="The capital of France is")], [[" Paris", " Berlin"]])
    # " Berlin" (-6.9 under the hf engine) is not among the 20 listed: unknown, not a number
    assert row[0] > -3.0 and row[1] is None


def _judge_yaml(tmp: Path, engine_block: str, name="served-pairwise") -> Path:
    p = tmp / f"{name}.yaml"
    p.write_text(f"""name: {name}
mode: pairwise
model: {MODEL}
engine: {engine_block}
template: builtin:pairwise-preference
prefill: "Verdict: [["
sampling: {{n: 1, temperature: 0.0, max_new_tokens: 1}}
parser: {{type: logprob, prefix: "", candidates: ["A", "B"], critique: false, range: null}}
position: {{swap: true, combine: margin}}
""")
    return p


def _grm(*args, timeout=600):
    return subprocess.run([sys.executable, "-m", "grm", *args], capture_output=True, text=True, env=ENV, timeout=timeout)


def test_judge_try_and_eval_end_to_end_through_server(server, tmp_path):
    judge = _judge_yaml(tmp_path, f"{{type: openai, base_url: '{server.base_url}', concurrency: 2}}")
    sample = tmp_path / "s.json"
    sample.write_text(json.dumps({"prompt": "What is 2+2?", "responses": ["4", "5"]}))
    r = _grm("judge", "try", str(judge), "--sample", str(sample), "--json")
    assert r.returncode == 0, r.stderr
    (out,) = json.loads(r.stdout)
    assert out["masked"] is False and out["score"] is not None
    r = _grm("eval", str(judge), "--data", "builtin:arith-pairs", "--limit", "6", "--out", str(tmp_path / "ev"))
    assert r.returncode == 0, r.stderr
    m = json.loads((tmp_path / "ev" / "metrics.json").read_text())["judges"]["served-pairwise"]
    assert m["items"] == 6 and m["parse_failure_rate"] == 0.0


def _server_pids() -> set[str]:
    out = subprocess.run(["pgrep", "-f", "llama_cpp.server"], capture_output=True, text=True).stdout
    return set(out.split())


def test_launched_server_is_started_health_checked_and_stopped(server, tmp_path):
    cmd = [a if a != "0" else "{port}" for a in server_command(0, "{gguf}")]
    judge = _judge_yaml(tmp_path, "{type: openai, launch: " + json.dumps(cmd) + "}", name="launched")
    sample = tmp_path / "s.json"
    sample.write_text(json.dumps({"prompt": "What is 2+2?", "responses": ["4", "5"]}))
    before = _server_pids()
    r = _grm("judge", "try", str(judge), "--sample", str(sample), "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)[0]["score"] is not None
    time.sleep(0.5)
    assert _server_pids() == before  # the launched server went away with the command


def test_server_killed_mid_eval_then_restarted_eval_resumes(gguf, tmp_path):
    port = free_port()
    url = f"http://127.0.0.1:{port}/v1"
    judge = _judge_yaml(tmp_path, f"{{type: openai, base_url: '{url}', max_retries: 2, backoff_s: 0.2}}", name="flaky")
    out = tmp_path / "ev"
    srv = ServerProcess(server_command(port, gguf), url, timeout_s=120)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "grm",
            "eval",
            str(judge),
            "--data",
            "builtin:arith-pairs",
            "--limit",
            "16",
            "--batch-size",
            "2",
            "--out",
            str(out),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
    )
    results = out / "results.jsonl"
    deadline = time.time() + 300
    while time.time() < deadline and (not results.exists() or len(results.read_text().splitlines()) < 4):
        time.sleep(0.2)
    srv.stop()  # the server dies mid-eval
    _, err = proc.communicate(timeout=120)
    assert proc.returncode != 0 and "Traceback" not in err and "gave up" in err, err
    done = len(results.read_text().splitlines())
    assert 4 <= done < 16
    srv = ServerProcess(server_command(port, gguf), url, timeout_s=120)  # back on the same port
    try:
        r = _grm("eval", str(judge), "--data", "builtin:arith-pairs", "--limit", "16", "--batch-size", "2", "--out", str(out))
    finally:
        srv.stop()
    assert r.returncode == 0, r.stderr
    ids = [json.loads(x)["item_id"] for x in results.read_text().splitlines()]
    assert len(ids) == 16 and len(set(ids)) == 16


def test_a_score_range_reads_like_the_hf_engine_ten_included(engine):
    """1..10 after "Score: ": 10 is two SmolLM2 tokens, read token by token (1, then 0 after it)."""
    from grm.engines.hf import HFEngine

    req = Req(
        messages=[
            {"role": "user", "content": "Rate the answer 4 to 'What is 2+2?' from 1 to 10."},
            {"role": "assistant", "content": "Critique: correct.\nScore: "},
        ],
        continue_final=True,
    )
    cands = [str(k) for k in range(1, 11)]
    (served,) = engine.score_continuations([req], [cands])
    hf = HFEngine(MODEL, dtype="fp32")
    (local,) = hf.score_continuations([req], [cands])
    assert all(v is not None for v in served), served
    # the store's GGUF is quantised (98 MB for 135M weights): single-token readings differ from
    # fp32 by up to ~0.2 nats; 10, read in two requests, no more than they do
    assert max(abs(a - b) for a, b in zip(served, local, strict=True)) < 0.3, (served, local)
