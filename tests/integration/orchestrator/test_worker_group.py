"""Multi-rank policy worker groups and two-node clusters in `grm run`: N DeepSpeed ranks (gloo)
reproduce the 1-rank run, `--dry-run` prints the placement a pipeline needs, and on a cluster of two
nodes a 2-rank policy puts a rank on each node while roles land on the nodes their pools ask for.

The runs are shared: one 1-rank reference for both ZeRO stages, one 2-rank run per stage (the ZeRO-2
one is also the straight run the two-node resume must end at; the ZeRO-3 one also exports its model
at its end, checked against its checkpoint), one cluster for both two-node tests."""

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import psutil
import pytest
import torch

from tests.conftest import ROOT, run_grm
from tests.integration.orchestrator.test_run import SMALL as QUICKSTART_SMALL

pytestmark = pytest.mark.slow

ENV = {"RAY_AUTH_MODE": "disabled", "RAY_DEDUP_LOGS": "0"}
# arith-verifier (rule judge, reference colocated with the policy), 8 sequences a step of different
# lengths, micro-batches of 2: one rank runs 4 micro-batches a step, each of two ranks runs 2
SMALL = [
    "algorithm.prompts_per_step=2",
    "algorithm.group_size=4",
    "rollout.max_new_tokens=16",
    "train.micro_batch_size=2",
    "train.steps=2",
    "schedule.mode=sync",
    "checkpoint.every=0",
    "checkpoint.keep=1",
    "pools.train.cpus=2",
]


def run(out: Path, *extra: str) -> None:
    r = run_grm("run", "builtin:arith-verifier", f"out_dir={out}", *SMALL, *extra, timeout=900, env=ENV)
    # a failed end-of-run export is a warning with exit status 0 (export_cli.export_finished_run)
    assert r.returncode == 0 and "model export failed" not in r.stderr, (r.stdout[-3000:], r.stderr[-5000:])


def metrics(out: Path) -> list[dict]:
    return [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines() if x.strip()]


def final_weights(out: Path) -> dict[str, torch.Tensor]:
    from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

    return get_fp32_state_dict_from_zero_checkpoint(str(out / "checkpoints" / "step-2" / "policy"), tag="state")


def samples(out: Path) -> list[tuple]:
    rows = [json.loads(x) for x in (out / "samples.jsonl").read_text().splitlines()]
    return [(s["step"], s["id"], s["response"], s["reward"]) for s in rows]


@pytest.fixture(scope="module")
def one_rank(tmp_path_factory):
    """The 1-rank run (ZeRO-3) that the 2-rank runs of both stages must reproduce. One reference
    serves both: on one rank ZeRO-2 and ZeRO-3 take the same steps (test_trainers.py,
    test_zero_stages_match_torch_backend; in this run 4e-5 relative and 3e-7 in the weights apart,
    as close as 1 and 2 ranks of one stage), and 1-rank ZeRO-2 runs are made in test_run.py."""
    out = tmp_path_factory.mktemp("one-rank") / "run"
    run(out, "train.backend.zero_stage=3")
    yield out
    shutil.rmtree(out.parent, ignore_errors=True)  # ~1.6 GB of checkpoint: not kept to the session's end


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    """``two_ranks(zero)``: the run directory of the 2-rank run at that ZeRO stage, made once."""
    runs: dict[int, Path] = {}

    def get(zero: int) -> Path:
        if zero not in runs:
            out = tmp_path_factory.mktemp(f"two-ranks-zero{zero}") / "run"
            export = ["checkpoint.export=true"] if zero == 3 else []  # RUN/model, for the export test
            run(out, f"train.backend.zero_stage={zero}", "train.backend.ranks=2", *export)
            runs[zero] = out
        return runs[zero]

    yield get
    for out in runs.values():
        shutil.rmtree(out.parent, ignore_errors=True)


