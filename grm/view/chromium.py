"""Headless Chromium for `grm view`'s page: the rendered DOM and screenshots, used by the
integration test and docs/screenshots.py. Uses the system's browser (Debian: ``apt-get install
chromium``); nothing is downloaded."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

INSTALL = "apt-get update && apt-get install -y chromium"
NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
# No sandbox (tests run as root in containers), no GPU, and none of the browser's own network
# traffic (updates, sync, QUIC probes) next to the page under test.
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    "--run-all-compositor-stages-before-draw",
]


def find_chromium() -> str | None:
    for name in NAMES:
        path = shutil.which(name)
        if path:
            return path
    return None


def _run(url: str, extra: list[str], budget_ms: int, timeout: float) -> subprocess.CompletedProcess[str]:
    exe = find_chromium()
    if exe is None:
        raise FileNotFoundError(f"no Chromium found (install it: {INSTALL})")
    with tempfile.TemporaryDirectory(prefix="grm-chromium-") as profile:
        return subprocess.run(
            [exe, *FLAGS, f"--user-data-dir={profile}", f"--virtual-time-budget={budget_ms}", *extra, url],
            capture_output=True,
            text=True,
            timeout=timeout,
        )


def dump_dom(url: str, *, budget_ms: int = 8000, timeout: float = 120) -> str:
    """The page's DOM after its scripts ran (virtual time waits for pending fetches)."""
    r = _run(url, ["--dump-dom"], budget_ms, timeout)
    if r.returncode != 0:
        raise RuntimeError(f"chromium --dump-dom {url} failed ({r.returncode}): {r.stderr[-2000:]}")
    return r.stdout


def screenshot(
    url: str, png: Path, *, width: int = 1400, height: int = 1000, budget_ms: int = 8000, timeout: float = 120
) -> Path:
    png = Path(png).resolve()
    r = _run(url, [f"--screenshot={png}", f"--window-size={width},{height}"], budget_ms, timeout)
    if r.returncode != 0 or not png.exists():
        raise RuntimeError(f"chromium --screenshot {url} failed ({r.returncode}): {r.stderr[-2000:]}")
    return png
