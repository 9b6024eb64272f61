"""One loop of turns for every episode in flight on an engine, whichever call started it.

``EpisodeRunner.arun`` resets its episodes and hands them to the runner's ``TurnLoop`` (one per
event loop); the loop generates the next turn of every episode that is ready for one, from any
number of concurrent calls, in one engine call, while the other episodes' steps run. So a policy
actor that takes the next rollout call while the last one's episodes wait on their tools (the
policy's ``episodes`` calls run concurrently) keeps its engine generating instead of idle: the
episodes of the next chunk or step fill the gaps the slow tools leave.

When to generate is ``turn_wait_s``: None, lockstep (once every step in flight has answered, one
call for every ready episode; episodes that arrive meanwhile join it); a number or ``"auto"`` (the
last engine call's seconds): once one episode is ready (its step answered, or just admitted), the
engine waits at most that long for the steps still running, then generates for the ready ones.

Episodes are batched by their sampling (a call's ``SamplingParams`` without seed and abort: every
episode carries its own seed); an engine call is aborted only when every call with an episode in it
is (``SamplingParams.abort``, or the call's task cancelled), and the aborted calls get
``GenerationAborted`` while the others go on. Any other engine failure is every waiting call's
(the run's) error.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, Literal

from grm.engines.base import Generation, GenerationAborted, GenerationRequest, SamplingParams
from grm.envs.base import AssistantMessage, Step
from grm.envs.episode_state import Episode, EpisodeTurns

Generate = Callable[[list[GenerationRequest], SamplingParams], list[Generation]]
StepFn = Callable[[Episode, AssistantMessage], Coroutine[Any, Any, Step | None]]


class _Call:
    """One ``run``'s episodes: done once none of them is live."""

    def __init__(self, episodes: Sequence[Episode], sampling: SamplingParams, done: asyncio.Future[None]) -> None:
        self.episodes, self.sampling, self.done = list(episodes), sampling, done
        self.dropped = False
        """The caller stopped waiting (cancelled): its episodes take no more turns."""

    def aborted(self) -> bool:
        return self.dropped or (self.sampling.abort is not None and self.sampling.abort())


