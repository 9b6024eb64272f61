"""The ``grm`` command. Imports stay inside the subcommands so ``grm --help`` is instant."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence

from grm import cli_args
from grm.base import GrmError
from grm.terminal import escape_controls


def _err(msg: str) -> None:
    # A message may quote a path, a data cell or a model's text: never its control codes, on a
    # terminal or in a log someone later reads on one. Newlines stay (a list of config errors).
    msg = escape_controls(msg)
    print(f"error: {msg}" if "\n" not in msg else "error:\n" + msg, file=sys.stderr)


# ----------------------------------------------------------------------------- validate


def cmd_validate(args: argparse.Namespace) -> int:
    from grm.config import ConfigError, validate_tree

    failed = 0
    for f in args.files:
        try:
            checked = validate_tree(f, args.overrides if len(args.files) == 1 else ())
        except ConfigError as e:
            _err(str(e))
            failed += 1
            continue
        kinds = ", ".join(f"{type(spec).__name__.removesuffix('Spec').lower()} {p}" for p, spec in checked)
        print(f"ok: {kinds}")
    return 1 if failed else 0


# ----------------------------------------------------------------------------- models


def cmd_models_list(args: argparse.Namespace) -> int:
    from rich.table import Table

    from grm.models import grm_home, list_models
    from grm.terminal import console

    table = Table(title=f"builtin models (cache: {grm_home()})")
    for col in ("name", "upstream", "size", "status", "source", "license"):
        table.add_column(col)
    for row in list_models():
        table.add_row(*row.values())
    console().print(table)
    print("Also accepted anywhere a model is named: a local Hugging Face model directory, or a hub id.")
    return 0


def cmd_models_fetch(args: argparse.Namespace) -> int:
    from grm.models import fetch

    for name in args.names:
        print(fetch(name, force=args.force))
    return 0


# ----------------------------------------------------------------------------- judge


def cmd_judge(args: argparse.Namespace) -> int:
    from grm.judges import cli as judge_cli

    return judge_cli.run(args)


# ----------------------------------------------------------------------------- run


def cmd_run(args: argparse.Namespace) -> int:
    from grm.config.resolve import load_pipeline

    # A broken pipeline fails here in a blink: the driver imports torch and Ray (seconds) and
    # validates the same way again (milliseconds).
    loaded = load_pipeline(args.pipeline, args.overrides)
    if args.dry_run:
        from grm.orchestrator.dry_run import dry_run

        dry_run(args.pipeline, args.overrides, args.address)
        return 0
    from grm.evaluation import export_cli, gate
    from grm.orchestrator.errors import RunStopped
    from grm.orchestrator.launch import run_pipeline

    try:
        out = run_pipeline(
            args.pipeline, args.overrides, resume=args.resume, address=args.address, no_live=args.no_live, gates=gate.run_gates
        )
    except RunStopped as e:  # a stop signal: the message names the checkpoint to resume from
        _err(str(e))
        return e.exit_code
    print(
        f"run directory: {out}\n  report: {out}/report.md (curves.png)\n  metrics: {out}/metrics.jsonl\n  samples: {out}/samples.jsonl\n"  # noqa: E501
        f"  tensorboard: tensorboard --logdir {out}/tensorboard\n  checkpoints: {out}/checkpoints/"
    )
    return export_cli.export_finished_run(out) if loaded.spec.checkpoint.export else 0  # RUN_DIR/model


# ----------------------------------------------------------------------------- eval


def cmd_eval(args: argparse.Namespace) -> int:
    from pathlib import Path

    from grm.evaluation import policy_cli
    from grm.evaluation.runner import EvalConfig, EvalError, run

    if args.policy is not None:
        return policy_cli.cmd_eval_policy(args)
    policy_only = policy_cli.policy_only_flags(args)
    if args.data is None or not args.judges or policy_only:
        raise EvalError(
            "grm eval needs JUDGES --data SOURCE (judge a labelled data set) or [JUDGES] --policy POLICY --prompts SET "
            "(evaluate a policy) or --env ENV (its episodes)"
            + (f"; {', '.join(policy_only)} only apply with --policy" if policy_only else "")
        )
    cfg = EvalConfig(
        judges=[j for j in args.judges.split(",") if j],
        data=args.data,
        out=Path(args.out),
        limit=args.limit,
        mapping=args.map,
        overrides=args.overrides,
        force=args.force,
        skip_bad_rows=args.skip_bad_rows,
        batch_size=args.batch_size,
        length_control=args.length_control,
    )
    run(cfg)
    print(f"wrote {cfg.out}/results.jsonl, metrics.json, report.md")
    return 0


def cmd_rescore(args: argparse.Namespace) -> int:
    from pathlib import Path

    from grm.evaluation.rescore import rescore

    rescore(Path(args.dir), args.judge, length_control=args.length_control)
    print(f"wrote {args.dir}/results.rescored.jsonl, metrics.json, report.md")
    return 0


# ----------------------------------------------------------------------------- view


def cmd_view(args: argparse.Namespace) -> int:
    from grm.view.server import serve

    def ready(url: str) -> None:
        print(f"grm view: {url}  (Ctrl-C to stop; the page re-reads the directories on refresh)", flush=True)

    try:
        serve(args.dirs, host=args.host, port=args.port, ready=ready)
    except KeyboardInterrupt:
        pass
    return 0


# ----------------------------------------------------------------------------- parser


def build_parser() -> argparse.ArgumentParser:
    p = cli_args.Parser(
        prog="grm",
        description="RLAIF with generative reward models: judges that critique then score.",
        epilog="Docs: README.md. Every YAML path may be relative to the YAML or builtin:NAME.",
    )
    from grm import __version__

    p.add_argument("--version", action="version", version=f"grm {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    run = sub.add_parser("run", help="run an RLAIF pipeline (rollout, judges, rewards, training) on Ray")
    run.add_argument("pipeline", type=cli_args.spec, metavar="PIPELINE.yaml", help="pipeline YAML (path or builtin:NAME)")
    run.add_argument("overrides", nargs="*", metavar="KEY.PATH=VALUE", help="override pipeline fields, e.g. train.steps=5")
    run.add_argument("--resume", type=cli_args.writable_dir, metavar="RUN_DIR", help="continue a run from its latest checkpoint")
    run.add_argument("--address", metavar="RAY_ADDRESS", help="join an existing Ray cluster instead of starting one")
    run.add_argument(
        "--dry-run",
        action="store_true",
        help="validate, connect to Ray and print the placement (roles, pools, bundles, nodes) without loading a model",
    )
    run.add_argument(
        "--no-live",
        action="store_true",
        help="one line per step instead of the live panel (the default when stdout is not a terminal or CI is set)",
    )
    run.set_defaults(func=cmd_run)

    v = sub.add_parser("validate", help="check pipeline/judge/policy YAMLs (and what they reference)")
    v.add_argument("files", nargs="+", type=cli_args.spec, metavar="FILE.yaml")
    v.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY.PATH=VALUE",
        help="override a field before validating (repeatable; single file only)",
    )
    v.set_defaults(func=cmd_validate)

    m = sub.add_parser("models", help="builtin model store")
    msub = m.add_subparsers(dest="models_command", metavar="ACTION", required=True)
    ml = msub.add_parser("list", help="list builtin model aliases and whether they are fetched")
    ml.set_defaults(func=cmd_models_list)
    mf = msub.add_parser("fetch", help="download and convert builtin models")
    mf.add_argument("names", nargs="+", metavar="NAME")
    mf.add_argument("--force", action="store_true", help="re-download and re-convert")
    mf.set_defaults(func=cmd_models_fetch)

    j = sub.add_parser("judge", help="author judges: render, try and lint judge prompts")
    jsub = j.add_subparsers(dest="judge_command", metavar="ACTION", required=True)
    jr = jsub.add_parser("render", help="print the exact prompt(s) a judge sends for a sample")
    jr.add_argument("judge", type=cli_args.spec, metavar="JUDGE.yaml")
    jr.add_argument("--sample", required=True, type=cli_args.existing_file, metavar="SAMPLE.json")
    jt = jsub.add_parser("try", help="run a judge on a sample: critiques, parses, final score")
    jt.add_argument("judge", type=cli_args.spec, metavar="JUDGE.yaml")
    jt.add_argument("--sample", required=True, type=cli_args.existing_file, metavar="SAMPLE.json")
    jt.add_argument("--json", action="store_true", help="print the full result as JSON")
    jl = jsub.add_parser("lint", help="check templates and parsers (undefined variables, examples)")
    jl.add_argument("files", nargs="+", type=cli_args.existing_file, metavar="JUDGE.yaml|TEMPLATE.j2")
    for sp in (jr, jt):
        sp.add_argument(
            "overrides",
            nargs="*",
            metavar="KEY.PATH=VALUE",
            help="override judge fields, e.g. sampling.n=5 (anywhere on the line)",
        )
    for sp in (jr, jt, jl):
        sp.set_defaults(func=cmd_judge)

    e = sub.add_parser(
        "eval",
        help="judge a labelled data set with judges (--data), or evaluate a policy on prompts (--policy); resumable",
    )
    e.add_argument(
        "judges",
        nargs="?",
        type=cli_args.spec_list,
        metavar="JUDGE[,JUDGE2...]",
        help="judge specs (paths or builtin:NAME), comma separated",
    )
    e.add_argument(
        "--data",
        type=cli_args.data_source,
        metavar="SOURCE",
        help="judge mode: .json/.jsonl/.csv/.parquet file, a saved datasets directory, or builtin:arith-pairs",
    )
    e.add_argument(
        "--policy",
        type=cli_args.model_ref,
        metavar="POLICY",
        help="policy mode: generate with POLICY (a run dir: its latest checkpoint; a checkpoint dir; a policy spec; "
        "a model alias or local HF dir) on --prompts (or in --env's episodes), then score the responses with JUDGES",
    )
    e.add_argument(
        "--prompts",
        type=cli_args.data_source,
        metavar="SET",
        help="policy mode: prompt set (builtin:NAME or a .jsonl/.json/.csv file)",
    )
    e.add_argument(
        "--against",
        type=cli_args.model_ref,
        metavar="OTHER",
        help="policy mode: a second policy, generated and scored the same way; pairwise JUDGES give POLICY's win rate",
    )
    e.add_argument(
        "--max-new-tokens",
        type=cli_args.positive,
        metavar="N",
        help="policy mode: tokens per response (--env: per turn) at most (64; --env: 128)",
    )
    e.add_argument(
        "--temperature",
        type=cli_args.non_negative,
        metavar="T",
        help="policy mode: sampling temperature (0: greedy, the default)",
    )
    e.add_argument("--seed", type=cli_args.seed, metavar="S", help="policy mode: sampling seed (0; --env: plus the task's index)")
    from grm.evaluation import policy_cli  # argparse only: `grm --help` stays light

    policy_cli.add_env_arguments(e)
    e.add_argument(
        "--out", required=True, type=cli_args.out_dir, metavar="DIR", help="output directory; re-running with it resumes"
    )
    e.add_argument("--limit", type=cli_args.positive, metavar="N", help="first N items only")
    e.add_argument(
        "--map",
        action="append",
        default=[],
        metavar="FIELD=COLUMN",
        help="map a column onto prompt, response, response_a, response_b, label, human_score, reference, id, checklist, "
        "constraints",
    )
    e.add_argument("--force", action="store_true", help="resume even if the recorded judges/data differ")
    e.add_argument("--skip-bad-rows", action="store_true", help="skip (and count) rows that fail validation")
    e.add_argument(
        "--batch-size",
        type=cli_args.positive,
        default=16,
        metavar="N",
        help="items judged (policy mode: prompts generated) per batch and per fsync",
    )
    e.add_argument(
        "--length-control", type=cli_args.length_control, metavar="regress|penalty:COEF", help=cli_args.LENGTH_CONTROL_HELP
    )
    e.add_argument("overrides", nargs="*", metavar="KEY.PATH=VALUE", help="override fields of every judge")
    e.set_defaults(func=cmd_eval)

    r = sub.add_parser("rescore", help="re-parse and re-aggregate an eval's raw outputs without generating")
    r.add_argument("dir", type=cli_args.writable_dir, metavar="DIR")
    r.add_argument("--judge", type=cli_args.spec, metavar="JUDGE.yaml", help="a changed judge spec (parser/aggregation) to apply")
    r.add_argument(
        "--length-control", type=cli_args.length_control, metavar="regress|penalty:COEF", help=cli_args.LENGTH_CONTROL_HELP
    )
    r.set_defaults(func=cmd_rescore)

    w = sub.add_parser("view", help="browse run and eval directories in a local web page (curves, samples, critiques)")
    w.add_argument(
        "dirs",
        nargs="+",
        type=cli_args.existing_dir,
        metavar="DIR",
        help="run directories (grm run) and eval directories (grm eval --out)",
    )
    w.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    w.add_argument("--port", type=cli_args.port, default=0, help="port (default 0: a free one; the URL is printed)")
    w.set_defaults(func=cmd_view)

    from grm.evaluation import export_cli  # argparse only: `grm --help` stays light

    x = sub.add_parser("export", help="write a run's policy as a Hugging Face model directory (safetensors, tokenizer, card)")
    x.add_argument("source", type=cli_args.existing_dir, metavar="RUN_DIR|CHECKPOINT_DIR", help="a run or RUN/checkpoints/step-N")
    x.add_argument("--out", required=True, type=cli_args.out_dir, metavar="DIR", help="the model directory to write")
    x.add_argument("--step", type=cli_args.integer(0), metavar="N", help="the run's checkpoint of step N (default: the latest)")
    x.add_argument("--force", action="store_true", help="replace --out when it exists and is not empty")
    x.add_argument(
        "--adapter",
        action="store_true",
        help="(a train.lora run) write the LoRA adapters alone (peft format), not the merged model",
    )
    x.add_argument(
        "--push",
        metavar="REPO",
        type=cli_args.hub_repo,
        help="then upload --out to this Hub model repo (OWNER/NAME; private if new; needs HF_HUB_OFFLINE=0 and HF_TOKEN)",
    )
    x.set_defaults(func=export_cli.cmd_export)

    from grm.envs import cli as envs_cli  # argparse only: `grm --help` stays light

    envs_cli.add_parser(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    try:
        try:
            return _main(argv)
        finally:  # output still buffered meets a reader that left here, not in the interpreter's exit
            if sys.stdout is not None:
                sys.stdout.flush()
    except BrokenPipeError:
        # The reader left (`grm judge render ... | head -3`): stop quietly, as cat does. stdout now
        # points at /dev/null, so the interpreter's flush at exit does not raise it again.
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (AttributeError, OSError, ValueError):  # stdout replaced by an object without a descriptor
            pass
        return 141  # 128 + SIGPIPE, what a shell reports for a writer the pipe ended


def _main(argv: Sequence[str] | None) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    parser = build_parser()
    # key=value overrides may come after options (`grm judge try J --sample S sampling.n=2`).
    args, extra = parser.parse_known_args(argv)
    if extra:
        bad = [e for e in extra if e.startswith("-") or "=" not in e or not hasattr(args, "overrides")]
        if bad:
            parser.error(f"unrecognized arguments: {' '.join(bad)}")
        args.overrides = list(args.overrides) + extra
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    func: Callable[[argparse.Namespace], int] = args.func
    try:
        return func(args)
    except KeyboardInterrupt:
        _err("interrupted")
        return 130
    except GrmError as e:  # user errors are one line; anything else is a bug and keeps its traceback
        _err(str(e))
        return 2


if __name__ == "__main__":
    sys.exit(main())
