"""Building judges: the registry of judge constructors by ``mode``, ``build_judge`` and ``load``.

Model judges (pointwise, pairwise, listwise) are one ``ModelJudge`` (``grm.judges.model``) holding the
mode's ``JudgeMode``, which decides only what it shows the judge and how the critiques combine; a
checklist judge (``grm.judges.checklist``) reads one yes/no question at a time with a ``ModelJudge``;
rule judges run a verifier. ``build_judge`` builds a spec's meta-judge (``aggregate.type: meta``)
first and hands it in. Every judge implements the ``Judge`` protocol (``grm.judges.base``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from grm.config.judge import JudgeSpec
from grm.config.paths import resolve_judge
from grm.engines.base import GenerationEngine
from grm.judges.base import Judge
from grm.judges.checklist import ChecklistJudge
from grm.judges.engine_slot import EngineSlot
from grm.judges.errors import JudgeError
from grm.judges.listwise import ListwiseMode
from grm.judges.model import ModelJudge
from grm.judges.pairwise import PairwiseMode
from grm.judges.pointwise import PointwiseMode
from grm.judges.rule import RuleJudge

JudgeConstructor = Callable[[JudgeSpec, Path, EngineSlot, "Judge | None"], Judge]

JUDGES: dict[str, JudgeConstructor] = {
    "pointwise": lambda spec, base_dir, slot, meta: ModelJudge(spec, base_dir, slot, mode=PointwiseMode, meta=meta),
    "pairwise": lambda spec, base_dir, slot, meta: ModelJudge(spec, base_dir, slot, mode=PairwiseMode, meta=meta),
    "listwise": lambda spec, base_dir, slot, meta: ModelJudge(spec, base_dir, slot, mode=ListwiseMode, meta=meta),
    "checklist": ChecklistJudge,
    "rule": lambda spec, base_dir, slot, meta: RuleJudge(spec, base_dir, slot),
}
"""The judge constructor for each ``mode:`` of a judge spec: ``(spec, base_dir, engine slot, meta-judge) -> Judge``."""


def build_judge(spec: JudgeSpec, base_dir: Path | str | None = None, engine: GenerationEngine | None = None) -> Judge:
    """The judge for ``spec``; relative paths resolve against ``base_dir`` (default: the working
    directory). ``engine`` defaults to a shared hf engine for ``spec.model``, loaded on first use."""
    return _build(spec, Path(base_dir) if base_dir else Path.cwd(), EngineSlot(spec, engine), ())


MAX_META_DEPTH = 4
"""Meta judges above a judge: a meta judge of a meta judge is already rare."""


def _build(spec: JudgeSpec, base_dir: Path, slot: EngineSlot, above: tuple[str, ...]) -> Judge:
    make = JUDGES.get(spec.mode)
    if make is None:
        raise JudgeError(f"unknown judge mode '{spec.mode}'; known: {', '.join(JUDGES)}")
    meta = None
    if spec.aggregate.type == "meta":
        from grm.config import load_judge
        from grm.config.paths import resolve_judge

        ref = spec.aggregate.meta_judge or ""
        try:
            where = str(resolve_judge(ref, base_dir).resolve())
        except FileNotFoundError as e:
            raise JudgeError(f"judge '{spec.name}': meta_judge {ref!r}: {e}") from None
        if where in above:
            raise JudgeError(f"judge '{spec.name}': meta_judge {ref!r} leads back to a judge above it (a cycle: {where})")
        if len(above) >= MAX_META_DEPTH:
            raise JudgeError(f"judge '{spec.name}': meta judges nested more than {MAX_META_DEPTH} deep")
        meta_spec = load_judge(ref, base_dir)
        # a meta-judge on the same weights sends to its parent's engine (one copy loaded)
        # its paths are relative to its own file, as they were checked when it loaded
        meta = _build(meta_spec, Path(where).parent, slot if slot.serves(meta_spec) else EngineSlot(meta_spec), (*above, where))
    return make(spec, base_dir, slot, meta)


def load_engine(judge: Judge) -> GenerationEngine | None:
    """The judge model's engine, loaded now if it is not yet (None for a rule verifier)."""
    if isinstance(judge, ChecklistJudge):
        judge = judge.reader
    return judge.sampler.engine if isinstance(judge, ModelJudge) else None


def load(
    ref: str | Path, base_dir: Path | None = None, engine: GenerationEngine | None = None, overrides: Sequence[str] = ()
) -> Judge:
    """Load a judge from a spec path or ``builtin:NAME``."""
    from grm.config import load_judge

    try:
        path = resolve_judge(str(ref), base_dir or Path.cwd(), overrides)
    except FileNotFoundError as e:
        raise JudgeError(str(e)) from None
    return build_judge(load_judge(path, overrides=overrides), path.parent, engine)
