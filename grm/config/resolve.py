"""A pipeline with everything it references loaded once: the one validation ``grm validate`` and
``grm run`` share, so a pipeline that validates is one that runs."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

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


def _resolve(ref: str, base: Path, kind: str, where: str) -> Path:
    try:
        return resolve_path(ref, base, kind)
    except FileNotFoundError as e:
        raise ConfigError(f"{where}: {e}") from None


def load_pipeline(path: str | Path, overrides: Iterable[str] = ()) -> LoadedPipeline:
    """Load a pipeline YAML (path or builtin:NAME), its policy and judge specs, and check what only
    the combination can tell (a model judge without a pool, a judge mode pipelines cannot use, a
    trainer layout grm run cannot start). Every error is a ConfigError naming FILE:LINE."""
    from grm.config import detect_kind, load_judge, load_policy

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
    if spec.train.backend.ranks > 1:
        raise ConfigError(
            f"{located.where(('train', 'backend', 'ranks'))}: train.backend.ranks > 1: multi-rank training "
            "inside `grm run` is not implemented yet (the DeepSpeed backend itself runs multi-rank)"
        )
    policy = load_policy(spec.policy.spec, base, spec.policy.overrides)
    judges = []
    for i, role in enumerate(spec.judges):
        where = located.where(("judges", i, "spec"))
        try:
            jpath = resolve_judge(role.spec, base, role.overrides)
        except FileNotFoundError as e:
            raise ConfigError(f"{where}: {e}") from None
        judge = load_judge(jpath, overrides=role.overrides)
        if judge.mode != "rule" and role.pool is None:
            raise ConfigError(f"{where}: judge '{judge.name}' runs a model and needs a pool")
        if judge.mode == "pairwise":
            raise ConfigError(
                f"{where}: judge '{judge.name}' is pairwise; pipelines score each response, "
                "use a pointwise, listwise or rule judge"
            )
        if judge.mode == "listwise" and spec.algorithm.group_size < 2:
            raise ConfigError(
                f"{where}: judge '{judge.name}' is listwise: it scores a prompt's responses side by side "
                f"and needs algorithm.group_size >= 2 (it is {spec.algorithm.group_size})"
            )
        judges.append(LoadedJudge(role, judge, jpath))
    names = [j.name for j in judges]
    if len(set(names)) != len(names):
        raise ConfigError(
            f"{located.where(('judges',))}: two judges share a name ({', '.join(names)}); rewards and "
            "metrics are keyed by judge name"
        )
    return LoadedPipeline(path, spec, policy, tuple(judges))
