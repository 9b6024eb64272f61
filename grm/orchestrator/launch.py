"""``grm run``'s launch around the step loop: validate the pipeline, open the run directory, run
the judge gates before any role is placed, turn SIGINT/SIGTERM into a checkpointing stop, end the
local Ray at the end. The loop itself is ``grm.orchestrator.driver``.

A stop signal (often sent to the whole process group: ``timeout``, Slurm's ``scancel``, systemd,
container stops) is one flag: the step in flight is abandoned unless its training was submitted,
the trained steps are checkpointed, and the run ends with one line naming the checkpoint to resume
from, exit status ``128 + signal``. Ray's own processes run in a session of their own
(``grm.orchestrator.ray_head``), so the signal does not reach them. A signal during set-up (nothing
trained yet), or a second one, ends the run at once: the last complete checkpoint stays as it was."""

from __future__ import annotations

import signal
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from grm.config.resolve import LoadedPipeline, load_pipeline
from grm.orchestrator import cores
from grm.orchestrator.driver import Driver
from grm.orchestrator.errors import RunStopped
from grm.orchestrator.live import live_wanted
from grm.orchestrator.ray_head import stop_ray
from grm.orchestrator.recorder import Recorder
from grm.orchestrator.scheduler import Interrupted


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
    gate, ``grm.evaluation.gate``) runs before Ray places any role and stops the run by raising.
    Raises ``RunStopped`` after a stop signal."""
    loaded = load_pipeline(path, overrides)
    recorder = Recorder.create(loaded.spec, resume)
    if gates is not None:
        gates(loaded, recorder.path)
    recorder.start_logging(loaded.spec)  # W&B, when asked for: a missing package stops the run here
    stop = StopSignals()
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    key = None
    try:
        for s in handlers:
            signal.signal(s, stop)
        driver = stop.driver = Driver(loaded, recorder, address, live_wanted(no_live))
        key = driver.roles.cores_key
        if resume:
            driver.resume()
        return driver.run()
    except (Interrupted, KeyboardInterrupt):
        signum = stop.received[0] if stop.received else signal.SIGINT
        raise RunStopped(stopped(recorder, stop.received), signum) from None
    finally:
        stop.driver = None  # a signal now cuts the clean-up short: Ray's head ends once this process does
        try:
            if key is not None:  # the run's core ledger on this node (a remote node keeps its 512 bytes)
                cores.remove(key)
            stop_ray(address)
            recorder.close()  # after a stop too: the W&B run is finished, not left to look crashed
        except KeyboardInterrupt:
            pass
        finally:
            for s, h in handlers.items():
                signal.signal(s, h)


class StopSignals:
    """The run's SIGINT/SIGTERM handler. The first signal asks the driver to stop after the step in
    flight; a second one, or one during set-up or clean-up (nothing to save then), interrupts at once
    (``KeyboardInterrupt``). Python runs the handler between bytecodes, and a Ray wait looks for
    signals once a second: two signals within that second are one."""

    def __init__(self) -> None:
        self.received: list[int] = []
        self.driver: Driver | None = None

    def __call__(self, signum: int, _frame: Any) -> None:
        self.received.append(signum)
        if self.driver is None or len(self.received) > 1:
            raise KeyboardInterrupt()
        self.driver.scheduler.request_stop()
        print(f"\nstop requested ({signal.Signals(signum).name}): checkpointing after the step in flight", flush=True)


def stopped(recorder: Recorder, received: list[int]) -> str:
    """The run's last line after a stop: what stopped it, the trained steps, where to resume."""
    names = [signal.Signals(s).name for s in received[:2]] or ["an interrupt"]
    why = f"{names[0]} twice" if names[1:] == names[:1] else " then ".join(names)
    trained = len(recorder.metrics())
    latest = recorder.latest_checkpoint()
    if latest is None:
        return f"stopped by {why} after {trained} trained step(s), with no checkpoint: start again"
    redo = int(latest.name.split("-")[1]) < trained
    again = f" (steps after {latest.name} are trained again)" if redo else ""
    return f"stopped by {why} after {trained} trained step(s): continue from {latest.name} with --resume {recorder.path}{again}"
