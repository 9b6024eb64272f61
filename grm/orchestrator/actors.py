"""Ray actors that host models on a pool. Imported only where Ray is in use."""

from __future__ import annotations

from typing import Any, Sequence

import ray


@ray.remote
class EngineActor:
    """A generation engine living in its own process (one per pool role)."""

    def __init__(self, model: str, dtype: str = "bf16", threads: int | None = 1, max_batch_size: int = 32) -> None:
        from grm.engines.hf import HFEngine

        self.engine = HFEngine(model, dtype=dtype, threads=threads, max_batch_size=max_batch_size)

    def generate(self, requests: Sequence[Any], sampling: Any) -> list[Any]:
        return self.engine.generate(requests, sampling)

    def score_continuations(self, requests: Sequence[Any], continuations: Sequence[Sequence[str]]) -> list[list[float]]:
        return self.engine.score_continuations(requests, continuations)

    def sequence_logprobs(self, prompts: Sequence[Sequence[int]], completions: Sequence[Sequence[int]]) -> list[list[float]]:
        return self.engine.sequence_logprobs(prompts, completions)

    def update_weights(self, state_dict: dict[str, Any], version: int) -> int:
        self.engine.update_weights(state_dict, version)
        return self.engine.version

    def version(self) -> int:
        return self.engine.version
