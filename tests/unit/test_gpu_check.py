"""`make gpu-check --dry-run` on the CPU lists every check of scripts/gpu_check.py and runs nothing;
an unknown `--only` name is refused with the list of checks."""

import subprocess
import sys

from tests.conftest import ROOT

CHECKS = ["cuda", "placement-ppo", "async-torch", "nccl-weight-group", "eval-hf", "sglang"]


def test_dry_run_lists_every_check_and_runs_nothing():
    r = subprocess.run(["make", "-s", "gpu-check", "--dry-run"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    listed = [line.split(":", 1)[0] for line in r.stdout.splitlines() if line and not line.startswith(("#", "python"))]
    assert sorted(set(listed), key=CHECKS.index) == CHECKS
    assert "would run 6 checks" in r.stdout


def test_an_unknown_check_is_refused_with_the_list():
    r = subprocess.run(
        [sys.executable, "scripts/gpu_check.py", "--dry-run", "--only", "cuda,warp-drive"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2 and "warp-drive" in r.stderr and "nccl-weight-group" in r.stderr
    assert "Traceback" not in r.stderr
