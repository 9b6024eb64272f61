"""Episodes inside `grm run` (real Ray, SmolLM2 policy and judge, DeepSpeed-free torch trainer): a
user's environment file named by path, run by two environment workers on a pool of their own, two
policy turns per episode with a simulated user's reply between them, and an environment that raises
on some rows: those episodes end `env_error`, counted, and the run goes on. A run stopped by SIGTERM
while its episodes wait on a tool resumes with no episode trained twice or lost."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import ROOT, run_grm

pytestmark = pytest.mark.slow

ENV = {"RAY_AUTH_MODE": "disabled", "RAY_DEDUP_LOGS": "0"}

ENV_FILE = '''
import os
import time

from grm.envs.base import Observation, Reset, Step


class TwoTurns:
    """Asks once more after the first answer; the second answer ends the episode. Row seeds that
    are 3 mod 4 raise at reset (a broken environment). Its ``pid`` signal says which process ran it;
    with ``marker``, its first step leaves a file there (row seed, time) and then takes ``tool_s``
    seconds (a slow tool)."""

    def __init__(self, marker=None, tool_s=0.0):
        self.marker, self.tool_s = marker, tool_s

    def reset(self, row):
        if row["seed"] % 4 == 3:
            raise RuntimeError("this row breaks the environment")
        self.turns, self.seed = 0, row["seed"]
        return Reset([{"role": "user", "content": row["prompt"]}])

    def step(self, message):
        self.turns += 1
        if self.turns == 1:
            if self.marker:
                open(os.path.join(self.marker, f"{self.seed}-{time.time_ns()}"), "w").close()
                time.sleep(self.tool_s)
            return Step([Observation("user", "Check your work, then give only the final number.")])
        signals = {"success": float("7" in message.content), "pid": float(os.getpid())}
        return Step([], done=True, signals=signals, final_answer=message.content)
'''


def test_a_run_trains_on_two_turn_episodes_and_a_broken_environment_costs_only_its_episodes(tmp_path):
    (tmp_path / "two_turns.py").write_text(ENV_FILE)
    pipeline = tmp_path / "episodes.yaml"
    pipeline.write_text(
        "name: episodes\nseed: 0\npools: {train: {cpus: 1}, judge: {cpus: 1}}\n"
        "policy: {spec: builtin:smollm2-135m-instruct, pool: train}\n"
        "judges:\n  - {spec: builtin:helpfulness-pointwise-logprob, pool: judge}\n"
        "data: {prompts: builtin:calc-train, reference_field: null, shuffle: false, limit: 4}\n"
        "env: {type: python, path: two_turns.py:TwoTurns, max_turns: 3, max_total_tokens: 1024, credit: process,\n"
        "      pool: judge, workers: 2}\n"
        "algorithm: {type: grpo, group_size: 2, prompts_per_step: 4, kl: {coef: 0}}\n"
        "rollout: {max_new_tokens: 12}\n"
        "train: {steps: 1, micro_batch_size: 2, backend: {type: torch}}\n"
        "faults: {max_masked_fraction: 1.0}\n"
    )
    out = tmp_path / "run"
    r = run_grm("run", str(pipeline), f"out_dir={out}", "--no-live", timeout=900, env=ENV)
    assert r.returncode == 0, (r.stdout[-3000:], r.stderr[-5000:])
    samples = [json.loads(x) for x in (out / "samples.jsonl").read_text().splitlines()]
    assert len(samples) == 8
    broken = [s for s in samples if s["trajectory"]["task"]["row"]["seed"] % 4 == 3]
    whole = [s for s in samples if s not in broken]
    assert len(broken) == 2 and all(s["trajectory"]["end_reason"] == "env_error" for s in broken)
    for s in whole:
        t = s["trajectory"]
        roles = [turn["role"] for turn in t["turns"]]
        assert roles == ["assistant", "user", "assistant"] and t["end_reason"] == "done", roles
        assert s["response"] == t["final_answer"] == t["turns"][-1]["content"]  # the judge read the final answer
        # every policy turn kept its own ids, one log-prob each, and the version that sampled it
        for turn in t["turns"][::2]:
            assert len(turn["token_ids"]) == len(turn["logprobs"]) > 0 and turn["policy_version"] == s["policy_version"]
        assert t["turns"][1]["token_ids"]  # the user's reply is in the context (masked out of the loss)
    metrics = json.loads((out / "metrics.jsonl").read_text().splitlines()[0])
    assert metrics["env/end/env_error"] == pytest.approx(0.25) and metrics["env/end/done"] == pytest.approx(0.75)
    assert metrics["env/turns"] == pytest.approx(1.5)  # two turns in each of 6 episodes, none in the 2 broken ones
    assert "env/success" in metrics
    # the environments ran on the two workers (their own processes on the judge's pool), not beside the engine
    placement = json.loads((out / "placement.json").read_text())
    workers = {placement[f"env#{i}"]["pid"] for i in range(2)}
    assert {placement[f"env#{i}"]["pool"] for i in range(2)} == {"judge"} and len(workers) == 2
    ran = {int(s["trajectory"]["signals"]["pid"]) for s in whole}
    assert ran == workers and placement["policy"]["pid"] not in ran


RESUME_PIPELINE = (
    "name: episodes-resume\nseed: 0\npools: {train: {cpus: 1}, envs: {cpus: 1}}\n"
    "policy: {spec: builtin:smollm2-135m-instruct, pool: train}\n"
    "judges:\n  - {spec: builtin:env-success}\n"
    "data: {prompts: builtin:calc-train, reference_field: null, shuffle: false, limit: 4}\n"
    "env: {type: python, path: two_turns.py:TwoTurns, max_turns: 3, max_total_tokens: 1024, pool: envs,\n"
    "      kwargs: {marker: MARKER, tool_s: 3.0}}\n"
    "algorithm: {type: grpo, group_size: 2, prompts_per_step: 2, kl: {coef: 0}}\n"
    "rollout: {max_new_tokens: 8}\n"
    "train: {steps: 2, micro_batch_size: 2, backend: {type: torch}}\n"
    "schedule: {mode: sync}\ncheckpoint: {every: 1, keep: 1}\nfaults: {max_masked_fraction: 1.0}\n"
)


def test_sigterm_while_episodes_wait_on_a_tool_then_resume_trains_every_episode_once(tmp_path):
    """Step 2's episodes are stopped between their two turns (their environment's tool is running);
    the resumed run trains step 2 again from the step-1 checkpoint: step 1's episodes are kept as
    they were, step 2's appear once, and the four prompts are each trained once, in data order."""
    (tmp_path / "two_turns.py").write_text(ENV_FILE)
    marker = tmp_path / "markers"
    marker.mkdir()
    pipeline = tmp_path / "resume.yaml"
    pipeline.write_text(RESUME_PIPELINE.replace("MARKER", str(marker)))
    out = tmp_path / "run"
    args = [sys.executable, "-m", "grm", "run", str(pipeline), f"out_dir={out}", "--no-live"]
    p = subprocess.Popen(args, cwd=ROOT, env={**os.environ, **ENV}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    metrics_file = out / "metrics.jsonl"
    deadline = time.time() + 600
    while not (metrics_file.exists() and metrics_file.read_text().strip()) and time.time() < deadline and p.poll() is None:
        time.sleep(0.2)
    before = set(os.listdir(marker))
    while set(os.listdir(marker)) == before and time.time() < deadline and p.poll() is None:
        time.sleep(0.1)  # a step-2 episode's tool is now running: its episode is between its turns
    assert p.poll() is None, "the run ended before step 2's episodes reached their tool"
    p.send_signal(signal.SIGTERM)
    log, _ = p.communicate(timeout=120)
    assert p.returncode == 128 + signal.SIGTERM, log[-4000:]
    assert f"stopped by SIGTERM after 1 trained step(s): continue from step-1 with --resume {out}" in log, log[-3000:]
    kept = (out / "samples.jsonl").read_text().splitlines()
    assert kept and all(json.loads(x)["step"] == 1 for x in kept)  # nothing of the stopped step was written
    r = run_grm("run", str(pipeline), f"out_dir={out}", "--no-live", "--resume", str(out), timeout=900, env=ENV)
    assert r.returncode == 0, (r.stdout[-3000:], r.stderr[-5000:])
    samples = [json.loads(x) for x in (out / "samples.jsonl").read_text().splitlines()]
    assert (out / "samples.jsonl").read_text().splitlines()[: len(kept)] == kept
    ids = [(s["step"], s["id"]) for s in samples]
    assert len(ids) == len(set(ids)) == 8 and sorted({s["step"] for s in samples}) == [1, 2]
    order = [s["trajectory"]["task"]["row"]["seed"] for s in samples[::2]]  # each prompt's group of 2
    assert len(set(order)) == 4  # every prompt once: none trained twice, none lost
    assert [json.loads(x)["step"] for x in metrics_file.read_text().splitlines()] == [1, 2]
    for s in samples:  # a row whose seed is 3 mod 4 breaks its environment (TwoTurns)
        t = s["trajectory"]
        if t["task"]["row"]["seed"] % 4 == 3:
            assert t["end_reason"] == "env_error"
        else:
            assert t["end_reason"] == "done" and [u["role"] for u in t["turns"]] == ["assistant", "user", "assistant"]


def test_async_episodes_of_the_next_step_take_turns_while_this_steps_tools_run(tmp_path):
    """schedule async: step 2's episodes start beside step 1's (one turn loop for both rollout
    calls), so their first turn is generated and their tool started while step 1's 4 s tools still
    run; every episode is trained once, step 2's with the version its first turn had (0)."""
    (tmp_path / "two_turns.py").write_text(ENV_FILE)
    marker = tmp_path / "markers"
    marker.mkdir()
    pipeline = tmp_path / "stream.yaml"
    pipeline.write_text(
        RESUME_PIPELINE.replace("MARKER", str(marker))
        .replace("tool_s: 3.0", "tool_s: 4.0")
        .replace("schedule: {mode: sync}", "schedule: {mode: async, max_staleness: 1}")
        .replace("checkpoint: {every: 1, keep: 1}", "checkpoint: {every: 0}")
    )
    out = tmp_path / "run"
    r = run_grm("run", str(pipeline), f"out_dir={out}", "--no-live", timeout=900, env=ENV)
    assert r.returncode == 0, (r.stdout[-3000:], r.stderr[-5000:])
    samples = [json.loads(x) for x in (out / "samples.jsonl").read_text().splitlines()]
    assert len({(s["step"], s["id"]) for s in samples}) == len(samples) == 8
    step_of = {s["trajectory"]["task"]["row"]["seed"]: s["step"] for s in samples}
    started: dict[int, list[int]] = {1: [], 2: []}  # each episode's tool start (ns), by step
    for name in os.listdir(marker):
        seed, ns = name.split("-")
        started[step_of[int(seed)]].append(int(ns))
    assert len(started[1]) + len(started[2]) == 6 and started[2]  # one prompt of four breaks its environment
    assert min(started[2]) < max(started[1]) + 4e9  # step 2's tools began while step 1's still ran
    for s in samples:
        turns = [t for t in s["trajectory"]["turns"] if t["role"] == "assistant"]
        if turns:
            assert s["policy_version"] == turns[0]["policy_version"] == 0
            assert {t["policy_version"] for t in turns} <= {0, 1}


AGENT_FILE = '''
import openai


def two_turns(row, base_url, model):
    """The user's own agent loop: asks, then asks once more, through the OpenAI client."""
    client = openai.OpenAI(base_url=base_url, api_key="none")
    messages = [{"role": "user", "content": row["prompt"]}]
    for follow_up in ("Check your work, then give only the final number.", None):
        reply = client.chat.completions.create(model=model, messages=messages).choices[0].message
        messages.append({"role": "assistant", "content": reply.content})
        if follow_up is None:
            return {"final_answer": reply.content, "signals": {"success": float("7" in reply.content)}}
        messages.append({"role": "user", "content": follow_up})
'''


def test_a_users_openai_client_agent_loop_trains_through_the_policy_endpoint(tmp_path):
    (tmp_path / "agent.py").write_text(AGENT_FILE)
    pipeline = tmp_path / "agent.yaml"
    pipeline.write_text(
        "name: agent\nseed: 0\npools: {train: {cpus: 1}}\n"
        "policy: {spec: builtin:smollm2-135m-instruct, pool: train}\n"
        "judges:\n  - {spec: builtin:env-success}\n"
        "data: {prompts: builtin:calc-train, reference_field: null, shuffle: false, limit: 2}\n"
        "env: {type: agent, path: agent.py:two_turns, max_turns: 3, max_total_tokens: 1024}\n"
        "algorithm: {type: grpo, group_size: 2, prompts_per_step: 2, kl: {coef: 0}}\n"
        "rollout: {max_new_tokens: 8}\n"
        "train: {steps: 1, micro_batch_size: 2, backend: {type: torch}}\n"
        "faults: {max_masked_fraction: 1.0}\n"
    )
    out = tmp_path / "run"
    r = run_grm("run", str(pipeline), f"out_dir={out}", "--no-live", timeout=900, env=ENV)
    assert r.returncode == 0, (pipeline.read_text(), r.stdout[-3000:], r.stderr[-5000:])
    samples = [json.loads(x) for x in (out / "samples.jsonl").read_text().splitlines()]
    assert len(samples) == 4
    for s in samples:
        t = s["trajectory"]
        assert t["end_reason"] == "done" and [u["role"] for u in t["turns"]] == ["assistant", "user", "assistant"]
        assert s["response"] == t["final_answer"] == t["turns"][-1]["content"]
        for turn in t["turns"][::2]:
            assert len(turn["token_ids"]) == len(turn["logprobs"]) > 0 and turn["policy_version"] == s["policy_version"]
        assert t["turns"][1]["token_ids"] and "success" in t["signals"]
    metrics = json.loads((out / "metrics.jsonl").read_text().splitlines()[0])
    assert metrics["env/end/done"] == 1.0 and metrics["env/turns"] == 2.0
