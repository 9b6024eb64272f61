"""``grm run``'s launch around the step loop: validate the pipeline, open the run directory, run
the judge gates before any role is placed, route SIGINT/SIGTERM to a checkpointing stop, shut the
local Ray down at the end. The loop itself is ``grm.orchestrator.driver``."""

from __future__ import annotations

import signal
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from grm.config.resolve import LoadedPipeline, load_pipeline
from grm.orchestrator import cores
from grm.orchestrator.driver import Driver
from grm.orchestrator.live import live_wanted
from grm.orchestrator.recorder import Recorder


def run_pipeline(
    path: str,
    overrides: Sequence[str] = (),
    resume: str | None = None,
    address: str | None = None,
    no_live: bool = False,
    gates: Callable[[LoadedPipeline, Path], Any] | None = None,
) -> Path:
    """Validate, place and run a pipeline; returns the run directory. A live panel shows progress on
    a terminal unless ``no_live`` (``grm.orchestrator.live``). ``gates(loaded, run_dir)`` (the judge
    gate, ``grm.evaluation.gate``) runs before Ray places any role and stops the run by raising."""
    import ray

    loaded = load_pipeline(path, overrides)
    recorder = Recorder.create(loaded.spec, resume)
    if gates is not None:
        gates(loaded, recorder.path)
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    driver = None
    try:
        driver = Driver(loaded, recorder, address, live_wanted(no_live))
        # installed after ray.init, whose own SIGTERM handler would otherwise abort without a checkpoint
        for s in handlers:
            signal.signal(s, driver.request_stop)
        if resume:
            driver.resume()
        return driver.run()
    finally:
        for s, h in handlers.items():
            signal.signal(s, h)
        if driver is not None:  # the run's core ledger on this node (a remote node keeps its 512 bytes)
            cores.remove(driver.roles.cores_key)
        if ray.is_initialized() and not address:
            ray.shutdown()
