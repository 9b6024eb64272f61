"""Building judges: the registry of judge constructors by ``mode``, ``build_judge`` and ``load``.

Model judges (pointwise, pairwise, listwise) are one ``ModelJudge`` (``grm.judges.model``) holding a
``CritiqueSampler`` and the mode's ``JudgeMode``, which decides only what it shows the judge and how
the critiques combine; a checklist judge (``grm.judges.checklist``) asks the same sampler one yes/no
question at a time; rule judges run a verifier. Every judge implements the ``Judge`` protocol
(``grm.judges.base``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path

from grm.config.judge import JudgeSpec
from grm.config.paths import resolve_judge
from grm.engines.base import GenerationEngine
from grm.judges.base import Judge
from grm.judges.checklist import ChecklistJudge
from grm.judges.errors import JudgeError
from grm.judges.listwise import ListwiseMode
from grm.judges.model import ModelJudge
from grm.judges.pairwise import PairwiseMode
from grm.judges.pointwise import PointwiseMode
from grm.judges.rule import RuleJudge

JudgeConstructor = Callable[[JudgeSpec, "Path | str | None", "GenerationEngine | None"], Judge]

JUDGES: dict[str, JudgeConstructor] = {
    "pointwise": partial(ModelJudge, mode=PointwiseMode),
    "pairwise": partial(ModelJudge, mode=PairwiseMode),
    "listwise": partial(ModelJudge, mode=ListwiseMode),
    "checklist": ChecklistJudge,
    "rule": RuleJudge,
}
"""The judge constructor for each ``mode:`` of a judge spec: ``(spec, base_dir, engine) -> Judge``."""


def build_judge(spec: JudgeSpec, base_dir: Path | str | None = None, engine: GenerationEngine | None = None) -> Judge:
    """The judge for ``spec``; relative paths resolve against ``base_dir`` (default: the working
    directory). ``engine`` defaults to a shared hf engine for ``spec.model``, loaded on first use."""
    make = JUDGES.get(spec.mode)
    if make is None:
        raise JudgeError(f"unknown judge mode '{spec.mode}'; known: {', '.join(JUDGES)}")
    return make(spec, base_dir, engine)


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
