"""Two Ray nodes that share no filesystem for the run directory: the worker node's processes run in
a mount namespace of their own where the directory the runs are written to is an empty tmpfs
(``unshare -m``, as root). A 2-rank policy with one rank per node checkpoints (the hidden rank's
ZeRO shard reaches the driver's run directory through the object store) and resumes (the driver's
checkpoint reaches that rank the same way), ending where the same run straight through ends."""

import json
import os
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import run_grm
from tests.integration.orchestrator.test_worker_group import ENV, RAY_START, SMALL, metrics, node_b_command, samples, start_head

pytestmark = [pytest.mark.slow, pytest.mark.extended]


def _can_unshare() -> bool:
    if shutil.which("unshare") is None or os.geteuid() != 0:
        return False
    return subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode == 0


@pytest.fixture(scope="module")
def hidden_cluster(tmp_path_factory):
    """(address, runs directory): the head node (``node_a``) sees the runs directory; the worker
    (``node_b``) sees an empty tmpfs in its place."""
    if not _can_unshare():
        pytest.skip("needs root and unshare -m to give a Ray node a filesystem of its own")
    runs = tmp_path_factory.mktemp("runs")
    env = {**os.environ, **ENV}
    port = 6440 + os.getpid() % 50
    try:
        start_head(port, env)
        worker = node_b_command(port, port + 100)
        hide = f"mount -t tmpfs none {shlex.quote(str(runs))} && exec {shlex.join(worker)}"
        b = subprocess.run(
            ["unshare", "-m", "--propagation", "private", "sh", "-c", hide],
            env=env,
            capture_output=True,
            text=True,
        )
        assert b.returncode == 0, b.stderr
        yield f"127.0.0.1:{port}", runs
    finally:
        subprocess.run([RAY_START[0], "stop", "--force"], env=env, capture_output=True)


@pytest.mark.timeout(2400)
def test_checkpoints_and_resume_cross_nodes_that_share_no_filesystem(hidden_cluster):
    address, runs = hidden_cluster
    common = [s for s in SMALL if not s.startswith(("pools.", "train.steps", "checkpoint."))]
    common += ["pools.train={cpus: 1, nodes: 2}", "train.backend.ranks=2", "--address", address, "checkpoint.export=false"]

    def go(out: Path, steps: int, *extra: str) -> list[dict]:
        args = ("run", "builtin:arith-verifier", f"out_dir={out}", *common, f"train.steps={steps}", *extra)
        r = run_grm(*args, timeout=900, env=ENV)
        assert r.returncode == 0, (r.stdout[-3000:], r.stderr[-5000:])
        return metrics(out)

    parts = runs / "parts"
    go(parts, 1, "checkpoint.every=1")
    placement = json.loads((parts / "placement.json").read_text())
    assert placement["policy#0"]["node_id"] != placement["policy#1"]["node_id"]
    ckpt = parts / "checkpoints" / "step-1" / "policy"
    # both ranks' optimizer shards are in the driver's checkpoint, though one rank could not see it
    assert [len(list(ckpt.rglob(f"zero_pp_rank_{r}_*optim_states.pt"))) for r in (0, 1)] == [1, 1], sorted(ckpt.rglob("*"))
    assert not list((parts / "checkpoints" / "step-1").glob(".driver-sees-*"))
    resumed = go(parts, 2, "checkpoint.every=1", "--resume", str(parts))
    assert [m["step"] for m in resumed] == [1, 2]
    straight = runs / "straight"  # the same two steps without a stop, on the same cluster
    whole = go(straight, 2, "checkpoint.every=0")
    assert samples(parts) == samples(straight)
    for key in ("reward_mean", "loss", "kl", "grad_norm"):
        assert resumed[1][key] == pytest.approx(whole[1][key], rel=1e-3, abs=1e-6), key
