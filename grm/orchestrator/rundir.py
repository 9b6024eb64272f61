"""The run directory: resolved config, metrics.jsonl, samples.jsonl, TensorBoard, checkpoints."""

from __future__ import annotations

import json
import math
import os
import shutil
import time
from pathlib import Path
from typing import Any

import yaml

from grm.config.pipeline import PipelineSpec
from grm.orchestrator.errors import RunError


class RunDir:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.ckpt_root = path / "checkpoints"
        self._tb: Any = None

    @classmethod
    def create(cls, cfg: PipelineSpec, resume: str | None) -> "RunDir":
        if resume:
            path = Path(resume)
            if not (path / "config.resolved.yaml").exists():
                raise RunError(f"{path}: not a run directory (no config.resolved.yaml)")
        else:
            path = Path(cfg.out_dir) if cfg.out_dir else Path("runs") / f"{cfg.name}-{time.strftime('%Y%m%d-%H%M%S')}"
            if (path / "metrics.jsonl").exists():
                raise RunError(f"{path} already holds a run; use --resume {path} or another out_dir")
        path.mkdir(parents=True, exist_ok=True)
        rd = cls(path)
        tmp = path / "config.resolved.yaml.tmp"
        tmp.write_text(yaml.safe_dump(json.loads(cfg.model_dump_json()), sort_keys=False))
        os.replace(tmp, path / "config.resolved.yaml")
        return rd

    # --------------------------------------------------------------- logs
    def append(self, name: str, rows: list[dict[str, Any]]) -> None:
        with open(self.path / name, "a", encoding="utf-8") as fh:
            for r in rows:
                fh.write(json.dumps(_clean(r), ensure_ascii=False, default=str) + "\n")
            fh.flush()
            os.fsync(fh.fileno())

    def log_step(self, metrics: dict[str, Any], samples: list[dict[str, Any]]) -> None:
        self.append("samples.jsonl", samples)
        self.append("metrics.jsonl", [metrics])
        tb = self.tensorboard()
        if tb is not None:
            for k, v in metrics.items():
                if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
                    tb.add_scalar(k, v, metrics["step"])
            tb.flush()

    def tensorboard(self) -> Any:
        if self._tb is None:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:  # tensorboard is in the [train] extra
                self._tb = False
                return None
            self._tb = SummaryWriter(str(self.path / "tensorboard"))
        return self._tb or None

    def truncate_after(self, step: int) -> None:
        """Drop log lines of steps after ``step`` (they are redone on resume)."""
        for name in ("metrics.jsonl", "samples.jsonl"):
            f = self.path / name
            if not f.exists():
                continue
            raw = f.read_bytes()
            raw = raw[: raw.rfind(b"\n") + 1]
            keep = [ln for ln in raw.splitlines() if ln.strip() and json.loads(ln)["step"] <= step]
            tmp = f.with_suffix(".tmp")
            tmp.write_bytes(b"".join(ln + b"\n" for ln in keep))
            os.replace(tmp, f)

    def metrics(self) -> list[dict[str, Any]]:
        f = self.path / "metrics.jsonl"
        return [json.loads(x) for x in f.read_text().splitlines() if x.strip()] if f.exists() else []

    def write_report(self) -> Path:
        """report.md with a reward curve and phase timings (PNG) from metrics.jsonl."""
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        ms = self.metrics()
        steps = [m["step"] for m in ms]
        reward_keys = ["reward_mean"] + sorted(k for k in (ms[0] if ms else {}) if k.startswith("reward/"))
        fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.5))
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
            bottom = [b + v for b, v in zip(bottom, vals)]
        ax2.plot(steps, [m["seconds_step"] for m in ms], "k--", label="step wall")
        ax2.set_xlabel("step")
        ax2.set_title("seconds per phase (judging overlaps in async)")
        ax2.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(self.path / "curves.png", dpi=100)
        plt.close(fig)
        cols = ["step", "reward_mean", "kl", "entropy", "masked", "response_len_mean", "seconds_step", "judge_share"]
        lines = [f"# Run report: {self.path.name}", "", "![curves](curves.png)", "",
                 "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
        for m in ms:
            lines.append("| " + " | ".join(f"{m.get(c):.4g}" if isinstance(m.get(c), float) else str(m.get(c, "")) for c in cols) + " |")
        lines += ["", "Full per-step metrics: `metrics.jsonl`; every sample with critiques and rewards: `samples.jsonl`.", ""]
        (self.path / "report.md").write_text("\n".join(lines))
        return self.path / "report.md"

    # --------------------------------------------------------------- checkpoints
    def checkpoint_dir(self, step: int) -> Path:
        return self.ckpt_root / f"step-{step}"

    def latest_checkpoint(self) -> Path | None:
        done = [p for p in self.ckpt_root.glob("step-*") if (p / "COMPLETE").exists()]
        return max(done, key=lambda p: int(p.name.split("-")[1])) if done else None

    def prune(self, keep: int) -> None:
        done = sorted((p for p in self.ckpt_root.glob("step-*") if (p / "COMPLETE").exists()),
                      key=lambda p: int(p.name.split("-")[1]))
        for p in done[:-keep]:
            shutil.rmtree(p, ignore_errors=True)

    def close(self) -> None:
        if self._tb:
            self._tb.close()


def _clean(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _clean(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_clean(v) for v in x]
    return x
