"""``grm eval --policy POLICY --env ENV``: run a policy's episodes on an environment's held-out
tasks with the episode runner, report the environment's rule-checked success (the signal no judge
sees) with its interval, and optionally score the trajectories with pointwise judges; resumable.

ENV is a shipped environment (``calc``), ``FILE.py:Class`` or ``package.module:Class``, or a YAML
file holding an ``env:`` block (a pipeline, or a file with just that block: its limits, its
``kwargs``); ``--env-arg KEY=VALUE`` sets constructor arguments on top. Both are validated as a
pipeline's ``env:`` (``grm.config.env.EnvSpec``), and the tasks come from the environment itself
(``grm.envs.tasks``). Each task's episode samples with its own seed (``--seed`` plus the task's
index in the split), greedy by default.

State, like ``grm eval --policy --prompts`` (``grm.evaluation.policy_eval``): ``responses.jsonl``
holds one finished episode per line (``Trajectory.to_dict()`` and its ``side``, ``policy`` or
``other``), appended and fsynced per batch; ``results.jsonl`` one judgment per (judge, side, task).
A re-run with the same ``--out`` runs only the missing episodes (an episode counts as done while its
task's row is unchanged) and judgments (keyed by the judge's spec hash and the trajectory's sha256);
a different policy, environment, split or sampling is refused unless ``--force``.
"""

from __future__ import annotations

import gc
import json
import time
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grm.base import make_dir, writer_lock
from grm.config.base import Strict
from grm.config.env import EnvSpec, is_file_target
from grm.config.yaml_reader import Located, load_yaml, yaml_value
from grm.data.trajectory import Trajectory, TrajectoryError
from grm.evaluation.errors import EvalError
from grm.evaluation.policy_eval import PER_RESPONSE, check_resume, sha
from grm.evaluation.policy_source import PolicySource, resolve_policy
from grm.evaluation.runner import load_judges
from grm.jsonl import append_jsonl, read_jsonl, read_jsonl_numbered
from grm.judges.base import Judge
from grm.judges.errors import JudgeError
from grm.judges.types import Sample
from grm.terminal import escape_controls

Episodes = dict[tuple[str, str], tuple[dict[str, Any], Trajectory]]
"""(side, task id) -> its responses.jsonl line and the trajectory read from it."""


@dataclass
class EpisodeEvalConfig:
    policy: str
    """POLICY: run dir, checkpoint dir, policy spec or model (``grm.evaluation.policy_source``)."""
    env: str
    """ENV: a shipped name, ``FILE.py:Class``, ``package.module:Class`` or a YAML file with ``env:``."""
    out: Path
    env_args: Sequence[str] = ()
    """``KEY=VALUE`` constructor arguments (VALUE read as YAML), over the ``env:`` block's kwargs."""
    split: str = "held_out"
    judges: Sequence[str] = ()
    against: str | None = None
    limit: int = 100
    """Episodes: the split's first N tasks (not part of the recorded identity: raising it adds tasks)."""
    max_new_tokens: int = 128
    """Tokens per assistant turn at most."""
    temperature: float = 0.0
    seed: int = 0
    batch_size: int = 16
    """Episodes run in lockstep (one generate call per turn for all of them) and appended per batch."""
    overrides: Sequence[str] = ()
    force: bool = False


class _EnvFile(Strict):
    env: EnvSpec