@pytest.mark.timeout(2400)  # up to two `grm run`s in a row (the shared reference, this stage's 2 ranks)
# ZeRO-3 over two ranks (74 s, and the run its export test reads) runs in `make test-all`: the suite's
# 25-minute budget keeps ZeRO-2 here; one-rank ZeRO-3 is the reference both stages reproduce.
@pytest.mark.parametrize("zero", [2, pytest.param(3, marks=pytest.mark.extended)])
def test_two_ranks_reproduce_one_rank(one_rank, two_ranks, zero):
    """Same global batch and seed: the same rollouts, rewards, losses and KL (1e-3 relative) and the
    same final weights (1e-4 max abs) with one rank of 2 threads or two ranks of one thread each.

    The first step's rollouts come from the same weights and must be equal row for row. Later
    rollouts come from weights that differ by summation order (a gradient summed in one process or
    all-reduced from two halves, kernels on one thread or two): on a CPU without AVX-512 a sampled
    token flipped at a near tie in at least one of the 8 step-2 rows (the response then goes on
    differently; the same on the code before this test's last change). So a later step needs most
    of its rows equal, and its metrics are compared only when all are."""
    two = two_ranks(zero)
    placement = json.loads((two / "placement.json").read_text())
    assert {placement[f"policy#{r}"]["bundle"] for r in (0, 1)} == {0, 1}
    assert all(placement[f"policy#{r}"]["resources"]["CPU"] == 1.0 for r in (0, 1))
    a_rows, b_rows = samples(one_rank), samples(two)
    assert [r[:2] for r in b_rows] == [r[:2] for r in a_rows]  # same steps and sample ids, row for row
    first = min(r[0] for r in a_rows)
    assert [r for r in b_rows if r[0] == first] == [r for r in a_rows if r[0] == first]  # split across ranks, row for row
    diverged = {x[0] for x, y in zip(a_rows, b_rows, strict=True) if x != y}
    for step in {r[0] for r in a_rows} - {first}:
        pairs = [(x, y) for x, y in zip(a_rows, b_rows, strict=True) if x[0] == step]
        assert sum(x == y for x, y in pairs) * 2 > len(pairs), (step, pairs)
    for a, b in zip(metrics(one_rank), metrics(two), strict=True):
        if a["step"] in diverged:
            continue
        for key in ("reward_mean", "loss", "kl", "response_len_mean", "grad_norm"):
            assert b[key] == pytest.approx(a[key], rel=1e-3, abs=1e-6), (a["step"], key)
    wa, wb = final_weights(one_rank), final_weights(two)
    assert wa.keys() == wb.keys()
    worst = max(float((wa[k] - wb[k]).abs().max()) for k in wa)
    assert worst <= 1e-4, worst
    # The runs trained, and the ranks' difference is small beside what training moved: in L2 over
    # all weights (a max-abs ratio is not: Adam turns reduction-order noise in near-zero gradients
    # into updates of up to lr, measured 3.5e-6 against a largest move of 1.6e-5 on an AVX-512 CPU).
    start = {k: v for k, v in final_weights_at_start().items() if k in wa}
    moved = sum(float((wa[k] - v).pow(2).sum()) for k, v in start.items()) ** 0.5
    apart = sum(float((wa[k] - wb[k]).pow(2).sum()) for k in start) ** 0.5
    assert moved > 0 and apart < 0.1 * moved, (apart, moved)


def final_weights_at_start() -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    from grm.models import resolve_model

    path = Path(resolve_model("smollm2-135m-instruct"))
    return {k: v.float() for f in path.glob("*.safetensors") for k, v in load_file(str(f)).items()}


