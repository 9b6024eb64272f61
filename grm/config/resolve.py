"""A pipeline with everything it references loaded once: the one validation ``grm validate`` and
``grm run`` share, so a pipeline that validates is one that runs."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grm.config.env import EnvSpec
from grm.config.judge import JudgeSpec
from grm.config.loading import ConfigError, apply_overrides, load_yaml, validate
from grm.config.paths import resolve_judge, resolve_path
from grm.config.pipeline import JudgeRole, PipelineSpec
from grm.config.policy import PolicySpec


@dataclass(frozen=True)
class LoadedJudge:
    """A pipeline's judge entry with its spec loaded (overrides applied) and its file resolved."""

    role: JudgeRole
    spec: JudgeSpec
    path: Path

    @property
    def name(self) -> str:
        return self.spec.name


@dataclass(frozen=True)
class LoadedPipeline:
    path: Path
    spec: PipelineSpec
    policy: PolicySpec
    judges: tuple[LoadedJudge, ...]
    heldout: tuple[tuple[JudgeSpec, Path], ...] = ()
    """``heldout.judges``: the rule verifiers of the held-out check, loaded, with their files."""


def _resolve(ref: str, base: Path, kind: str, where: str) -> Path:
    try:
        return resolve_path(ref, base, kind)
    except FileNotFoundError as e:
        raise ConfigError(f"{where}: {e}") from None


def _absolute_env(env: EnvSpec, base: Path, where: str) -> EnvSpec:
    """``env.path``'s ``FILE.py`` made absolute against the pipeline's directory (checked to be a
    file), so the policy actors load it whatever their working directory; a module path is kept."""
    file, _, cls = str(env.path).rpartition(":")
    if not (file.endswith(".py") or "/" in file):
        return env
    found = (base / file).resolve()
    if not found.is_file():
        raise ConfigError(f"{where}: environment file {file} not found (relative to {base})")
    return env.model_copy(update={"path": f"{found}:{cls}"})


def load_pipeline(path: str | Path, overrides: Iterable[str] = ()) -> LoadedPipeline:
    """Load a pipeline YAML (path or builtin:NAME), its policy and judge specs, and check what only
    the combination can tell (a model judge without a pool, a judge mode pipelines cannot use, a
    trainer layout grm run cannot start). Every error is a ConfigError naming FILE:LINE."""
    from grm.config import detect_kind, load_policy

    path = _resolve(str(path), Path.cwd(), "pipelines", "grm run") if str(path).startswith("builtin:") else Path(path)
    located = load_yaml(path)
    kind = detect_kind(located.data)
    if kind != "pipeline":
        raise ConfigError(
            f"{path}: this is a {kind} spec, not a pipeline; a pipeline YAML has pools, policy, "
            f"judges and data (see pipelines/quickstart.yaml)"
        )
    apply_overrides(located, overrides, PipelineSpec)
    spec: PipelineSpec = validate(PipelineSpec, located)
    base = path.parent
    if not spec.data.prompts.startswith("builtin:"):
        # relative to the pipeline file, as validation checked it, whatever the working directory
        data = spec.data.model_copy(
            update={"prompts": str(_resolve(spec.data.prompts, base, "pipelines", located.where(("data", "prompts"))).resolve())}
        )
        spec = spec.model_copy(update={"data": data})
    if not spec.policy.spec.startswith("builtin:"):
        # absolute in the run's config.resolved.yaml too: ``grm eval --policy RUN_DIR`` finds the
        # policy spec (its model, system prompt) from there without the pipeline file's directory
        role = spec.policy.model_copy(
            update={"spec": str(_resolve(spec.policy.spec, base, "policy", located.where(("policy", "spec"))).resolve())}
        )
        spec = spec.model_copy(update={"policy": role})
    spec = _absolute_judge_data(spec, located, base)
    if spec.env is not None and spec.env.path is not None:
        spec = spec.model_copy(update={"env": _absolute_env(spec.env, base, located.where(("env", "path")))})
    check_ranks(spec, located)
    policy = load_policy(spec.policy.spec, base, spec.policy.overrides)
    check_interruptible(spec, policy.engine.type, located)
    judges = []
    for i, role in enumerate(spec.judges):
        where = located.where(("judges", i, "spec"))
        judge, jpath = _judge_file(role.spec, base, role.overrides, where)
        if judge.mode != "rule" and role.pool is None:
            raise ConfigError(f"{where}: judge '{judge.name}' runs a model and needs a pool")
        if judge.mode == "pairwise":
            spec = check_pairwise(judge, spec, where)
        if judge.checklist is not None and judge.checklist.source == "data" and spec.data.checklist_field is None:
            raise ConfigError(
                f"{where}: judge '{judge.name}' reads each prompt's checklist from the data (checklist.source: data), "
                "but data.checklist_field is null; name the column holding the checklists (e.g. checklist_field: checklist)"
            )
        _constraints_column(judge, spec, where)
        if judge.mode == "listwise" and spec.algorithm.group_size < 2:
            raise ConfigError(
                f"{where}: judge '{judge.name}' is listwise: it scores a prompt's responses side by side "
                f"and needs algorithm.group_size >= 2 (it is {spec.algorithm.group_size})"
            )
        judges.append(LoadedJudge(role, judge, jpath))
    if spec.data.judge_prompts is not None:
        spec = _judge_prompts(spec, located, base)
    spec, heldout = _heldout(spec, located, base)
    names = [j.name for j in judges]
    if len(set(names)) != len(names):
        raise ConfigError(
            f"{located.where(('judges',))}: two judges share a name ({', '.join(names)}); rewards and "
            "metrics are keyed by judge name"
        )
    return LoadedPipeline(path, spec, policy, tuple(judges), heldout)