def load_env_spec(ref: str, env_args: Sequence[str] = ()) -> tuple[EnvSpec, Path]:
    """ENV and ``--env-arg``s -> the validated spec and the directory its ``FILE.py`` paths are
    relative to (the YAML file's, else the current one)."""
    from pydantic import ValidationError

    from grm.config.base import field_errors
    from grm.config.loading import validate

    if ref.endswith((".yaml", ".yml")):
        loc = load_yaml(ref)
        block = loc.data.get("env")
        if not isinstance(block, dict):
            raise EvalError(f"{loc.path}:{loc.line_of(('env',))}: no env: block (a mapping: type or path, kwargs, limits)")
        spec = validate(_EnvFile, Located({"env": block}, loc.path, loc.lines)).env
        base = loc.path.parent.resolve()
    else:
        data = {"type": "python", "path": ref} if ":" in ref else {"type": ref}
        try:
            spec = EnvSpec.model_validate(data)
        except ValidationError as e:
            raise EvalError(f"--env {ref}: {field_errors(e)}") from None
        base = Path.cwd()
    kwargs = dict(spec.kwargs)
    for text in env_args:
        key, eq, raw = text.partition("=")
        if not eq or not key.strip().isidentifier():
            raise EvalError(f"--env-arg {text!r}: expected KEY=VALUE (KEY a constructor argument's name)")
        kwargs[key.strip()] = yaml_value(raw, f"--env-arg {text}")
    return spec.model_copy(update={"kwargs": kwargs}), base


def resolved_target(name: str, base_dir: Path) -> str:
    """What the environment's class is, as recorded for resume: a file target made absolute (the
    same file however it was reached), anything else as given."""
    from grm.envs.base import ENVIRONMENTS

    target = ENVIRONMENTS.get(name, name)
    where, _, cls = target.rpartition(":")
    if is_file_target(where):
        return f"{(base_dir / where).expanduser().resolve()}:{cls}"
    return target


def episode_seed(seed: int, index: int) -> int:
    """The seed of the split's ``index``-th task: the same wherever the task falls in a batch."""
    return (seed + index) % 2**31


def _row_key(row: Any) -> str:
    return json.dumps(row, sort_keys=True, default=str)


def done_episodes(path: Path, tasks: list[tuple[str, dict[str, Any]]]) -> Episodes:
    """The finished episodes of ``path`` whose task row is the one asked now (the latest line wins)."""
    want = {tid: _row_key(row) for tid, row in tasks}
    out: Episodes = {}
    for no, x in read_jsonl_numbered(path, own=True):
        tid, task = x.get("id"), x.get("task")
        row = task.get("row") if isinstance(task, dict) else None
        if not isinstance(tid, str) or want.get(tid) != _row_key(row) or x.get("end_reason") is None:
            continue
        try:
            traj = Trajectory.from_dict(x)
        except TrajectoryError as e:
            raise EvalError(f"{path}:{no}: {e}") from None
        out[(str(x.get("side")), tid)] = (x, traj)
    return out


def trajectory_sha(line: dict[str, Any]) -> str:
    return sha(json.dumps({k: v for k, v in line.items() if k != "side"}, sort_keys=True, default=str))


# --------------------------------------------------------------------------- episodes


def run_side(
    cfg: EpisodeEvalConfig,
    side: str,
    src: PolicySource,
    spec: EnvSpec,
    make_env: Any,
    tasks: list[tuple[str, dict[str, Any]]],
    path: Path,
    progress: Any,
) -> float:
    """Run ``side``'s missing episodes batch by batch; the seconds spent (0 when none were missing:
    the model is then never loaded)."""
    from grm.engines.base import SamplingParams
    from grm.envs.episodes import EpisodeLimits, EpisodeRunner
    from grm.evaluation import policy_source

    done = done_episodes(path, tasks)
    todo = [(i, tid, row) for i, (tid, row) in enumerate(tasks) if (side, tid) not in done]
    if not todo:
        return 0.0
    t0 = time.perf_counter()
    task = progress.add_task(escape_controls(f"episodes {side}: loading {src.describe()}"), total=len(todo))
    engine = policy_source.load_engine(src, max_batch_size=max(cfg.batch_size, 1))
    runner = EpisodeRunner(engine, engine.tokenizer, EpisodeLimits.of(spec))
    sp = SamplingParams(n=1, temperature=cfg.temperature, max_new_tokens=cfg.max_new_tokens, stop=src.stop, seed=cfg.seed)
    progress.update(task, description=f"episodes {side}")
    for at in range(0, len(todo), cfg.batch_size):
        chunk = todo[at : at + cfg.batch_size]
        trajs = runner.run(
            make_env,
            [row for _, _, row in chunk],
            sp,
            seeds=[episode_seed(cfg.seed, i) for i, _, _ in chunk],
            ids=[tid for _, tid, _ in chunk],
        )
        append_jsonl(path, [{"side": side, **t.to_dict()} for t in trajs])
        progress.update(task, advance=len(chunk))
    del engine, runner
    gc.collect()  # the next side's model, or the judges', loads next
    return time.perf_counter() - t0


