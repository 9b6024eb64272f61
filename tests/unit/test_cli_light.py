"""`import grm` and `grm --help` stay light: no torch, ray, transformers, deepspeed or sglang."""

import subprocess
import sys
import time

HEAVY = ["torch", "ray", "transformers", "deepspeed", "sglang", "datasets"]


def test_import_and_help_do_not_import_heavy_modules():
    code = (
        "import sys, grm, grm.cli, grm.config, grm.judges\n"
        "from grm.cli import build_parser\n"
        "try:\n    build_parser().parse_args(['--help'])\nexcept SystemExit:\n    pass\n"
        f"print([m for m in {HEAVY!r} if m in sys.modules])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stdout


def test_help_is_fast():
    best = min(_time_help() for _ in range(3))
    assert best < 1.0, f"grm --help took {best:.2f} s"


def _time_help() -> float:
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "grm", "--help"], capture_output=True, text=True)
    assert r.returncode == 0 and "validate" in r.stdout and "judge" in r.stdout
    return time.perf_counter() - t0