@pytest.mark.extended  # with the 2-rank ZeRO-3 run above
@pytest.mark.timeout(1500)  # the 2-rank ZeRO-3 run, if not made yet, and its export
def test_a_two_rank_zero3_run_exports_a_model_that_scores_as_its_checkpoint(two_ranks):
    """Issue #42: RUN/model, written at the run's end by what `grm export RUN` runs (export_policy;
    its command line is tested in test_export.py), loads offline with AutoModelForCausalLM and gives
    the log-probs of the checkpoint as grm loads it (fp32 masters of both ranks' ZeRO-3 partitions,
    gathered by zero_to_fp32) within 1e-5, and not the base model's."""
    from transformers import AutoModelForCausalLM

    from grm.evaluation.policy_source import resolve_policy
    from grm.models.checkpoints import apply_state, checkpoint_state
    from grm.models.loading import load_model
    from grm.models.weights import token_logprobs

    two = two_ranks(3)
    src = resolve_policy(str(two))
    assert src.checkpoint == (two / "checkpoints" / "step-2").resolve()
    assert (two / "model" / "COMPLETE").is_file() and "- step: 2 of 2" in (two / "model" / "README.md").read_text()
    exported = AutoModelForCausalLM.from_pretrained(two / "model", local_files_only=True).eval()
    assert exported.dtype == torch.float32
    mine, tok = load_model(src.model, "fp32")
    apply_state(mine, checkpoint_state(src.checkpoint), src.checkpoint)
    base, _ = load_model(src.model, "fp32")
    enc = tok("What is 17 + 25? The answer is 42.", return_tensors="pt")
    with torch.no_grad():
        lp = [token_logprobs(m, enc.input_ids, enc.attention_mask)[0] for m in (exported, mine, base)]
    same, trained = float((lp[0] - lp[1]).abs().max()), float((lp[0] - lp[2]).abs().max())
    print(f"max |log-prob| exported - checkpoint: {same:.3g}, exported - base: {trained:.3g}")
    assert same <= 1e-5 and trained > 1e-3, (same, trained)


