"""The ``grm`` command line's grammar: every subcommand, its arguments (typed by
``grm.cli_args``) and help. The handlers live in ``grm.cli`` and come in as a mapping, so this
module imports none of them (and ``grm --help`` stays light: argparse only)."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping

from grm import cli_args

Handler = Callable[[argparse.Namespace], int]


def build_parser(handlers: Mapping[str, Handler]) -> argparse.ArgumentParser:
    """The ``grm`` command line; each subcommand's parser carries its handler as ``func``
    (``handlers[name]``; ``export`` and ``envs`` bring their own)."""
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
    # default=[]: a "*" positional without a default is named among the missing required arguments
    run.add_argument(
        "overrides", nargs="*", default=[], metavar="KEY.PATH=VALUE", help="override pipeline fields, e.g. train.steps=5"
    )
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
    run.set_defaults(func=handlers["run"])

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
    v.set_defaults(func=handlers["validate"])

    m = sub.add_parser("models", help="builtin model store")
    msub = m.add_subparsers(dest="models_command", metavar="ACTION", required=True)
    ml = msub.add_parser("list", help="list builtin model aliases and whether they are fetched")
    ml.set_defaults(func=handlers["models list"])
    mf = msub.add_parser("fetch", help="download and convert builtin models")
    mf.add_argument("names", nargs="+", metavar="NAME")
    mf.add_argument("--force", action="store_true", help="re-download and re-convert")
    mf.set_defaults(func=handlers["models fetch"])

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
            default=[],
            metavar="KEY.PATH=VALUE",
            help="override judge fields, e.g. sampling.n=5 (anywhere on the line)",
        )
    for sp in (jr, jt, jl):
        sp.set_defaults(func=handlers["judge"])

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
    e.add_argument("overrides", nargs="*", default=[], metavar="KEY.PATH=VALUE", help="override fields of every judge")
    e.set_defaults(func=handlers["eval"])

    r = sub.add_parser("rescore", help="re-parse and re-aggregate an eval's raw outputs without generating")
    r.add_argument("dir", type=cli_args.writable_dir, metavar="DIR")
    r.add_argument("--judge", type=cli_args.spec, metavar="JUDGE.yaml", help="a changed judge spec (parser/aggregation) to apply")
    r.add_argument(
        "--length-control", type=cli_args.length_control, metavar="regress|penalty:COEF", help=cli_args.LENGTH_CONTROL_HELP
    )
    r.set_defaults(func=handlers["rescore"])

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
    w.set_defaults(func=handlers["view"])

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