def _heldout(spec: PipelineSpec, located: Any, base: Path) -> tuple[PipelineSpec, tuple[tuple[JudgeSpec, Path], ...]]:
    """``heldout:``'s prompt source made absolute and its rule verifiers loaded: a judge that runs a
    model, or a constraints verifier without ``data.constraints_field``, is refused naming its entry."""

    h = spec.heldout
    if h is None:
        return spec, ()
    if not h.prompts.startswith("builtin:"):
        prompts = str(_resolve(h.prompts, base, "pipelines", located.where(("heldout", "prompts"))).resolve())
        spec = spec.model_copy(update={"heldout": h.model_copy(update={"prompts": prompts})})
    if spec.heldout.prompts == spec.data.prompts:  # both resolved
        raise ConfigError(
            f"{located.where(('heldout', 'prompts'))}: heldout.prompts is data.prompts; a held-out check needs "
            "prompts the run never trains on"
        )
    out = []
    for i, ref in enumerate(h.judges):
        where = located.where(("heldout", "judges", i))
        judge, jpath = _judge_file(ref, base, (), where)
        if judge.mode != "rule":
            raise ConfigError(
                f"{where}: judge '{judge.name}' runs a model; the held-out check is scored by rule verifiers "
                "(mode: rule) only, so the policy's training judge cannot grade its own test"
            )
        _constraints_column(judge, spec, where)  # the held-out prompts are read with data:'s columns
        out.append((judge, jpath))
    return spec, tuple(out)


def _judge_prompts(spec: PipelineSpec, located: Any, base: Path) -> PipelineSpec:
    """``data.judge_prompts`` checked (a pairwise chat judge with a template and no principles stage:
    its prompt is what the policy is asked) and made absolute for the run's resolved config."""
    from grm.config import load_judge

    where = located.where(("data", "judge_prompts"))
    try:
        path = resolve_judge(str(spec.data.judge_prompts), base)
    except FileNotFoundError as e:
        raise ConfigError(f"{where}: {e}") from None
    judge = load_judge(path)
    if judge.mode != "pairwise" or judge.template is None or not judge.chat or judge.principles is not None:
        raise ConfigError(
            f"{where}: judge '{judge.name}' cannot frame a judge's training prompts: it needs mode pairwise, a "
            f"template, chat: true and no principles stage (it has mode {judge.mode}, chat {judge.chat}, "
            f"principles {'yes' if judge.principles else 'no'})"
        )
    return spec.model_copy(update={"data": spec.data.model_copy(update={"judge_prompts": str(path.resolve())})})


def _absolute_judge_data(spec: PipelineSpec, located: Any, base: Path) -> PipelineSpec:
    """The judges' gate and canary data files made absolute (relative to the pipeline file, as
    validation checked them), so the run directory's resolved config works from anywhere."""
    roles = []
    for i, role in enumerate(spec.judges):
        update = {}
        for key in ("gate", "canary"):
            check = getattr(role, key)
            if check is not None and not check.data.startswith("builtin:"):
                path = _resolve(check.data, base, "pipelines", located.where(("judges", i, key, "data")))
                update[key] = check.model_copy(update={"data": str(path.resolve())})
        roles.append(role.model_copy(update=update) if update else role)
    return spec.model_copy(update={"judges": roles})


