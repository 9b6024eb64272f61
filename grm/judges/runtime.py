"""Building judges: the registry of judge classes by ``mode``, ``build_judge`` and ``load``.

Model judges (pointwise, pairwise, listwise) share one ``CritiqueSampler`` (``grm.judges.sampler``)
and differ only in what they show the judge and how its critiques combine; rule judges run a
verifier. Every class implements the ``Judge`` protocol (``grm.judges.base``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from grm.config.judge import JudgeSpec
from grm.config.paths import resolve_judge
from grm.engines.base import GenerationEngine
from grm.judges.base import Judge
from grm.judges.errors import JudgeError
from grm.judges.listwise import ListwiseJudge
from grm.judges.pairwise import PairwiseJudge
from grm.judges.pointwise import PointwiseJudge
from grm.judges.rule import RuleJudge

JudgeClass = Callable[[JudgeSpec, "Path | str | None", "GenerationEngine | None"], Judge]

JUDGES: dict[str, JudgeClass] = {
    "pointwise": PointwiseJudge,
    "pairwise": PairwiseJudge,
    "listwise": ListwiseJudge,
    "rule": RuleJudge,
}
"""The judge class for each ``mode:`` of a judge spec."""


def build_judge(spec: JudgeSpec, base_dir: Path | str | None = None, engine: GenerationEngine | None = None) -> Judge:
    """The judge for ``spec``; relative paths resolve against ``base_dir`` (default: the working
    directory). ``engine`` defaults to a shared hf engine for ``spec.model``, loaded on first use."""
    cls = JUDGES.get(spec.mode)
    if cls is None:
        raise JudgeError(f"unknown judge mode '{spec.mode}'; known: {', '.join(JUDGES)}")
    return cls(spec, base_dir, engine)


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
