"""Stopping a run the way schedulers do: SIGTERM to the whole process group (``timeout``, Slurm's
``scancel``, systemd, container stops), once and then twice, on an async run; each start resumes the
last, and the finished run has trained every prompt once, in order, within the staleness bound.

Real Ray, SmolLM2 policy, the rule verifier as the only judge, torch trainer; `grm run` is started
in a session of its own so that the group signalled holds it and whatever it started in its group."""

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import NamedTuple

import psutil
import pytest

from tests.conftest import NO_EXPORT, ROOT
from tests.integration.orchestrator.test_run import ENV, metrics

pytestmark = pytest.mark.slow

STEPS, PER_STEP, STALENESS = 4, 2, 1
OVERRIDES = [
    "schedule.mode=async",
    f"schedule.max_staleness={STALENESS}",
    f"algorithm.prompts_per_step={PER_STEP}",
    "algorithm.group_size=2",
    "rollout.max_new_tokens=8",
    "train.micro_batch_size=2",
    "train.backend.type=torch",
    f"train.steps={STEPS}",
    "checkpoint.every=0",  # the stop itself must write the checkpoint
    NO_EXPORT,
]
STOP_WITHIN_S = 20.0  # schedulers allow ~30 s between SIGTERM and SIGKILL


class Started(NamedTuple):
    process: psutil.Process
    cmdline: str
    session: int


