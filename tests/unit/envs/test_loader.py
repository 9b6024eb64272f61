"""Loading an environment from a spec (a shipped name, a file path, a module path): every failure is
one EnvError naming the spec; sync and async environments are called alike, and what they return
is checked."""

import asyncio
import textwrap

import pytest

from grm.base import GrmError
from grm.envs.base import (
    ENVIRONMENTS,
    AssistantMessage,
    EnvError,
    Observation,
    Reset,
    Step,
    call_maybe_async,
    env_factory,
    list_envs,
    load_env,
    load_env_class,
    reset_env,
    step_env,
)
from grm.envs.calc import CalcEnv

ASYNC_ENV = """
from grm.envs.base import Observation, Reset, Step

class EchoEnv:
    '''Echoes the assistant back once, then ends.'''

    def __init__(self, prefix="echo: "):
        self.prefix = prefix
        self.steps = 0

    async def reset(self, row):
        return Reset([{"role": "user", "content": row["q"]}])

    async def step(self, message):
        self.steps += 1
        return Step([Observation("user", self.prefix + message.content)], done=self.steps >= 2, signals={"steps": self.steps})
"""


def write(tmp_path, name, text):
    (tmp_path / name).write_text(textwrap.dedent(text))
    return tmp_path / name


def test_an_async_environment_from_a_file_relative_to_the_pipeline(tmp_path):
    write(tmp_path, "echo.py", ASYNC_ENV)
    make = env_factory("echo.py:EchoEnv", {"prefix": "> "}, base_dir=tmp_path)
    env, other = make(), make()
    assert env is not other  # one instance per episode
    reset = asyncio.run(reset_env(env, {"q": "hi"}))
    assert reset.messages == [{"role": "user", "content": "hi"}] and reset.tools == []
    step = asyncio.run(step_env(env, AssistantMessage("hello")))
    assert step.observations[0].content == "> hello" and step.signals == {"steps": 1.0} and not step.done
    assert asyncio.run(step_env(env, AssistantMessage("again"))).done
    # the file is imported once, not per episode
    assert load_env_class("echo.py:EchoEnv", tmp_path) is load_env_class(str(tmp_path / "echo.py") + ":EchoEnv")


def test_a_module_path_and_a_shipped_name_load_the_same_class():
    assert load_env_class("grm.envs.calc:CalcEnv") is load_env_class("calc") is CalcEnv
    assert ENVIRONMENTS == {
        "calc": "grm.envs.calc:CalcEnv",
        "clarify": "grm.envs.clarify:ClarifyEnv",
        "revise": "grm.envs.revise:ReviseEnv",
    }
    assert list_envs()[0][:2] == ("calc", "grm.envs.calc:CalcEnv") and "arithmetic" in list_envs()[0][2]


@pytest.mark.parametrize(
    "files,spec,kwargs,message",
    [
        ({}, "nothing", None, r"env 'nothing': not a shipped environment \(calc, clarify, revise\) nor PATH.py:Class"),
        ({}, "envs/missing.py:Env", None, r"env 'envs/missing.py:Env': file .*envs/missing.py not found"),
        ({"bad.py": "def broken(:\n"}, "bad.py:Env", None, r"env 'bad.py:Env': importing .*bad.py raised SyntaxError \(line 1\)"),
        ({"boom.py": "raise RuntimeError('at import')"}, "boom.py:Env", None, "raised RuntimeError: at import"),
        ({"e.py": "class Other: pass"}, "e.py:Env", None, r"env 'e.py:Env': e.py has no Env \(classes there: Other\)"),
        ({"e.py": "Env = 3"}, "e.py:Env", None, "Env is a int, not a class"),
        (
            {"e.py": "class Env:\n    def reset(self, row): pass"},
            "e.py:Env",
            None,
            r"does not implement the Environment protocol \(no step\)",
        ),
        (
            {"e.py": "class Env:\n    def reset(self): pass\n    def step(self, m): pass"},
            "e.py:Env",
            None,
            "Env.reset must take one argument",
        ),
        (
            {
                "e.py": "class Env:\n    def __init__(self): raise OSError('no db')\n"
                "    def reset(self, r): pass\n    def step(self, m): pass"
            },
            "e.py:Env",
            None,
            r"Env\(\*\*\{\}\) raised OSError: no db",
        ),
        ({}, "calc", {"speed": 3}, r"CalcEnv\(\*\*\{'speed': 3\}\) raised TypeError"),
        ({}, "calc", [1], "arguments must be a mapping, got list"),
        ({}, "no_such_pkg.envs:Env", None, "cannot import module no_such_pkg.envs: ModuleNotFoundError"),
    ],
)
def test_every_load_failure_is_one_env_error_naming_the_spec(tmp_path, files, spec, kwargs, message):
    for name, text in files.items():
        write(tmp_path, name, text)
    with pytest.raises(EnvError, match=message) as e:
        load_env(spec, kwargs, base_dir=tmp_path)
    assert isinstance(e.value, GrmError) and f"env {spec!r}" in str(e.value)


