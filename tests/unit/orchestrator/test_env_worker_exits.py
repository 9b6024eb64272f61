"""An environment worker (``env: {pool: ...}``) holds many episodes' environments: one that calls
``sys.exit`` (or raises any BaseException of its own) in reset, step or close ends only its own
episode, as in-process environments do; the worker lives on for the others."""

import asyncio

import pytest

from grm.envs.base import AssistantMessage, Reset, Step
from grm.orchestrator.env_workers import EnvWorker, Failed

ENV = """
import asyncio, sys
from grm.envs.base import Reset, Step

class Exits:
    def reset(self, row):
        if row.get("exit_in") == "reset":
            sys.exit("reset exits")
        self.row = row
        return Reset([{"role": "user", "content": "hi"}])

    def step(self, message):
        if self.row.get("exit_in") == "step":
            raise SystemExit("step exits")
        return Step(done=True, signals={"success": 1.0})

    def close(self):
        if self.row.get("exit_in") == "close":
            sys.exit("close exits")


class AsyncExits(Exits):
    async def step(self, message):
        await asyncio.sleep(0)
        if self.row.get("exit_in") == "step":
            raise SystemExit("async step exits")
        return Step(done=True, signals={"success": 1.0})
"""


@pytest.mark.parametrize("cls", ["Exits", "AsyncExits"])
def test_system_exit_in_an_env_on_a_worker_ends_only_its_episode(tmp_path, cls):
    (tmp_path / "exits.py").write_text(ENV)
    worker = EnvWorker(f"{tmp_path / 'exits.py'}:{cls}", {})
    msg = AssistantMessage("done")

    async def episodes():
        out = {}
        out["reset"] = await worker.reset("a", {"exit_in": "reset"})
        assert isinstance(await worker.reset("b", {"exit_in": "step"}), Reset)
        out["step"] = await worker.step("b", msg)
        assert isinstance(await worker.reset("c", {"exit_in": "close"}), Reset)
        assert isinstance(await worker.step("c", msg), Step)
        await worker.close("c")  # a cleanup's exit is swallowed: the episode's outcome is recorded
        assert isinstance(await worker.reset("d", {}), Reset)  # the worker lives on for the others
        out["d"] = await worker.step("d", msg)
        return out

    out = asyncio.run(episodes())
    assert isinstance(out["reset"], Failed) and "SystemExit" in out["reset"].detail and "reset exits" in out["reset"].detail
    assert isinstance(out["step"], Failed) and "SystemExit" in out["step"].detail and "step exits" in out["step"].detail
    assert isinstance(out["d"], Step) and out["d"].done


def test_a_keyboard_interrupt_in_an_env_on_a_worker_is_not_an_episodes_failure(tmp_path):
    (tmp_path / "k.py").write_text("class K:\n def reset(self, row):\n  raise KeyboardInterrupt\n def step(self, m):\n  pass\n")
    worker = EnvWorker(f"{tmp_path / 'k.py'}:K", {})
    with pytest.raises(KeyboardInterrupt):
        asyncio.run(worker.reset("a", {}))
