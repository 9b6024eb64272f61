import os
import subprocess
import sys
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parents[1]


NO_EXPORT = "checkpoint.export=false"
"""What tests' `grm run`s pass unless they give ``checkpoint.export`` themselves: the model export
ending a completed run (~540 MB of SmolLM2 fp32, seconds) is checked by one test, in
tests/integration/orchestrator/test_run.py. ``run_grm`` adds it; a test starting `grm run` its own
way adds it to its arguments."""


def run_grm(*args: str, timeout: float = 600, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run the real `grm` command line in a subprocess (`grm run PIPELINE` with ``NO_EXPORT``)."""
    if args[:1] == ("run",) and args[1:2] and not args[1].startswith("-"):
        if not any(a.startswith("checkpoint.export=") for a in args):
            args = (*args, NO_EXPORT)
    return subprocess.run(
        [sys.executable, "-m", "grm", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        cwd=ROOT,
    )


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """`make test-fast` selects by marker (-m "not slow"): a test under tests/integration or
    tests/serving (real models, Ray, DeepSpeed, servers) that forgot the marker would run there."""
    unmarked = []
    for item in items:
        try:
            area = item.path.relative_to(ROOT / "tests").parts[0]
        except ValueError:
            continue
        if area in ("integration", "serving") and item.get_closest_marker("slow") is None:
            unmarked.append(item.nodeid)
    if unmarked:
        raise pytest.UsageError(
            "mark these pytest.mark.slow (pytestmark = pytest.mark.slow in the module):\n  " + "\n  ".join(unmarked)
        )