class TurnLoop:
    """The turns of every admitted episode on one engine (see the module docstring)."""

    def __init__(
        self,
        generate: Generate,
        turns: EpisodeTurns,
        step: StepFn,
        turn_wait_s: float | Literal["auto"] | None,
    ) -> None:
        self.generate, self.turns, self.step, self.turn_wait_s = generate, turns, step, turn_wait_s
        self.ready: list[Episode] = []
        """Episodes waiting for their next turn (admitted, or their step answered)."""
        self.stepping: dict[asyncio.Task[Step | None], Episode] = {}
        self.calls: list[_Call] = []
        self.busy_s = 0.0
        """Seconds the engine has spent generating, over the loop's life."""
        self.last_s = 0.0
        """The last engine call's seconds."""
        self.wake = asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    async def run(self, episodes: Sequence[Episode], sampling: SamplingParams) -> None:
        """Until every one of ``episodes`` (already reset) has ended. Raises ``GenerationAborted``
        when the call was aborted, and the engine's error when it failed."""
        call = _Call(episodes, sampling, asyncio.get_running_loop().create_future())
        self.calls.append(call)
        for e in episodes:
            e.call = call
        self.ready += [e for e in episodes if e.live]
        self._finish_calls()
        self.wake.set()
        if self.task is None or self.task.done():
            self.task = asyncio.create_task(self._serve())
        try:
            await asyncio.shield(call.done)
        except asyncio.CancelledError:
            call.dropped = True
            self._forget(call)
            raise

    # ------------------------------------------------------------------ the loop

    async def _serve(self) -> None:
        try:
            while True:
                await self._wait_for_turns()
                self.wake.clear()
                self._settle()
                live, self.ready = self._due(self.ready), []
                self._finish_calls()
                if not live:
                    if self.stepping or self.ready:
                        continue
                    return
                for sampling, group in _by_sampling(live).items():
                    await self._generate(sampling, group)
                self._finish_calls()
        except Exception as x:  # noqa: BLE001 - the engine's failure is every waiting call's
            for call in self.calls:
                if not call.done.done():
                    call.done.set_exception(x)
            self.calls.clear()
            self.ready.clear()
            for t in self.stepping:
                t.cancel()
            self.stepping.clear()

    async def _wait_for_turns(self) -> None:
        """Until it is time to generate: lockstep, every step in flight answered; else one episode
        ready (a step answered, or an admission), then at most the turn wait for the other steps."""
        if not self.stepping:
            return
        if self.turn_wait_s is None:
            await asyncio.wait(self.stepping)
            return
        if not self.ready:
            woken = asyncio.ensure_future(self.wake.wait())
            try:
                await asyncio.wait([*self.stepping, woken], return_when=asyncio.FIRST_COMPLETED)
            finally:
                woken.cancel()
        if self.stepping:
            wait = self.last_s if self.turn_wait_s == "auto" else float(self.turn_wait_s)
            await asyncio.wait(self.stepping, timeout=wait)

    def _settle(self) -> None:
        """Answered steps: recorded, their episodes ready for a turn (unless it ended them)."""
        for task in [t for t in self.stepping if t.done()]:
            e = self.stepping.pop(task)
            call = e.call
            if call is None or call.dropped or task.cancelled():
                continue
            step = task.result()
            if step is not None:
                self.turns.after_step(e, step, call.sampling)
            self.ready.append(e)

    def _due(self, ready: list[Episode]) -> list[Episode]:
        """The ready episodes that may take a turn (the others' limits end them here); an aborted
        call's are dropped, and it gets ``GenerationAborted``."""
        for call in [c for c in self.calls if c.aborted()]:
            self._abort(call)
        out = []
        for e in ready:
            call = e.call
            if call is not None and not call.dropped and e.live and self.turns.may_generate(e, call.sampling):
                out.append(e)
        return out

    async def _generate(self, sampling: SamplingParams, live: list[Episode]) -> None:
        live = [e for e in live if e.call is not None]  # a call dropped while another group generated
        if not live:
            return
        calls: list[_Call] = []
        for e in live:
            if e.call not in calls:
                calls.append(e.call)
        sp = sampling.replace(abort=lambda: all(c.aborted() for c in calls))
        requests = [
            GenerationRequest(token_ids=list(e.context), seed=e.seed if e.seed is not None else e.call.sampling.seed)
            for e in live
        ]
        start = time.monotonic()
        try:
            gens = await asyncio.to_thread(self.generate, requests, sp)
        except GenerationAborted:
            for c in calls:
                self._abort(c)
            return
        finally:
            self.last_s = time.monotonic() - start
            self.busy_s += self.last_s
        for e in live:
            e.seconds += self.last_s
        if len(gens) != len(live):
            raise RuntimeError(f"engine returned {len(gens)} generations for {len(live)} requests")
        for e, g in zip(live, gens, strict=True):
            if e.call is None:  # its call was cancelled meanwhile
                continue
            start = time.monotonic()
            message = self.turns.assistant_turn(e, g)  # on the loop: parsing is linear in the turn's text
            e.seconds += time.monotonic() - start  # the episode's own time, like its steps
            if e.live:
                self.stepping[asyncio.create_task(self.step(e, message))] = e

    def _finish_calls(self) -> None:
        for call in [c for c in self.calls if not any(e.live for e in c.episodes)]:
            if not call.done.done():
                call.done.set_result(None)
            self._forget(call)

    def _abort(self, call: _Call) -> None:
        call.dropped = True
        if not call.done.done():
            call.done.set_exception(GenerationAborted())
        self._forget(call)

    def _forget(self, call: _Call) -> None:
        if call in self.calls:
            self.calls.remove(call)
        for e in call.episodes:
            e.call = None
        self.ready = [e for e in self.ready if e.call is not None]
        for task in [t for t, e in self.stepping.items() if e.call is None]:  # a dropped call's steps
            task.cancel()
            del self.stepping[task]


def _by_sampling(live: list[Episode]) -> dict[SamplingParams, list[Episode]]:
    """Episodes grouped by their call's sampling, seed and abort aside (each episode has its own)."""
    out: dict[SamplingParams, list[Episode]] = {}
    for e in live:
        key = e.call.sampling.replace(seed=None, abort=None)
        out.setdefault(key, []).append(e)
    return out