def test_dry_run_prints_the_placement_and_what_is_missing():
    r = run_grm("run", "pipelines/cluster-example.yaml", "--dry-run", timeout=300, env=ENV)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-3000:]
    assert "pool 'train': 8 bundle(s) of {CPU=4, GPU=1}" in r.stdout
    assert "policy rank 7 + reference: bundle 7" in r.stdout
    assert "pool 'train' needs 8 GPU, pool 'judge' needs 2 GPU: 10 GPU in all, the cluster has 0" in r.stderr
    # launched SGLang servers: each on a bundle and its GPUs, by the rank that launches it
    r = run_grm(
        *("run", "pipelines/cluster-example.yaml", "--dry-run"),
        "policy.overrides=['engine={type: sglang, replicas: 9, tp: 1}']",
        timeout=300,
        env=ENV,
    )
    assert "sglang server 0 (tp 1): launched by policy rank 0, bundle 0, node ?, GPU(s) 0 of the bundle" in r.stdout
    assert "sglang server 8 (tp 1): launched by policy rank 0, bundle 0, node ?, GPU(s) 0 of the bundle" in r.stdout  # 9 on 8
    assert "sglang server 7 (tp 1): launched by policy rank 7, bundle 7" in r.stdout
    r = run_grm(
        "run", "builtin:arith-verifier", "--dry-run", "train.backend.ranks=2", "train.micro_batch_size=2", timeout=300, env=ENV
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert "policy rank 1 + reference: bundle 1, node" in r.stdout and "1 thread(s)" in r.stdout
    assert "numeric-answer" in r.stdout
    assert (ROOT / "pipelines" / "cluster-example.yaml").exists()


# ---------------------------------------------------------------------------------- two nodes
class Cluster(NamedTuple):
    address: str
    node_b_port: int
    """The worker node's raylet port, to find its process."""
    start_node_b: Callable[..., None]
    """Start the worker node (again), on ``node_b_port`` or the node-manager port given."""


RAY_START = [str(Path(sys.executable).with_name("ray")), "start", "--num-cpus=1", "--object-store-memory=400000000"]
"""A Ray node of 1 CPU (``ray start``), for the clusters of two nodes on this machine."""


def start_head(port: int, env: dict[str, str]) -> None:
    """Stop any Ray on this machine, then start a head node on ``port`` with resource ``node_a``."""
    subprocess.run([RAY_START[0], "stop", "--force"], env=env, capture_output=True)
    head = subprocess.run(
        [*RAY_START, "--head", f"--port={port}", '--resources={"node_a": 1}', "--include-dashboard=false"],
        env=env,
        capture_output=True,
        text=True,
    )
    assert head.returncode == 0, head.stderr


def node_b_command(port: int, manager_port: int) -> list[str]:
    """``ray start`` of the worker node (resource ``node_b``) joining the head on ``port``."""
    return [*RAY_START, f"--address=127.0.0.1:{port}", '--resources={"node_b": 1}', f"--node-manager-port={manager_port}"]


@pytest.fixture(scope="module")
def two_node_cluster():
    """Two Ray nodes of 1 CPU on this machine: the head with resource ``node_a``, a worker with
    ``node_b`` that a test may take down and start again. Asked for after every local run of the
    module: a `grm run` without ``--address`` joins a cluster that is up (Ray's ``ray.init()``)."""
    env = {**os.environ, **ENV}
    port = 6390 + os.getpid() % 50
    node_b_port = port + 100

    def start_node_b(manager_port: int = node_b_port) -> None:
        worker = subprocess.run(node_b_command(port, manager_port), env=env, capture_output=True, text=True)
        assert worker.returncode == 0, worker.stderr

    try:
        start_head(port, env)
        start_node_b()
        yield Cluster(f"127.0.0.1:{port}", node_b_port, start_node_b)
    finally:
        subprocess.run([RAY_START[0], "stop", "--force"], env=env, capture_output=True)


def read_cluster(address: str, expression: str) -> Any:
    """``expression`` (JSON-able) evaluated by a driver of its own on the cluster. Its answer comes
    on a marked line: Ray prints a node's death notice to every driver's stdout, whatever
    ``log_to_driver`` says, and one such notice once arrived as the last line."""
    code = f"import ray, json; ray.init(address='{address}', log_to_driver=False); print('ANSWER', json.dumps({expression}))"
    r = subprocess.run([sys.executable, "-c", code], env={**os.environ, **ENV}, capture_output=True, text=True)
    answers = [line for line in r.stdout.splitlines() if line.startswith("ANSWER ")]
    assert r.returncode == 0 and answers, (r.stdout[-3000:], r.stderr[-3000:])
    return json.loads(answers[-1].removeprefix("ANSWER "))


def alive_nodes(address: str) -> dict[str, list[str]]:
    """Node id -> its ``node_*`` resources, for the nodes Ray holds alive."""
    return read_cluster(
        address,
        "{n['NodeID']: sorted(k for k in n['Resources'] if k.startswith('node_')) for n in ray.nodes() if n['Alive']}",
    )


def wait_for(ready: Callable[[], bool], what: str, address: str, timeout_s: float = 180.0) -> None:
    deadline = time.time() + timeout_s
    while not ready():
        assert time.time() < deadline, f"waited {timeout_s:.0f} s for {what}; alive nodes: {alive_nodes(address)}"
        time.sleep(1.0)


@pytest.fixture(scope="module")
def two_ranks_zero2(two_ranks) -> Path:
    """The 2-rank ZeRO-2 run, for a test that also asks for the cluster (ask for this first)."""
    return two_ranks(2)


@pytest.mark.timeout(3000)  # up to three `grm run`s in a row (the 2-rank ZeRO-2 run, if not made yet)
@pytest.mark.extended
def test_two_node_cluster_one_rank_per_node_runs_and_resumes_to_the_same_result(tmp_path, two_ranks_zero2, two_node_cluster):
    """A pool of 2 nodes x 1 CPU holds a 2-rank policy, one rank per node (placement.json says
    which); a run stopped after step 1 and resumed ends where the straight 2-rank run ends (the
    module's, on one node: one thread a rank either way)."""
    common = [s for s in SMALL if not s.startswith(("pools.", "train.steps"))]
    common += ["pools.train={cpus: 1, nodes: 2}", "train.backend.ranks=2", "--address", two_node_cluster.address]

    def go(out: Path, steps: int, *extra: str) -> list[dict]:
        r = run_grm(
            "run", "builtin:arith-verifier", f"out_dir={out}", *common, f"train.steps={steps}", *extra, timeout=900, env=ENV
        )
        assert r.returncode == 0, (r.stdout[-3000:], r.stderr[-5000:])
        return metrics(out)

    parts = tmp_path / "parts"
    go(parts, 1)
    placement = json.loads((parts / "placement.json").read_text())
    assert placement["policy#0"]["node_id"] != placement["policy#1"]["node_id"]
    assert [placement[f"policy#{r}"]["bundle"] for r in (0, 1)] == [0, 1]
    resumed = go(parts, 2, "--resume", str(parts))
    assert [m["step"] for m in resumed] == [1, 2]
    straight = metrics(two_ranks_zero2)  # the same 2 steps, straight through
    assert samples(parts) == [s for s in samples(two_ranks_zero2) if s[0] <= 2]
    for key in ("reward_mean", "loss", "kl", "grad_norm"):
        assert resumed[1][key] == pytest.approx(straight[1][key], rel=1e-3, abs=1e-6), key


def two_node_pipeline(tmp_path: Path) -> Path:
    """The quickstart with its train pool on node_a and its judge pool on node_b."""
    pipeline = tmp_path / "two-node.yaml"
    text = (ROOT / "pipelines" / "quickstart.yaml").read_text()
    text = text.replace(
        "pools: {train: {cpus: 1}, judge: {cpus: 1}}",
        "pools: {train: {cpus: 1, resources: {node_a: 1}}, judge: {cpus: 1, resources: {node_b: 1}}}",
    )
    text = text.replace("builtin:smollm2-135m-instruct", str(ROOT / "policy" / "smollm2-135m-instruct.yaml"))
    text = text.replace("builtin:helpfulness-pointwise-logprob", str(ROOT / "judges" / "helpfulness-pointwise-logprob.yaml"))
    text = text.replace("builtin:numeric-answer", str(ROOT / "judges" / "numeric-answer.yaml"))
    pipeline.write_text(text)
    return pipeline


@pytest.mark.timeout(600)
def test_a_pool_ray_cannot_reserve_stops_the_run_naming_what_holds_its_resources(tmp_path, two_node_cluster):
    """An actor outside any placement group holds node_b: the judge pool waits its
    ``place_wait_s`` and the run stops (exit 2, no traceback) saying how much of each resource the
    cluster has, has free and lends to placement groups, and how much is taken outside them."""
    address = two_node_cluster.address
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import ray, time; ray.init(address='{address}', log_to_driver=False)\n"
            "@ray.remote(num_cpus=1, resources={'node_b': 1})\nclass Hold:\n    def ok(self): return 1\n"
            "h = Hold.remote(); ray.get(h.ok.remote()); print('held', flush=True); time.sleep(600)",
        ],
        env={**os.environ, **ENV},
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        pipeline = two_node_pipeline(tmp_path)
        r = run_grm(
            "run", str(pipeline), f"out_dir={tmp_path / 'run'}", *QUICKSTART_SMALL, "pools.judge.place_wait_s=3",
            "--address", address, timeout=300, env=ENV,
        )  # fmt: skip
    finally:
        holder.kill()
        holder.wait()
    err = r.stderr
    assert r.returncode == 2 and "Traceback" not in err, err[-3000:]
    assert "pool 'judge'" in err and "could not be placed within 3 s (pools.judge.place_wait_s)" in err, err[-3000:]
    assert "node_b: 1 needed, 1 in the cluster, 0 free, 0 held by placement groups, 1 taken outside any placement group" in err
    # the train pool was reserved first and holds node_a's CPU; the judge's CPU is the holder's
    assert "CPU: 1 needed, 2 in the cluster, 0 free, 1 held by placement groups ('grm-train' (CREATED" in err
    wait_for(lambda: read_cluster(address, "ray.available_resources()").get("node_b") == 1.0, "node_b to be free", address)


