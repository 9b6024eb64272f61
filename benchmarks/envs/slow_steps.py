"""A shipped environment whose steps take longer on some episodes: an emulated slow tool (a web
call, a test suite, a model-played simulated user) for ``benchmarks/episode_throughput.py``.

``env: {type: python, path: envs/slow_steps.py:SlowSteps, kwargs: {env: clarify, seconds: 2.0, every: 4}}``:
each step of every ``every``-th episode this process makes (so a group's episodes differ, and the
share is the same in one process or spread over environment workers) sleeps ``seconds`` before the
shipped environment answers, recorded as the observations' seconds; the other episodes' steps are
as fast as the shipped environment's.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import replace
from typing import Any

from grm.config.env import SHIPPED_ENVS
from grm.envs.base import AssistantMessage, Reset, Step, load_env

_MADE = itertools.count()


class SlowSteps:
    def __init__(self, env: str = "clarify", seconds: float = 0.0, every: int = 4, **kwargs: Any) -> None:
        self.inner = load_env(SHIPPED_ENVS[env], kwargs)
        self.seconds, self.every = float(seconds), int(every)
        self.slow = self.every > 0 and next(_MADE) % self.every == 0

    def reset(self, row: dict[str, Any]) -> Reset:
        return self.inner.reset(row)

    def step(self, message: AssistantMessage) -> Step:
        if not self.slow:
            return self.inner.step(message)
        time.sleep(self.seconds)
        step = self.inner.step(message)
        step.observations = [replace(o, seconds=o.seconds + self.seconds) for o in step.observations]
        return step