# --------------------------------------------------------------------------- judges


def _key(judge: Judge, side: str, tid: str, line: dict[str, Any]) -> tuple[str, ...]:
    return (judge.spec.name, judge.spec_hash, side, tid, trajectory_sha(line))


def _line_key(x: dict[str, Any]) -> tuple[str, ...]:
    return (x["judge"], x["spec_sha256"], x["side"], x["task_id"], x["trajectory_sha"])


def _sample(side: str, tid: str, traj: Trajectory) -> Sample:
    users = [str(m.get("content") or "") for m in traj.task.messages if m.get("role") == "user"]
    ref = traj.task.row.get("reference")
    return Sample(
        prompt=users[-1] if users else "",
        reference=ref if isinstance(ref, str) else None,
        id=f"{side}/{tid}",
        trajectory=traj,
    )


def score_episodes(judges: list[Judge], episodes: Episodes, path: Path, batch_size: int, progress: Any) -> None:
    """Every judge on every trajectory it has not scored yet (``Sample(trajectory=...)``), batch by batch."""
    done = {_line_key(x) for x in read_jsonl(path, own=True) if "trajectory_sha" in x}
    for judge in judges:
        work = [(s, tid, line, t) for (s, tid), (line, t) in episodes.items() if _key(judge, s, tid, line) not in done]
        if not work:
            continue
        task = progress.add_task(escape_controls(f"judge {judge.spec.name}"), total=len(work))
        for at in range(0, len(work), batch_size):
            chunk = work[at : at + batch_size]
            try:
                res = judge.score_batch([_sample(s, tid, t) for s, tid, _, t in chunk])
            except JudgeError as e:
                raise EvalError(f"judge '{judge.spec.name}': {e}") from None
            lines = []
            for (s, tid, line, _), r in zip(chunk, res, strict=True):
                lines.append(
                    {
                        "judge": judge.spec.name,
                        "spec_sha256": judge.spec_hash,
                        "mode": judge.spec.mode,
                        "side": s,
                        "task_id": tid,
                        "trajectory_sha": trajectory_sha(line),
                        "score": r.score,
                        "masked": r.score is None,
                        "parse_failures": r.parse_failures,
                        "samples_total": len(r.samples),
                        "tokens": r.tokens,
                        "seconds": r.seconds,
                        "result": r.to_dict(),
                    }
                )
            append_jsonl(path, lines)
            progress.update(task, advance=len(chunk))


def current_results(path: Path, judges: list[Judge], episodes: Episodes) -> list[dict[str, Any]]:
    """The latest results line of each judgment of these judges on the current trajectories."""
    wanted = {_key(j, s, tid, line) for j in judges for (s, tid), (line, _) in episodes.items()}
    latest = {}
    for x in read_jsonl(path, own=True):
        k = _line_key(x) if "trajectory_sha" in x else None
        if k in wanted:
            latest[k] = x
    return list(latest.values())


# --------------------------------------------------------------------------- the command


def run_episode_eval(cfg: EpisodeEvalConfig, console: Any = None) -> dict[str, Any]:
    """Run (or resume) an episode evaluation; returns the summary also written to summary.json."""
    with ExitStack() as held:
        return _run(cfg, console, held)


