"""``grm eval --policy``'s command-line half: its environment flags (``--env``, ``--env-arg``,
``--split``) and the handler that checks which flags go together and runs a prompt-set evaluation
(``--prompts``, ``grm.evaluation.policy_eval``) or an episode evaluation (``--env``,
``grm.evaluation.episode_eval``). ``grm/cli.py`` registers the flags and calls the handler; only
argparse is imported at module level, so ``grm --help`` stays light."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

POLICY_EVAL_ONLY = ("prompts", "against", "max_new_tokens", "temperature", "seed", "env", "split")
"""Flags that only apply with ``--policy`` (``env_arg`` is checked apart: it defaults to [])."""
EPISODE_LIMIT = 100
"""Episodes run when ``--env`` is given without ``--limit``."""
EPISODE_MAX_NEW_TOKENS = 128
"""Tokens per assistant turn when ``--env`` is given without ``--max-new-tokens``."""


def add_env_arguments(parser: Any) -> None:
    """``grm eval``'s episode flags."""
    parser.add_argument(
        "--env",
        metavar="ENV",
        help="policy mode: run episodes instead of answering --prompts: a shipped environment (grm envs list), "
        "FILE.py:Class, package.module:Class, or a YAML file with an env: block (kwargs and limits); reports the "
        f"environment's success rate with its 95%% CI on --limit tasks ({EPISODE_LIMIT})",
    )
    parser.add_argument(
        "--env-arg",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="with --env: a constructor argument of the environment (VALUE read as YAML; repeatable)",
    )
    parser.add_argument(
        "--split",
        metavar="SPLIT",
        help="with --env: the environment's task split (default held_out; case, '_' and '-' ignored: heldout)",
    )


def _flags(args: argparse.Namespace, names: tuple[str, ...]) -> list[str]:
    return [f"--{k.replace('_', '-')}" for k in names if getattr(args, k, None)]


def policy_only_flags(args: argparse.Namespace) -> list[str]:
    """The policy-mode flags given (``grm eval`` without ``--policy`` refuses them)."""
    return [f"--{k.replace('_', '-')}" for k in POLICY_EVAL_ONLY if getattr(args, k) is not None] + _flags(args, ("env_arg",))


def cmd_eval_policy(args: argparse.Namespace) -> int:
    from grm.evaluation.errors import EvalError

    judge_only = _flags(args, ("data", "map", "length_control"))
    if args.env is not None:
        bad = judge_only + (["--prompts"] if args.prompts is not None else [])
        if bad:
            raise EvalError(f"grm eval --policy --env runs episodes: {', '.join(bad)} do not apply to it")
        return cmd_eval_episodes(args)
    if args.prompts is None or judge_only or args.split is not None or args.env_arg:
        env_only = _flags(args, ("split", "env_arg"))
        raise EvalError(
            "grm eval --policy needs --prompts SET (a prompt set, as data.prompts of a pipeline) or --env ENV (episodes)"
            + (f"; {', '.join(judge_only)} only apply to judging a labelled data set" if judge_only else "")
            + (f"; {', '.join(env_only)} only apply with --env" if env_only else "")
        )
    from grm.evaluation.policy_eval import PolicyEvalConfig, run_policy_eval

    cfg = PolicyEvalConfig(
        policy=args.policy,
        prompts=args.prompts,
        out=Path(args.out),
        judges=[j for j in (args.judges or "").split(",") if j],
        against=args.against,
        limit=args.limit,
        max_new_tokens=64 if args.max_new_tokens is None else args.max_new_tokens,
        temperature=0.0 if args.temperature is None else args.temperature,
        seed=0 if args.seed is None else args.seed,
        batch_size=args.batch_size,
        overrides=args.overrides,
        force=args.force,
    )
    run_policy_eval(cfg)
    print(f"wrote {cfg.out}/responses.jsonl, results.jsonl, summary.json, report.md")
    return 0


def cmd_eval_episodes(args: argparse.Namespace) -> int:
    from grm.evaluation.episode_eval import EpisodeEvalConfig, run_episode_eval

    cfg = EpisodeEvalConfig(
        policy=args.policy,
        env=args.env,
        out=Path(args.out),
        env_args=list(args.env_arg),
        split="held_out" if args.split is None else args.split,
        judges=[j for j in (args.judges or "").split(",") if j],
        against=args.against,
        limit=EPISODE_LIMIT if args.limit is None else args.limit,
        max_new_tokens=EPISODE_MAX_NEW_TOKENS if args.max_new_tokens is None else args.max_new_tokens,
        temperature=0.0 if args.temperature is None else args.temperature,
        seed=0 if args.seed is None else args.seed,
        batch_size=args.batch_size,
        overrides=args.overrides,
        force=args.force,
    )
    run_episode_eval(cfg)
    judged = ", results.jsonl" if cfg.judges else ""
    print(f"wrote {cfg.out}/responses.jsonl (one episode a line){judged}, summary.json, report.md")
    return 0
