"""A shipped environment whose steps take longer on some episodes: an emulated slow tool (a web
call, a test suite, a model-played simulated user) for ``benchmarks/episode_throughput.py``.

``env: {type: python, path: envs/slow_steps.py:SlowSteps, kwargs: {env: clarify, seconds: 2.0, every: 4}}``:
each step of every ``every``-th episode (by its row's seed) sleeps ``seconds`` before the shipped
environment answers; the other episodes' steps are as fast as the shipped environment's.
"""

from __future__ import annotations

import time
from typing import Any

from grm.config.env import SHIPPED_ENVS
from grm.envs.base import AssistantMessage, Reset, Step, load_env


class SlowSteps:
    def __init__(self, env: str = "clarify", seconds: float = 0.0, every: int = 4, **kwargs: Any) -> None:
        self.inner = load_env(SHIPPED_ENVS[env], kwargs)
        self.seconds, self.every, self.slow = float(seconds), int(every), False

    def reset(self, row: dict[str, Any]) -> Reset:
        self.slow = self.every > 0 and int(row.get("seed", 0)) % self.every == 0
        return self.inner.reset(row)

    def step(self, message: AssistantMessage) -> Step:
        if self.slow:
            time.sleep(self.seconds)
        return self.inner.step(message)