class Run:
    """`grm run` in a session of its own, its output collected as it comes."""

    def __init__(self, out: Path, resume: bool = False) -> None:
        args = [sys.executable, "-m", "grm", "run", "builtin:arith-verifier", f"out_dir={out}", *OVERRIDES]
        self.out = out
        self.p = subprocess.Popen(
            args + (["--resume", str(out)] if resume else []),
            cwd=ROOT,
            env={**os.environ, **ENV},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        self.lines: list[str] = []
        self.reader = threading.Thread(target=lambda: self.lines.extend(self.p.stdout), daemon=True)  # type: ignore[arg-type]
        self.reader.start()

    @property
    def log(self) -> str:
        return "".join(self.lines)

    def wait_for_steps(self, n: int, timeout: float = 900) -> None:
        deadline = time.time() + timeout
        while len(metrics(self.out) if (self.out / "metrics.jsonl").exists() else []) < n:
            assert self.p.poll() is None, f"ended before step {n}:\n{self.log[-3000:]}"
            assert time.time() < deadline, f"no step {n} within {timeout} s:\n{self.log[-3000:]}"
            time.sleep(0.2)

    def stop(self, signals: int = 1) -> tuple[float, float, list[Started]]:
        """SIGTERM to the run's whole process group; with ``signals=2`` again once the run said it
        stops (Python runs a handler once for signals that arrive before it runs). Returns the
        seconds from the first and from the last signal to the exit, and every process the run had
        started."""
        started = []
        for c in psutil.Process(self.p.pid).children(recursive=True):
            try:
                started.append(Started(c, " ".join(c.cmdline()), os.getsid(c.pid)))
            except (psutil.NoSuchProcess, ProcessLookupError):
                pass
        t0 = t_last = time.monotonic()
        os.killpg(self.p.pid, signal.SIGTERM)
        if signals == 2:
            while "stop requested" not in self.log and time.monotonic() - t0 < STOP_WITHIN_S:
                time.sleep(0.05)
            t_last = time.monotonic()
            os.killpg(self.p.pid, signal.SIGTERM)
        self.p.wait(timeout=120)
        end = time.monotonic()
        self.reader.join(timeout=10)
        return end - t0, end - t_last, started


def alive(started: list[Started]) -> list[str]:
    out = []
    for s in started:
        try:
            if s.process.is_running() and s.process.status() != psutil.STATUS_ZOMBIE:
                out.append(f"{s.process.pid} {s.cmdline[:100]}")
        except psutil.NoSuchProcess:
            pass
    return out


def assert_stopped_cleanly(run: Run, took: float, started: list[Started]) -> str:
    """Exit 128 + SIGTERM within the limit, grm's own last line naming the checkpoint to resume from,
    no traceback, nothing of Ray's left: the last line is returned."""
    log = run.log
    assert run.p.returncode == 128 + signal.SIGTERM, log[-3000:]
    assert took < STOP_WITHIN_S, f"{took:.1f} s from SIGTERM to exit:\n{log[-3000:]}"
    assert "Traceback" not in log and "Failed to connect to GCS" not in log, log[-3000:]
    last = log.strip().splitlines()[-1]
    assert last.startswith("error: stopped by SIGTERM"), log[-3000:]
    assert f"--resume {run.out}" in last, last
    # Ray ran in a session of its own (the signal never reached it); none of it outlives the run
    heads = [s for s in started if "grm.orchestrator.ray_head" in s.cmdline]
    assert len(heads) == 1 and heads[0].session == heads[0].process.pid != run.p.pid, started
    ray_own = [s for s in started if "raylet" in s.cmdline or "gcs_server" in s.cmdline or s.cmdline.startswith("ray::")]
    assert len(ray_own) >= 3 and all(s.session == heads[0].session for s in ray_own), started
    deadline = time.monotonic() + max(0.0, STOP_WITHIN_S - took)
    while alive(started) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not alive(started), alive(started)
    return last


@pytest.fixture
def runs():
    """The runs a test starts; any still going at its end (a failed assertion) is killed, group and
    all (its Ray head then ends on its own: its pipe from the run closes)."""
    started: list[Run] = []
    yield started
    for run in started:
        if run.p.poll() is None:
            os.killpg(run.p.pid, signal.SIGKILL)
            run.p.wait()


def test_sigterm_to_the_group_stops_an_async_run_within_20_s_twice_then_resume_trains_every_prompt_once(tmp_path, runs):
    out = tmp_path / "run"
    # 1. one SIGTERM during step 2 (its rollouts were queued during step 1): step 2 is abandoned,
    #    step 1 checkpointed (checkpoint.every=0: the stop writes it)
    first = Run(out)
    runs.append(first)
    first.wait_for_steps(1)
    took, _, started = first.stop()
    last = assert_stopped_cleanly(first, took, started)
    assert "stop requested (SIGTERM)" in first.log and "writing a checkpoint at step 1" in first.log
    assert last.startswith("error: stopped by SIGTERM after 1 trained step(s): continue from step-1"), last
    assert (out / "checkpoints" / "step-1" / "COMPLETE").exists()
    print(f"one SIGTERM: {took:.1f} s to exit")

    # 2. resumed, then SIGTERM during step 3 and again once the run says it stops: the second ends
    #    it at once, whatever it cuts short (the step in flight, the checkpoint the first started, the
    #    clean-up), keeping the last complete checkpoint
    second = Run(out, resume=True)
    runs.append(second)
    second.wait_for_steps(2)
    took, after_second, started = second.stop(signals=2)
    last = assert_stopped_cleanly(second, took, started)
    assert after_second < 10.0, f"{after_second:.1f} s from the second SIGTERM to exit"
    assert "resuming" in second.log and "continue from step-" in last
    print(f"two SIGTERMs: {took:.1f} s to exit, {after_second:.1f} s after the second")

    # 3. resumed to the end
    third = Run(out, resume=True)
    runs.append(third)
    third.p.wait(timeout=900)
    third.reader.join(timeout=10)
    assert third.p.returncode == 0, third.log[-3000:]

    # every prompt trained once, in the stream's order, whatever was abandoned on the way
    from grm.config.resolve import load_pipeline
    from grm.data.prompts import prompt_stream

    loaded = load_pipeline("builtin:arith-verifier", OVERRIDES)
    stream = prompt_stream(loaded.spec, [j.spec for j in loaded.judges])
    expected = [[p.id for p in stream.take(PER_STEP)] for _ in range(STEPS)]
    rows = [json.loads(x) for x in (out / "samples.jsonl").read_text().splitlines() if x.strip()]
    trained = [[] for _ in range(STEPS)]
    for r in rows:
        if not trained[r["step"] - 1] or trained[r["step"] - 1][-1] != r["prompt_id"]:
            trained[r["step"] - 1].append(r["prompt_id"])
    assert trained == expected
    assert len({p for step in trained for p in step}) == STEPS * PER_STEP
    # the staleness bound held across both resumes, sample by sample
    ms = metrics(out)
    assert [m["step"] for m in ms] == list(range(1, STEPS + 1))
    assert [m["policy_version"] for m in ms] == list(range(STEPS))  # one batch a step, counted across resumes
    version = {m["step"]: m["policy_version"] for m in ms}
    assert all(0 <= version[r["step"]] - r["policy_version"] <= STALENESS for r in rows)
    assert all(m["staleness_max"] <= STALENESS for m in ms)
