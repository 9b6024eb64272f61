"""The recorder: the run directory (resolved config, metrics.jsonl, samples.jsonl, TensorBoard,
report, checkpoints); what goes into it each step is made in ``grm.orchestrator.step_rows``."""

from __future__ import annotations

import json
import math
import secrets
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from grm.base import atomic_dir, atomic_write_bytes, atomic_write_text, discard_dir
from grm.config.names import run_dir
from grm.config.pipeline import PipelineSpec
from grm.data.prompts import PromptStream
from grm.jsonl import append_jsonl, read_jsonl
from grm.orchestrator.canary import report_lines
from grm.orchestrator.checkpoints import CHECKPOINT, complete_checkpoints, driver_state, failure_words
from grm.orchestrator.ckpt_transfer import mark, merge_staged, pack, unpack
from grm.orchestrator.errors import RunError
from grm.orchestrator.handles import PolicyHandle
from grm.orchestrator.heldout_file import report_lines as heldout_lines
from grm.orchestrator.resume import CONFIG, check_resumable, cut_after, record_start
from grm.orchestrator.step_rows import cost_table, step_line
from grm.orchestrator.wandb_log import WandbLog
from grm.report_files import figure_png, markdown_table, new_figure
from grm.run_format import stamp


class Recorder:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.ckpt_root = path / "checkpoints"
        self._tb: Any = None
        self.wandb: WandbLog | None = None
        """``logging.wandb``'s run, once ``start_logging`` made it."""

    def start_logging(self, cfg: PipelineSpec) -> None:
        """Open ``logging.wandb``'s run (continued on resume); nothing without it."""
        if cfg.logging.wandb is not None:
            self.wandb = WandbLog(cfg.logging.wandb, self.path, json.loads(cfg.model_dump_json()))

    @classmethod
    def create(cls, cfg: PipelineSpec, resume: str | None) -> Recorder:
        """The run directory of a first start (``config.resolved.yaml`` written) or of a resume: checked
        against the first start before anything is written (``grm.orchestrator.resume``), then its
        checkpoints settled and this start recorded as ``config.resume-K.yaml``."""
        now = json.loads(cfg.model_dump_json())
        if resume:
            path = Path(resume)
            if not (path / CONFIG).is_file():
                raise RunError(f"{path}: not a run directory (no {CONFIG})")
            check_resumable(path, now)
            rd = cls(path)
            latest = rd.latest_checkpoint()
            if latest is None:
                raise RunError(f"{path}: no complete checkpoint to resume from (checkpoints/step-N with COMPLETE)")
            driver_state(latest)  # a checkpoint or log of a format this grm cannot read: refused before any write
            rd.metrics()
            record_start(path, now, latest)
            return rd
        path = run_dir(cfg.name, cfg.out_dir, time.strftime("%Y%m%d-%H%M%S"))  # the name was checked when the YAML loaded
        ckpts = path / "checkpoints"
        logged = any((path / f).exists() for f in ("metrics.jsonl", "heldout.jsonl"))  # a reading is a start's first write
        if logged or (ckpts.is_dir() and any(CHECKPOINT.fullmatch(p.name) for p in ckpts.iterdir())):
            raise RunError(f"{path} already holds a run; use --resume {path} or another out_dir")
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise RunError(f"{path}: cannot create the run directory ({e.strerror or e})") from None
        record_start(path, now, None)
        return cls(path)

    # --------------------------------------------------------------- logs
    def write_placement(self, info: dict[str, Any]) -> None:
        """placement.json: node, pid, resources and pool of every role."""
        try:
            atomic_write_text(self.path / "placement.json", json.dumps(info, indent=2, default=str))
        except OSError as e:
            raise RunError(f"{self.path / 'placement.json'}: cannot write ({e.strerror or e})") from None

    def log_step(self, metrics: dict[str, Any], samples: list[dict[str, Any]]) -> None:
        """samples.jsonl, then metrics.jsonl (its line is what marks the step logged), then TensorBoard."""
        for kind, rows in (("samples", samples), ("metrics", [metrics])):
            path = self.path / f"{kind}.jsonl"
            try:
                append_jsonl(path, [stamp(kind, r) for r in rows])  # each line carries its format (grm.run_format)
            except OSError as e:
                raise RunError(f"{path}: cannot write step {metrics['step']} ({e.strerror or e})") from None
            except ValueError as e:  # json_safe: a value nested past what JSON readers take back (no policy text reaches it)
                raise RunError(f"{path}: cannot write step {metrics['step']}: {e}") from None
        try:
            tb = self.tensorboard()
            if tb is not None:
                for k, v in metrics.items():
                    if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
                        tb.add_scalar(k, v, metrics["step"])
                tb.flush()
        except OSError as e:
            raise RunError(f"{self.path / 'tensorboard'}: cannot write step {metrics['step']} ({e.strerror or e})") from None
        if self.wandb is not None:
            self.wandb.log(metrics)

    def tensorboard(self) -> Any:
        if self._tb is None:
            try:
                self._tb = Scalars(self.path / "tensorboard")
            except ImportError:  # tensorboard is in the [train] extra
                self._tb = False
                return None
        return self._tb or None

    def truncate_after(self, step: int) -> None:
        """Cut the log lines of steps after ``step`` (they are redone on resume), in place: the held-out
        check's readings too (a reading of weights the resume throws away)."""
        for name in ("heldout.jsonl", "metrics.jsonl", "samples.jsonl"):
            cut_after(self.path / name, step)

    def metrics(self) -> list[dict[str, Any]]:
        return read_jsonl(self.path / "metrics.jsonl", repair=False, check=step_line, own=True)

    def write_report(self) -> Path:
        """report.md with a reward curve and phase timings (PNG) from metrics.jsonl."""
        ms = self.metrics()
        steps = [m["step"] for m in ms]
        reward_keys = ["reward_mean"] + sorted(k for k in (ms[0] if ms else {}) if k.startswith("reward/"))
        fig, (ax1, ax2) = new_figure(nrows=1, ncols=2, figsize=(10, 3.5))
        for k in reward_keys:
            ax1.plot(steps, [m.get(k) if m.get(k) is not None else float("nan") for m in ms], marker="o", label=k)
        ax1.set_xlabel("step")
        ax1.set_title("rewards")
        ax1.legend(fontsize=7)
        phases = ["seconds_rollout", "seconds_judging", "seconds_reference", "seconds_training", "seconds_sync"]
        bottom = [0.0] * len(ms)
        for k in phases:
            vals = [m.get(k) or 0.0 for m in ms]
            ax2.bar(steps, vals, bottom=bottom, label=k.removeprefix("seconds_"))
            bottom = [b + v for b, v in zip(bottom, vals, strict=True)]
        ax2.plot(steps, [m["seconds_step"] for m in ms], "k--", label="step wall")
        ax2.set_xlabel("step")
        ax2.set_title("seconds per phase (judging overlaps in async)")
        ax2.legend(fontsize=7)
        try:
            atomic_write_bytes(self.path / "curves.png", figure_png(fig))
        except OSError as e:
            raise RunError(f"{self.path / 'curves.png'}: cannot write ({e.strerror or e})") from None
        cols = ["step", "reward_mean", "kl", "entropy", "masked", "response_len_mean", "seconds_step", "judge_share"]
        cells = ([f"{m.get(c):.4g}" if isinstance(m.get(c), float) else str(m.get(c, "")) for c in cols] for m in ms)
        lines = [f"# Run report: {self.path.name}", "", "![curves](curves.png)", "", *markdown_table(cols, cells)]
        lines += cost_table(ms)
        lines += ["", *report_lines(self.path, ms)]  # judge gate and canary, when the run has them
        lines += heldout_lines(self.path)  # the held-out check, when the run has one
        lines += ["Full per-step metrics: `metrics.jsonl`; every sample with critiques and rewards: `samples.jsonl`.", ""]
        try:
            atomic_write_text(self.path / "report.md", "\n".join(lines))
        except OSError as e:
            raise RunError(f"{self.path / 'report.md'}: cannot write ({e.strerror or e})") from None
        return self.path / "report.md"

    # --------------------------------------------------------------- checkpoints
    def checkpoint_dir(self, step: int) -> Path:
        return self.ckpt_root / f"step-{step}"

    def latest_checkpoint(self) -> Path | None:
        done = complete_checkpoints(self.ckpt_root)
        return done[-1] if done else None

    def how_to_resume(self) -> str:
        latest = self.latest_checkpoint()
        if latest is None:
            return "no checkpoint was written yet (checkpoint.every): start again"
        return f"resume from {latest.name} with --resume {self.path} once the cluster can hold every pool"

    def prune(self, keep: int, written: Path) -> None:
        """Delete the complete checkpoints older than the newest ``keep``, never ``written`` (the one
        just written) nor the newest; each goes out of sight in one rename before it is deleted."""
        for p in complete_checkpoints(self.ckpt_root)[:-keep]:
            if p != written:
                try:
                    discard_dir(p)
                except OSError as e:
                    raise RunError(
                        f"{p}: cannot delete this old checkpoint ({e.strerror or e}); {written.name} is written"
                    ) from None

    def checkpoint(
        self,
        step: int,
        policy: PolicyHandle,
        stream: PromptStream,
        untrained_prompts: int,
        keep: int,
        anchors: dict[str, Any] | None = None,
        get: Callable[[Any], Any] | None = None,
    ) -> None:
        """``checkpoints/step-N``: the policy's state and where the prompt stream stands, the prompts
        taken for steps not yet trained given back, and the previous-anchor store (``anchors.json``,
        when a judge uses one). Written atomically (an existing step-N is replaced only once the new
        one is complete); older ones pruned. ``get`` waits for the policy's save (``ray.get``)."""
        import ray

        get = get or ray.get
        try:
            with atomic_dir(self.checkpoint_dir(step)) as tmp:
                token = secrets.token_hex(8)
                marker = mark(tmp, token)  # a rank that cannot see it sends its files (no shared filesystem)
                shipped = get(policy.save.remote(str(tmp), token))
                if shipped:
                    unpack(shipped, tmp)
                    merge_staged(tmp)
                marker.unlink()
                state = {"step": step, "stream": stream.state_before(untrained_prompts)}
                (tmp / "driver.json").write_text(json.dumps(stamp("checkpoint", state)))
                if anchors is not None:
                    (tmp / "anchors.json").write_text(json.dumps(anchors, ensure_ascii=False))
        except (OSError, ray.exceptions.RayTaskError) as e:
            cause = getattr(e, "cause", None) or e  # what the policy actor's save raised
            latest = self.latest_checkpoint()
            kept = f"{latest.name} is intact and resumable" if latest is not None else "there is no earlier checkpoint"
            lost = policy.diagnose(e) if isinstance(e, ray.exceptions.RayTaskError) and hasattr(policy, "diagnose") else None
            why = str(lost) if lost is not None else failure_words(cause, latest, self.ckpt_root)
            raise RunError(f"{self.checkpoint_dir(step)}: writing the checkpoint failed ({why}); {kept}") from None
        self.prune(keep, self.checkpoint_dir(step))

    def resume_state(self, policy: PolicyHandle, get: Callable[[Any], Any] | None = None) -> dict[str, Any]:
        """Load the latest complete checkpoint into ``policy``, drop log lines of later steps;
        returns its driver state (step, stream, and the previous-anchor store when one was saved)
        with ``policy_version``, the version the policy's load reports. ``get`` waits for the
        policy's load (``ray.get``)."""
        import ray

        ckpt = self.latest_checkpoint()
        if ckpt is None:
            raise RunError(f"{self.path}: no complete checkpoint to resume from")
        state = driver_state(ckpt)
        get = get or ray.get
        token = secrets.token_hex(8)
        try:
            marker = mark(ckpt, token)
        except OSError as e:
            raise RunError(f"{ckpt}: cannot write in the checkpoint ({e.strerror or e})") from None
        try:
            # a rank that cannot see the checkpoint (no shared filesystem) gets its files sent
            shipped = None if get(policy.sees.remote(str(ckpt), token)) else pack(ckpt)
            state["policy_version"] = get(policy.load.remote(str(ckpt), shipped, token))
        except ray.exceptions.RayTaskError as e:  # a checkpoint that does not fit the model, or a rank that failed
            lost = policy.diagnose(e) if hasattr(policy, "diagnose") else None
            cause = getattr(e, "cause", None) or e
            text = str(lost) if lost is not None else f"{type(cause).__name__}: {str(cause).strip()[:300]}"
            raise RunError(f"{ckpt}: cannot load the checkpoint ({text.splitlines()[0] if text else ''})") from None
        finally:
            marker.unlink(missing_ok=True)
        self.truncate_after(state["step"])
        print(f"resuming {self.path} from {ckpt.name}", flush=True)
        return state

    def close(self) -> None:
        """TensorBoard's writer and the W&B run closed (again: nothing)."""
        if self._tb:
            self._tb.close()
            self._tb = False
        if self.wandb is not None:
            self.wandb.close()
            self.wandb = None


class Scalars:
    """TensorBoard scalars through tensorboard's own event writer: what torch's ``SummaryWriter``
    does inside, without torch in the driver."""

    def __init__(self, directory: Path) -> None:
        from tensorboard.summary.writer.event_file_writer import EventFileWriter

        self.writer = EventFileWriter(str(directory))

    def add_scalar(self, tag: str, value: float, step: int) -> None:
        from tensorboard.compat.proto.event_pb2 import Event
        from tensorboard.compat.proto.summary_pb2 import Summary

        summary = Summary(value=[Summary.Value(tag=tag, simple_value=float(value))])
        self.writer.add_event(Event(wall_time=time.time(), step=step, summary=summary))

    def flush(self) -> None:
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


# --------------------------------------------------------------------------- what a step records