class Misbehaving:
    def __init__(self, reset_out=None, step_out=None, raises=None):
        self.reset_out, self.step_out, self.raises = reset_out, step_out, raises

    def reset(self, row):
        if self.raises:
            raise self.raises
        return self.reset_out

    def step(self, message):
        if self.raises:
            raise self.raises
        return self.step_out


@pytest.mark.parametrize(
    "env,message",
    [
        (Misbehaving(raises=KeyError("q")), "Misbehaving.reset raised KeyError: 'q'"),
        (Misbehaving({"messages": []}), "reset returned dict, not a Reset"),
        (Misbehaving(Reset([])), "reset returned no messages"),
        (Misbehaving(Reset([{"role": "user"}])), r"messages\[0\] needs string 'role' and 'content'"),
        (Misbehaving(Reset([{"role": "user", "content": "q"}], [{"type": "function"}])), r"tools\[0\] is not a tool schema"),
    ],
)
def test_a_bad_reset_is_an_env_error(env, message):
    with pytest.raises(EnvError, match=message):
        asyncio.run(reset_env(env, {}))


@pytest.mark.parametrize(
    "env,message",
    [
        (Misbehaving(raises=ZeroDivisionError("x")), "Misbehaving.step raised ZeroDivisionError: x"),
        (Misbehaving(step_out=None), "step returned NoneType, not a Step"),
        (Misbehaving(step_out=Step([{"role": "user", "content": "x"}])), r"observations\[0\] is not an Observation"),
        (Misbehaving(step_out=Step(signals={"success": float("nan")})), "signal 'success' = nan is not a finite number"),
        (Misbehaving(step_out=Step(signals={"success": "yes"})), "signal 'success' = 'yes'"),
        (Misbehaving(step_out=Step(final_answer=5)), "final_answer must be a string"),
    ],
)
def test_a_bad_step_is_an_env_error(env, message):
    with pytest.raises(EnvError, match=message):
        asyncio.run(step_env(env, AssistantMessage("x")))


def test_signals_come_back_as_floats_and_observations_render_as_chat_messages():
    step = asyncio.run(step_env(Misbehaving(step_out=Step(signals={"success": True, "n": 2})), AssistantMessage("x")))
    assert step.signals == {"success": 1.0, "n": 2.0} and all(type(v) is float for v in step.signals.values())
    tool = Observation("tool", "5", name="calculator", tool_call_id="call_0_0")
    assert tool.message() == {"role": "tool", "content": "5", "name": "calculator", "tool_call_id": "call_0_0"}
    assert Observation("user", "hi").message() == {"role": "user", "content": "hi"}


def test_call_maybe_async_calls_both_kinds():
    async def twice(x):
        return 2 * x

    assert asyncio.run(call_maybe_async(twice, 2)) == 4
    assert asyncio.run(call_maybe_async(lambda x: x + 1, 2)) == 3


def test_grm_envs_list_prints_the_shipped_environments(capsys):
    from grm.cli import main

    assert main(["envs", "list"]) == 0
    out = capsys.readouterr().out
    assert "│ calc " in out and "grm.envs.calc:CalcEnv" in out and "path/to/file.py:Class" in out
