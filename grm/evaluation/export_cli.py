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
    from grm.evaluation.export import ADAPTER_WRITTEN, WRITTEN, export_policy

    adapter = bool(getattr(args, "adapter", False))
    out = export_policy(Path(args.source), Path(args.out), step=args.step, force=args.force, adapter=adapter)
    if adapter:
        print(f"wrote {out}: {ADAPTER_WRITTEN}")
        print(f"load it with peft.PeftModel.from_pretrained(BASE_MODEL, {str(out)!r})")
    else:
        print(f"wrote {out}: {WRITTEN}")
        print(f"load it with transformers.AutoModelForCausalLM.from_pretrained({str(out)!r})")
    if getattr(args, "push", None):
        url = push(out, args.push)
        print(f"pushed {out} to {url}")
    return 0


def push(out: Path, repo: str) -> str:
    """Upload the model directory ``out`` to the Hub model repo ``repo`` (created private when new);
    its URL. grm sets ``HF_HUB_OFFLINE=1`` unless the environment says otherwise, so a push needs
    ``HF_HUB_OFFLINE=0``. No hub (offline, no network, no token, refused) is one ``GrmError``: the
    directory is written either way."""
    import os

    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on"):
        raise GrmError(
            f"--push {repo}: grm keeps the Hub offline unless HF_HUB_OFFLINE=0 is set; {out} is written (push it with that set)"
        )
    from huggingface_hub import HfApi

    api = HfApi()
    try:
        api.create_repo(repo, repo_type="model", private=True, exist_ok=True)
        info = api.upload_folder(
            folder_path=str(out), repo_id=repo, repo_type="model", commit_message="grm export", ignore_patterns=["COMPLETE"]
        )
    except Exception as e:  # noqa: BLE001 - network, auth and Hub errors have no common base
        why = one_line(f"{type(e).__name__}: {e}")[:300]
        raise GrmError(f"--push {repo}: the upload failed ({why}); {out} is written") from None
    return str(getattr(info, "commit_url", None) or f"https://huggingface.co/{repo}")


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
