"""``grm export``'s handler. ``grm/cli.py`` registers the subcommand (its arguments are typed by
``grm.cli_args``, which this layer may not import) and calls ``cmd_export``; nothing heavy is
imported here, so ``grm --help`` stays light (``grm.evaluation.export`` does the work)."""

from __future__ import annotations

import argparse
from pathlib import Path


def cmd_export(args: argparse.Namespace) -> int:
    from grm.evaluation.export import WRITTEN, export_policy

    out = export_policy(Path(args.source), Path(args.out), step=args.step, force=args.force)
    print(f"wrote {out}: {WRITTEN}")
    print(f"load it with transformers.AutoModelForCausalLM.from_pretrained({str(out)!r})")
    return 0
