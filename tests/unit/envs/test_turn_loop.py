"""One turn loop for concurrent ``EpisodeRunner.arun`` calls (``grm.envs.turn_loop``): a later
call's episodes take their turns while an earlier call's tools run, so the engine is not idle; the
calls' tokens stay exact; a cancelled or aborted call stops alone; an engine failure is every
waiting call's. A scripted engine over the real SmolLM2 tokenizer (no weights)."""

import asyncio
import dataclasses
import threading
import time

import pytest

from grm.engines.base import GenerationAborted, SamplingParams
from grm.envs.episodes import EpisodeRunner
from tests.unit.envs.test_episodes import SMOL, PrintEnv, TimedEnv, TokenEngine, check_exact, tokenizer


class SlowEngine(TokenEngine):
    """A ``TokenEngine`` whose every call takes ``seconds``; records each call's seeds and its
    start and end time."""

    def __init__(self, tok, seconds, fail_on=None):
        super().__init__(tok, lambda key, k: "ok")
        self.seconds, self.fail_on = seconds, fail_on
        self.batches: list = []

    def generate(self, requests, sampling):
        if self.fail_on is not None and len(self.batches) == self.fail_on:
            self.fail_on = None  # once
            raise RuntimeError("engine broke")
        start = time.monotonic()
        time.sleep(self.seconds)
        self.batches.append(({r.seed for r in requests}, start, time.monotonic()))
        return super().generate(requests, sampling)


def envs(delay, n, done_at=3):
    made = iter([TimedEnv(delay, done_at=done_at) for _ in range(n)])
    return made.__next__


SP = SamplingParams(max_new_tokens=8)


def test_a_later_call_takes_its_turns_while_the_earlier_calls_tools_run():
    """Two calls of two episodes, each step a 0.3 s tool and each turn 0.1 s of engine, the second
    call 0.15 s after the first: its turns are generated while the first call's tools run (no engine
    call mixes the two until their phases meet), both finish well before one after the other would
    (2 x 3 x 0.4 s), and every episode's tokens are exactly the engine's."""
    tok = tokenizer(SMOL)
    engine = SlowEngine(tok, 0.1)
    runner = EpisodeRunner(engine, tok, turn_wait_s="auto")

    async def both():
        first = asyncio.create_task(runner.arun(envs(0.3, 2), [{}, {}], SP, seeds=[0, 1], ids=["a0", "a1"]))
        await asyncio.sleep(0.15)
        second = await runner.arun(envs(0.3, 2), [{}, {}], SP, seeds=[2, 3], ids=["b0", "b1"])
        return await first, second

    start = time.monotonic()
    first, second = asyncio.run(both())
    took = time.monotonic() - start
    assert [t.end_reason for t in first + second] == ["done"] * 4
    for key, t in enumerate(first + second):
        check_exact(t, engine, key, tok)
    assert took < 0.75 * (2 * 3 * 0.4), took
    # the second call's first turn was generated while the first call's episodes were in their tools
    second_first = next(b for b in engine.batches if b[0] & {2, 3})
    assert second_first[0] == {2, 3} and second_first[1] - start < 0.15 + 0.3 + 0.1
    for t in first + second:
        assert 0 < t.metadata["engine_busy"] <= 1


def test_lockstep_lets_a_later_call_join_the_next_engine_call():
    """``turn_wait_s=None``: a call admitted while the first call's steps run waits for them and
    then shares every engine call with them."""
    tok = tokenizer(SMOL)
    engine = SlowEngine(tok, 0.02)
    runner = EpisodeRunner(engine, tok, turn_wait_s=None)

    async def both():
        first = asyncio.create_task(runner.arun(envs(0.2, 1), [{}], SP, seeds=[0]))
        await asyncio.sleep(0.1)
        second = await runner.arun(envs(0.2, 1), [{}], SP, seeds=[1])
        return await first, second

    first, second = asyncio.run(both())
    assert [t.end_reason for t in first + second] == ["done", "done"]
    assert [b[0] for b in engine.batches] == [{0}, {0, 1}, {0, 1}, {1}]


