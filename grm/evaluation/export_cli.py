"""``grm export``'s handler, and the export ``grm run`` ends a completed run with. ``grm/cli.py``
registers the subcommand (its arguments are typed by ``grm.cli_args``, which this layer may not
import) and calls ``cmd_export``, or ``export_finished_run`` after a run (the orchestrator may not
import evaluation); nothing heavy is imported here, so ``grm --help`` stays light
(``grm.evaluation.export`` does the work)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from grm.base import GrmError
from grm.terminal import one_line


def cmd_export(args: argparse.Namespace) -> int:
    from grm.evaluation.export import WRITTEN, export_policy

    out = export_policy(Path(args.source), Path(args.out), step=args.step, force=args.force)
    print(f"wrote {out}: {WRITTEN}")
    print(f"load it with transformers.AutoModelForCausalLM.from_pretrained({str(out)!r})")
    return 0


def export_finished_run(run_dir: Path) -> int:
    """``checkpoint.export``: a completed run's final policy into RUN_DIR/model (replacing the one an
    earlier completion wrote, when a finished run is resumed). The run succeeded either way, so a
    failed export is one warning saying how to retry, and ``grm run``'s exit status stays 0."""
    from grm.evaluation.export import export_policy

    out = run_dir / "model"
    try:
        export_policy(run_dir, out, force=True)
    except KeyboardInterrupt:  # the run is complete: only the export is cut short
        print(
            f"warning: run {one_line(str(run_dir))} is complete; its model export was interrupted: {_retry(run_dir)}",
            file=sys.stderr,
        )
        return 130
    except Exception as e:  # noqa: BLE001 - whatever it was, the trained run stands
        why = one_line(str(e) if isinstance(e, GrmError) else f"{type(e).__name__}: {e}")
        print(
            f"warning: run {one_line(str(run_dir))} is complete but its model export failed ({why}); retry: {_retry(run_dir)}",
            file=sys.stderr,
        )
        return 0
    print(f"model: {one_line(str(out))} (AutoModelForCausalLM.from_pretrained)")
    return 0


def _retry(run_dir: Path) -> str:
    out = run_dir / "model"
    force = " --force" if out.exists() else ""  # a model an earlier completion wrote
    return one_line(f"grm export {run_dir} --out {out}{force}")
