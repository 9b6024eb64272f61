"""Which engine a model judge sends its requests to: the one it was given, or the process's shared
engine for its model, loaded on first use (``EngineSlot``).

Judges naming the same model and weights share one loaded engine: ``shared_engine`` keeps one per
(model, engine spec) in this process, and a meta-judge on its parent's weights holds its parent's
slot, so neither loads a second copy.
"""

from __future__ import annotations

from typing import Any

from grm.config.judge import JudgeSpec
from grm.config.policy import EngineSpec, OpenAIEngineSpec
from grm.engines.base import GenerationEngine

_ENGINES: dict[str, GenerationEngine] = {}


def shared_engine(model: str, spec: Any) -> GenerationEngine:
    """One engine per (model, engine spec) in this process, shared by every judge that names it."""
    key = f"{model}|{spec.model_dump_json()}"
    if key not in _ENGINES:
        from grm.engines import build_engine

        _ENGINES[key] = build_engine(spec, model)
    return _ENGINES[key]


def same_weights(a: EngineSpec, b: EngineSpec) -> bool:
    """Whether two judges naming the same model can share one engine: local engines loading it in
    the same dtype can; a server is shared only when everything about it is the same."""
    if isinstance(a, OpenAIEngineSpec) or isinstance(b, OpenAIEngineSpec):
        return a == b
    return a.type == b.type and a.dtype == b.dtype


class EngineSlot:
    """A judge's engine: ``given``, else ``shared_engine(spec.model, spec.engine)`` on first use."""

    def __init__(self, spec: JudgeSpec, given: GenerationEngine | None = None) -> None:
        self.model = spec.model or ""
        self.engine_spec = spec.engine
        self._engine = given

    @property
    def engine(self) -> GenerationEngine:
        if self._engine is None:
            self._engine = shared_engine(self.model, self.engine_spec)
        return self._engine

    @property
    def loaded(self) -> GenerationEngine | None:
        """The engine when it is given or loaded, else None (rendering before any scoring)."""
        return self._engine

    def serves(self, spec: JudgeSpec) -> bool:
        """Whether a judge with ``spec`` (a meta-judge) may send to this slot's engine."""
        return spec.model == self.model and same_weights(spec.engine, self.engine_spec)