def check_pairwise(judge: JudgeSpec, spec: PipelineSpec, where: str) -> PipelineSpec:
    """A pairwise judge compares a group's responses (``judge.groups``): in both orders, with
    partners to compare, and with its anchor available. An anchor of greedy responses (the
    current policy's, or an earlier step's: ``previous``) turns on ``rollout.greedy_anchor``;
    returns the pipeline spec, so changed."""
    g = judge.groups
    if not judge.position.swap:
        raise ConfigError(
            f"{where}: judge '{judge.name}' is pairwise; inside a group it compares each pair in both orders, "
            "so it needs position.swap: true (add overrides: [position.swap=true])"
        )
    if g.strategy != "anchor" and spec.algorithm.group_size < 2:
        raise ConfigError(
            f"{where}: judge '{judge.name}' compares a group's responses with each other (groups.strategy "
            f"'{g.strategy}') and needs algorithm.group_size >= 2 (it is {spec.algorithm.group_size}); "
            "or use groups.strategy: anchor"
        )
    by_reference = g.anchor == "reference" or (g.anchor == "previous" and g.fallback == "reference")
    if g.strategy == "anchor" and by_reference and spec.data.reference_field is None:
        what = (
            "groups.anchor: reference" if g.anchor == "reference" else "groups.fallback: reference, for prompts not seen before"
        )
        raise ConfigError(
            f"{where}: judge '{judge.name}' compares every response with the prompt's reference answer "
            f"({what}), but data.reference_field is null"
        )
    # the previous anchor is an earlier step's greedy response: the store is fed with this step's
    if g.strategy == "anchor" and g.anchor in ("greedy", "previous") and not spec.rollout.greedy_anchor:
        spec = spec.model_copy(update={"rollout": spec.rollout.model_copy(update={"greedy_anchor": True})})
    return spec


def check_ranks(spec: PipelineSpec, located: Any) -> None:
    """A multi-rank policy's layout: one bundle per rank, ``ranks / nodes`` per node of its pool,
    each with a whole share of the node's CPUs and GPUs, and the pool to itself."""
    ranks = spec.train.backend.ranks
    if ranks == 1:
        return
    where = located.where(("train", "backend", "ranks"))
    name = spec.policy.pool
    pool = spec.pools[name]
    if spec.train.backend.type != "deepspeed":
        raise ConfigError(f"{where}: train.backend.ranks {ranks} needs the deepspeed backend (torch trains on one rank)")
    if ranks % pool.nodes:
        raise ConfigError(f"{where}: {ranks} ranks do not spread evenly over pool '{name}''s {pool.nodes} nodes")
    per_node = ranks // pool.nodes
    for what, n in (("cpus", pool.cpus), ("gpus", pool.gpus)):
        if n % per_node or (what == "cpus" and n < per_node):
            raise ConfigError(
                f"{located.where(('pools', name, what))}: pool '{name}' has {n} {what} per node for {per_node} policy "
                f"rank(s) per node (train.backend.ranks {ranks} over {pool.nodes} node(s)); each rank needs an equal, whole share"
            )
    others = [f"judges[{i}]" for i, j in enumerate(spec.judges) if j.pool == name]
    if others:
        raise ConfigError(
            f"{located.where(('judges',))}: {', '.join(others)} share pool '{name}' with a {ranks}-rank policy, whose "
            "ranks take every bundle of it; give the judges a pool of their own"
        )


def check_interruptible(spec: PipelineSpec, engine: str, located: Any) -> None:
    """``schedule.interruptible`` needs a rollout that can run beside training: a served engine, single answers."""
    if not spec.schedule.interruptible:
        return
    where = located.where(("schedule", "interruptible"))
    if engine != "sglang":
        raise ConfigError(
            f"{where}: interruptible rollouts need a served policy engine (policy.engine.type: sglang); the {engine} "
            "engine generates in the trainer's own process, so a rollout cannot run beside training"
        )
    if spec.env is not None:
        raise ConfigError(
            f"{where}: an env: run's episodes already run beside training and take new weights between turns; "
            "interruptible applies to single answers"
        )


def _judge_file(ref: str, base: Path, overrides: Iterable[str], where: str) -> tuple[JudgeSpec, Path]:
    """The judge spec ``ref`` names (a path or ``builtin:NAME``) with ``overrides``, and its file."""
    from grm.config import load_judge

    overrides = list(overrides)
    try:
        jpath = resolve_judge(ref, base, overrides)
    except FileNotFoundError as e:
        raise ConfigError(f"{where}: {e}") from None
    return load_judge(jpath, overrides=overrides), jpath


def _constraints_column(judge: JudgeSpec, spec: PipelineSpec, where: str) -> None:
    """A ``constraints`` verifier reads each prompt's constraints: ``data.constraints_field`` must name them."""
    if judge.rule is not None and judge.rule.type == "constraints" and spec.data.constraints_field is None:
        raise ConfigError(
            f"{where}: judge '{judge.name}' verifies each prompt's constraints from the data, but "
            "data.constraints_field is null; name the column holding them (e.g. constraints_field: constraints)"
        )