def test_a_cancelled_call_stops_taking_turns_and_the_other_goes_on():
    tok = tokenizer(SMOL)
    engine = SlowEngine(tok, 0.02)
    runner = EpisodeRunner(engine, tok, turn_wait_s="auto")
    TimedEnv.closed = []

    async def both():
        doomed = asyncio.create_task(runner.arun(envs(0.2, 2, done_at=6), [{}, {}], SP, seeds=[0, 1]))
        kept = asyncio.create_task(runner.arun(envs(0.05, 2, done_at=4), [{}, {}], SP, seeds=[2, 3]))
        await asyncio.sleep(0.3)
        doomed.cancel()
        with pytest.raises(asyncio.CancelledError):
            await doomed
        cancelled_at = len(engine.batches)
        return await kept, cancelled_at

    kept, cancelled_at = asyncio.run(both())
    assert [t.end_reason for t in kept] == ["done", "done"] and [len(t.turns) for t in kept] == [7, 7]
    for key, t in zip((2, 3), kept, strict=True):
        check_exact(t, engine, key, tok)
    assert all(not (b[0] & {0, 1}) for b in engine.batches[cancelled_at:])
    assert engine.turn[0] < 6 and len(TimedEnv.closed) == 4  # every environment closed, the cancelled ones too


def test_an_aborted_call_gets_generation_aborted_alone():
    tok = tokenizer(SMOL)
    engine = SlowEngine(tok, 0.02)
    runner = EpisodeRunner(engine, tok, turn_wait_s="auto")
    stop = threading.Event()

    async def both():
        aborted = asyncio.create_task(runner.arun(envs(0.1, 1, done_at=8), [{}], SP.replace(abort=stop.is_set), seeds=[0]))
        kept = asyncio.create_task(runner.arun(envs(0.1, 1, done_at=4), [{}], SP, seeds=[1]))
        await asyncio.sleep(0.25)
        stop.set()
        with pytest.raises(GenerationAborted):
            await aborted
        return await kept

    (kept,) = asyncio.run(both())
    assert kept.end_reason == "done" and engine.turn[0] < 8 and engine.turn[1] == 4


def test_an_engine_failure_is_every_waiting_calls_error():
    tok = tokenizer(SMOL)
    runner = EpisodeRunner(SlowEngine(tok, 0.01, fail_on=2), tok, turn_wait_s="auto")

    async def both():
        calls = [runner.arun(envs(0.0, 1, done_at=5), [{}], SP, seeds=[s]) for s in (0, 1)]
        return await asyncio.gather(*calls, return_exceptions=True)

    results = asyncio.run(both())
    assert [type(r).__name__ for r in results] == ["RuntimeError", "RuntimeError"]
    assert all("engine broke" in str(r) for r in results)
    # the runner serves a later call afresh
    (traj,) = asyncio.run(runner.arun(PrintEnv, [{}], SP, seeds=[5]))
    assert traj.end_reason == "done"


class DegenerateEngine(TokenEngine):
    """A ``TokenEngine`` whose turns for the seeds in ``texts`` read as that text (a turn of one
    token repeated: ``<tool_call>`` is one token in Qwen2.5), the ids kept short."""

    def __init__(self, tok, texts):
        super().__init__(tok, lambda key, k: "ok")
        self.texts = texts

    def generate(self, requests, sampling):
        gens = super().generate(requests, sampling)
        return [dataclasses.replace(g, text=self.texts.get(r.seed, g.text)) for g, r in zip(gens, requests, strict=True)]


def test_a_degenerate_turn_of_200000_tags_is_read_at_once_and_holds_up_no_other_episode():
    """Parsing runs on the loop, between engine calls: the scan for each tag's end through the rest
    of the text took 54 s for this turn, and every episode waited for it."""
    tok = tokenizer(SMOL)
    texts = {0: "<tool_call>" * 200_000, 1: "<tool_call>{" * 200_000}
    runner = EpisodeRunner(DegenerateEngine(tok, texts), tok, turn_wait_s="auto")
    start = time.monotonic()
    prose, calls, fine = runner.run(PrintEnv, [{}, {}, {}], SP, seeds=[0, 1, 2])
    assert time.monotonic() - start < 5
    assert prose.turns[0].tool_calls == [] and prose.turns[0].tool_call_error is None  # tags alone are no call
    assert calls.turns[0].tool_call_error == "5 or more tool calls in one turn; at most 4"
    assert [t.end_reason for t in (prose, calls, fine)] == ["done"] * 3
