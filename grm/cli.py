"""The ``grm`` command. Imports stay inside the subcommands so ``grm --help`` is instant."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from grm.base import GrmError
from grm.terminal import escape_controls


def _err(msg: str) -> None:
    # A message may quote a path, a data cell or a model's text: never its control codes, on a
    # terminal or in a log someone later reads on one. Newlines stay (a list of config errors).
    msg = escape_controls(msg)
    print(f"error: {msg}" if "\n" not in msg else "error:\n" + msg, file=sys.stderr)


# ----------------------------------------------------------------------------- validate


def _build_judges(specs: Iterable[tuple[Path, Any]]) -> list[tuple[Path, Any, Any]]:
    """Build every judge among ``specs`` ((YAML path, spec) pairs) without loading a model: its
    templates are read and compiled, its parser and meta judge set up; JudgeError names the file.
    What ``grm eval`` and a run's judge actors would find, found before any data, model or Ray.
    Returns (path, spec, judge) for each judge built."""
    from grm.config import JudgeSpec
    from grm.judges.runtime import build_judge

    return [(Path(path), spec, build_judge(spec, Path(path).parent)) for path, spec in specs if isinstance(spec, JudgeSpec)]


def _episode_parts(checked: list[tuple[Path, Any]], judges: list[tuple[Path, Any, Any]]) -> None:
    """What only an ``env:`` run can use, checked before Ray as ``grm run`` would meet it: the
    environment built once (its class or agent function loaded, one instance made with its kwargs),
    and no judge of episodes in a pipeline without one (a trajectory template, an env signal rule:
    every sample would be masked, or the render would fail at the first step). ``judges``: the
    pipeline's judges as ``_build_judges`` built them."""
    from grm.config import ConfigError, PipelineSpec

    if not checked or not isinstance(checked[0][1], PipelineSpec):
        return
    path, pipeline = checked[0]
    env = pipeline.env
    if env is not None:
        from grm.envs.agent import load_agent
        from grm.envs.base import EnvError, env_factory, load_env_class

        try:
            if env.is_agent:
                load_agent(env.target)
            elif env.pool is not None:  # built on its workers' pool, where its own dependencies are: the class here
                load_env_class(env.target)
            else:
                env_factory(env.target, env.kwargs)
        except EnvError as e:
            raise ConfigError(f"{path}: env: {e}") from None
        return
    for jpath, spec, judge in judges:
        prompts = getattr(judge, "prompts", None)
        used = prompts.template.used_variables() if prompts is not None else set()
        if {"trajectory", "trajectories"} & used or (spec.rule is not None and spec.rule.type == "signal"):
            raise ConfigError(
                f"{jpath}: judge '{spec.name}' judges episodes (a trajectory, an environment's signal), but {path} "
                "has no env:; give the pipeline an env: block, or a judge of single answers"
            )


def cmd_validate(args: argparse.Namespace) -> int:
    from grm.config import ConfigError, validate_tree

    if args.overrides and len(args.files) > 1:
        raise ConfigError(f"--set applies to one file; {len(args.files)} were given (validate them one at a time)")
    failed = 0
    for f in args.files:
        try:
            checked = validate_tree(f, args.overrides)
            _episode_parts(checked, _build_judges(checked))
        except GrmError as e:
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

    # A broken pipeline fails here in a blink: the driver imports Ray (seconds) and validates the
    # same way again (milliseconds).
    loaded = load_pipeline(args.pipeline, args.overrides)
    # a broken template or parser fails now, not after Ray starts
    judges = _build_judges([*((j.path, j.spec) for j in loaded.judges), *((path, spec) for spec, path in loaded.heldout)])
    _episode_parts([(loaded.path, loaded.spec)], judges)
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
            + (
                f"; {', '.join(policy_only)} apply only to evaluating a policy (--policy, with --env for episodes)"
                if policy_only
                else ""
            )
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


HANDLERS: dict[str, Callable[[argparse.Namespace], int]] = {
    "run": cmd_run,
    "validate": cmd_validate,
    "models list": cmd_models_list,
    "models fetch": cmd_models_fetch,
    "judge": cmd_judge,
    "eval": cmd_eval,
    "rescore": cmd_rescore,
    "view": cmd_view,
}
"""Each subcommand's handler, by name (``grm.cli_parser`` puts them on its parsers)."""


def build_parser() -> argparse.ArgumentParser:
    from grm import cli_parser

    return cli_parser.build_parser(HANDLERS)


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


def entry() -> None:
    """The ``grm`` command: ``main``, then exit. After an interrupt, exit without waiting for worker
    threads still blocked in a request (a served judge's HTTP call may wait minutes for its
    timeout): the interpreter would join them first, and a second Ctrl-C there is a traceback.
    Exit handlers (a launched server's stop) run first; ``main`` itself never exits, for tests."""
    code = main()
    if code == 130:
        import atexit

        atexit._run_exitfuncs()
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code)
    sys.exit(code)


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
    entry()
