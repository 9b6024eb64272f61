"""``logging.wandb``: a run's step metrics to Weights & Biases, beside metrics.jsonl and TensorBoard.

The W&B run lives in RUN_DIR/wandb/ and its id in RUN_DIR/wandb-run.json, so ``--resume`` continues
the same W&B run. Metrics are logged against their own ``step`` key (``define_metric``), not W&B's
internal counter: a resume redoes the steps after its checkpoint, and those are logged again at
their step numbers rather than refused as going backwards. Only the driver imports ``wandb``, and
only when the pipeline asks for it.
"""

from __future__ import annotations

import json
import math
import os
import secrets
from pathlib import Path
from typing import Any

from grm.base import atomic_write_text, regular_file_bytes
from grm.config.run_options import WandbSpec
from grm.orchestrator.errors import RunError

RUN_FILE = "wandb-run.json"


def require_wandb() -> Any:
    """The ``wandb`` module, or one RunError naming the extra that installs it."""
    try:
        import wandb
    except ImportError:
        raise RunError("logging.wandb needs the wandb package: pip install 'grm-rlaif[wandb]'") from None
    return wandb


class WandbLog:
    """One W&B run for one grm run directory (first start or resume)."""

    def __init__(self, spec: WandbSpec, run_dir: Path, config: dict[str, Any]) -> None:
        wandb = require_wandb()
        os.environ.setdefault("WANDB_SILENT", "true")  # grm prints its own line; W&B's banner is noise on a panel
        record = run_dir / RUN_FILE
        raw = regular_file_bytes(record, RunError, limit=1 << 16, own=True)  # a FIFO would block the resume
        try:
            run_id = json.loads(raw)["id"] if raw is not None else secrets.token_hex(8)
        except (ValueError, KeyError, TypeError, RecursionError) as e:
            raise RunError(f"{record}: not the W&B record grm writes ({e}); delete it to start a new W&B run") from None
        if not isinstance(run_id, str) or not run_id.isalnum():
            raise RunError(f"{record}: 'id' must be letters and digits; delete the file to start a new W&B run")
        try:
            self.run = wandb.init(
                project=spec.project,
                entity=spec.entity,
                mode=spec.mode,
                name=spec.name or run_dir.name,
                group=spec.group,
                tags=spec.tags or None,
                id=run_id,
                resume="allow",
                dir=str(run_dir),
                config=config,
            )
            self.run.define_metric("step")
            self.run.define_metric("*", step_metric="step")
        except Exception as e:  # wandb's own errors (no key online, a refused project) have no common base
            raise RunError(f"logging.wandb: W&B did not start ({type(e).__name__}: {str(e).strip()[:300]})") from None
        atomic_write_text(record, json.dumps({"id": run_id, "project": spec.project, "mode": spec.mode}) + "\n")
        where = f"RUN_DIR/wandb (wandb sync {run_dir / 'wandb'} uploads it)" if spec.mode == "offline" else spec.mode
        print(f"wandb: run {run_id} of project {spec.project}, {where}", flush=True)

    def log(self, metrics: dict[str, Any]) -> None:
        """The step's finite numbers (booleans, strings, NaN and nested values stay in metrics.jsonl)."""
        row = {k: v for k, v in metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)}
        self.run.log(row)

    def close(self) -> None:
        """Finish the W&B run; a failure is reported, never raised (the run's own files are written)."""
        try:
            self.run.finish()
        except Exception as e:  # noqa: BLE001 - whatever W&B raises, the grm run is complete
            print(f"wandb: could not finish the W&B run ({type(e).__name__}: {str(e).strip()[:200]})", flush=True)