def _run(cfg: EpisodeEvalConfig, console: Any, held: ExitStack) -> dict[str, Any]:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    from grm.envs.base import env_factory, load_env_class
    from grm.envs.tasks import resolve_split, task_rows
    from grm.evaluation.episode_report import write_episode_outputs
    from grm.terminal import console as literal_console

    console = console or literal_console(stderr=True)
    if cfg.batch_size < 1 or cfg.max_new_tokens < 1 or cfg.temperature < 0 or cfg.limit < 1:
        raise EvalError("--batch-size, --max-new-tokens and --limit must be >= 1 and --temperature >= 0")
    spec, base_dir = load_env_spec(cfg.env, cfg.env_args)
    name = spec.type if spec.type != "python" else spec.target  # what errors call it: calc, FILE.py:Class
    make_env = env_factory(name, spec.kwargs, base_dir)  # a bad class or argument fails here, once
    cls = load_env_class(name, base_dir)
    split = resolve_split(cls, name, cfg.split)
    tasks = [(f"{split}-{i}", row) for i, row in enumerate(task_rows(cls, name, split, cfg.limit))]
    judges = load_judges(list(cfg.judges), cfg.overrides)
    compare = [j for j in judges if j.spec.mode not in PER_RESPONSE]
    if compare:
        names = ", ".join(f"'{j.spec.name}' ({j.spec.mode})" for j in compare)
        raise EvalError(
            f"judge {names} compares trajectories; grm eval --env scores each episode alone ({', '.join(PER_RESPONSE)})"
        )
    sources = {"policy": resolve_policy(cfg.policy)}
    if cfg.against is not None:
        sources["other"] = resolve_policy(cfg.against)
    sides = list(sources)

    make_dir(cfg.out, EvalError)
    held.enter_context(writer_lock(cfg.out, "grm eval", EvalError))
    env_ident = {**spec.model_dump(mode="json", exclude={"workers"}), "target": resolved_target(name, base_dir)}
    ident = {
        "mode": "episodes",
        "env": env_ident,
        "split": split,
        "policy": sources["policy"].identity(),
        "against": sources["other"].identity() if "other" in sources else None,
        "sampling": {"max_new_tokens": cfg.max_new_tokens, "temperature": cfg.temperature, "seed": cfg.seed},
    }
    record = {
        "policy_ref": cfg.policy,
        "against_ref": cfg.against,
        "env_ref": cfg.env,
        "limit": cfg.limit,
        "judges": [{"name": j.spec.name, "spec_sha256": j.spec_hash, "mode": j.spec.mode} for j in judges],
    }
    check_resume(cfg.out, ident, record, cfg.force)

    resp_path, res_path = cfg.out / "responses.jsonl", cfg.out / "results.jsonl"
    before = done_episodes(resp_path, tasks)
    if before:
        console.print(f"resuming: {len(before)} of {len(tasks) * len(sides)} episodes already in {resp_path}")
    t_start = time.perf_counter()
    seconds = {}
    with Progress(
        TextColumn("{task.description}", style="bold", markup=False),
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        console=console,
    ) as progress:
        for side in sides:
            seconds[side] = run_side(cfg, side, sources[side], spec, make_env, tasks, resp_path, progress)
        episodes = done_episodes(resp_path, tasks)
        score_episodes(judges, episodes, res_path, cfg.batch_size, progress)

    return write_episode_outputs(
        cfg.out,
        [tid for tid, _ in tasks],
        {k: t for k, (_, t) in episodes.items()},
        current_results(res_path, judges, episodes),
        sides,
        extra={
            "policy": {"ref": cfg.policy, **sources["policy"].identity()},
            "against": {"ref": cfg.against, **sources["other"].identity()} if "other" in sources else None,
            "env": {"ref": cfg.env, **env_ident},
            "split": split,
            "sampling": ident["sampling"],
            "judges": {j.spec.name: {"mode": j.spec.mode, "spec_sha256": j.spec_hash} for j in judges},
            "wall_seconds_this_run": time.perf_counter() - t_start,
            "episode_seconds_this_run": seconds,
        },
        console=literal_console(),
    )