@pytest.mark.timeout(2400)
@pytest.mark.extended
def test_two_node_cluster_places_roles_by_pool_resources_and_survives_losing_a_node(tmp_path, two_node_cluster):
    """Roles land on the nodes their pools ask for; when the judge's node dies mid-step the run
    checkpoints the trained steps and stops naming the lost role; with the node back it resumes."""
    env = {**os.environ, **ENV}
    address = two_node_cluster.address
    pipeline = two_node_pipeline(tmp_path)
    out = tmp_path / "two-node"
    common = [*QUICKSTART_SMALL, "train.steps=2", "schedule.mode=sync", "train.backend.type=torch", "checkpoint.every=1"]
    args = [sys.executable, "-m", "grm", "run", str(pipeline), f"out_dir={out}", *common, "--address", address]
    p = subprocess.Popen(args, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.time() + 600
        while time.time() < deadline and not (out / "checkpoints" / "step-1" / "COMPLETE").exists():
            time.sleep(0.2)
        placement = json.loads((out / "placement.json").read_text())
        nodes = alive_nodes(address)
        assert nodes[placement["policy"]["node_id"]] == ["node_a"]
        assert nodes[placement["judge:helpfulness-pointwise-logprob"]["node_id"]] == ["node_b"]

        # node_b goes away during step 2: its raylet and every worker under it
        raylet = next(
            q
            for q in psutil.process_iter(["cmdline"])
            if q.info["cmdline"]
            and "raylet" in q.info["cmdline"][0]
            and f"--node_manager_port={two_node_cluster.node_b_port}" in q.info["cmdline"]
        )
        for q in [raylet, *raylet.children(recursive=True)]:
            q.kill()
        log, _ = p.communicate(timeout=600)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode not in (0, None), log[-3000:]
    tail = log.strip().splitlines()[-1]
    # the node's death (or, before Ray has noticed it, its actor's) names the judge's role
    assert "judge:helpfulness-pointwise-logprob lost" in tail and "pool 'judge'" in tail, log[-3000:]
    assert "writing a checkpoint at step 1" in log, log[-3000:]
    assert "resume from step-1" in tail and "Traceback" not in log, log[-3000:]

    # the node comes back once Ray has seen it go, as an operator replacing a node would (Ray marks a
    # killed raylet dead ~10 s later; until then the old and the new node_b both count as alive), and
    # at another node-manager port: back at the dead node's address, Ray 2.60's first reservation on
    # it could fail to connect (the GCS's channel to that address still backing off) and its
    # resources then stayed booked for good, so the resumed judge pool was never placed (1 CI run
    # in 3; standalone, with the old driver exiting 12 s after the loss: stuck in 3 runs of 3 at
    # the same port, placed at once 16 times in 16 at a new one)
    wait_for(lambda: ["node_b"] not in alive_nodes(address).values(), "Ray to mark node_b dead", address)
    two_node_cluster.start_node_b(two_node_cluster.node_b_port + 1)  # the node is back: the run resumes and completes
    wait_for(lambda: ["node_b"] in alive_nodes(address).values(), "node_b to rejoin", address)
    r = run_grm("run", str(pipeline), f"out_dir={out}", *common, "--address", address, "--resume", str(out), timeout=900, env=ENV)
    assert r.returncode == 0, (r.stdout[-2000:], r.stderr[-4000:])
    assert [m["step"] for m in metrics(out)] == [1, 2]
    rows = [json.loads(x) for x in (out / "samples.jsonl").read_text().splitlines()]
    assert len(rows) == 2 * 4 and len({(x["step"], x["prompt_id"], x["response"]) for x in rows}) == len(rows)
