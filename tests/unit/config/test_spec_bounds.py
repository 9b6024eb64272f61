"""What a spec may ask grm to run: targets that name the user's own code (never the standard
library), templates small enough to compile quickly, a bounded number of parser examples."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import sysconfig
import time
import types

import pytest
from pydantic import ValidationError

from grm.config import ConfigError, JudgeSpec, load
from grm.config.env import EnvSpec
from grm.config.judge import MAX_EXAMPLES
from grm.config.targets import loaded_target_problem, target_problem
from grm.config.template_size import MAX_TEMPLATE_CHARS
from tests.unit.fuzz.support import assert_clean_failure, run_cli

TEMPLATE = "{# expects: prompt, response #}{{ prompt }} {{ response }}"

# ------------------------------------------------------------------------------ targets


@pytest.mark.parametrize(
    "target", ["os:system", "builtins:input", "this:s", "antigravity:geohash", "os.path:join", "__main__:main"]
)
def test_a_parser_target_in_the_standard_library_is_refused_before_it_is_imported(tmp_path, target):
    before = set(sys.modules)
    f = tmp_path / "j.yaml"
    (tmp_path / "t.j2").write_text(TEMPLATE)
    f.write_text(f"name: j\nmode: pairwise\nmodel: m\ntemplate: t.j2\nparser: {{type: target, target: '{target}'}}\n")
    with pytest.raises(ConfigError, match=rf"{f}:5: parser.target: .*(standard library|entry script)"):
        load(f)
    res = run_cli("validate", str(f))  # grm validate builds every judge: it must not get that far
    assert_clean_failure(res, f)
    assert res.out == ""  # importing `this` prints the Zen of Python
    assert not {"this", "antigravity"} & (set(sys.modules) - before)


@pytest.mark.parametrize(
    "path", ["os:system", "subprocess:Popen", "builtins:object", f"{sysconfig.get_paths()['stdlib']}/this.py:X"]
)
@pytest.mark.parametrize("kind", ["python", "agent"])
def test_an_environment_or_agent_in_the_standard_library_is_refused(path, kind):
    with pytest.raises(ValidationError, match="standard library"):
        EnvSpec(type=kind, path=path)


def test_the_users_own_targets_pass_the_text_check():
    assert target_problem("mypkg.scoring:score") is None
    assert target_problem("tests.unit.judges.test_judge_modes:word") is None
    EnvSpec(type="python", path="envs/mine.py:Env")
    EnvSpec(type="python", path="mypkg.envs:Env")


def _own(text: str) -> float:
    return 1.0


class _Own:
    @staticmethod
    def read(text: str) -> float:
        return 1.0

    @classmethod
    def build(cls, text: str) -> float:
        return 1.0


def test_after_import_a_target_may_not_run_standard_library_code_whatever_module_re_exported_it():
    class _Scorer:
        def __call__(self, text: str) -> float:
            return 1.0

    for ok in (_own, _Own, _Own.read, _Own.build, _Scorer(), lambda text: 1.0):
        assert loaded_target_problem(ok) is None
    fake = types.ModuleType("usermod")  # a user's module that imported what it should not hand on
    fake.run, fake.system, fake.p = subprocess.run, os.system, functools.partial(_own)
    for name in ("run", "system", "p"):
        assert loaded_target_problem(getattr(fake, name)) is not None
    assert "runs code of subprocess" in loaded_target_problem(subprocess.run)
    assert "runs code of builtins" in loaded_target_problem(len)  # not print: a test session may patch it
    assert "runs code of functools" in loaded_target_problem(functools.partial(_own))
    assert "not a function" in loaded_target_problem(3)


# ------------------------------------------------------------------------------ template size


def _judge(tmp_path, template_chars: int, where: str = "template"):
    (tmp_path / "ok.j2").write_text(TEMPLATE)
    body = "{% if prompt %}x{% endif %}"
    big = TEMPLATE + body * ((template_chars - len(TEMPLATE)) // len(body))
    (tmp_path / "big.j2").write_text(big + "y" * (template_chars - len(big)))
    main, principles = ("big.j2", "ok.j2") if where == "template" else ("ok.j2", "big.j2")
    f = tmp_path / "j.yaml"
    f.write_text(
        f"name: j\nmode: pairwise\nmodel: m\ntemplate: {main}\nparser: {{type: verdict}}\n"
        f"principles: {{template: {principles}}}\n"
    )
    return f


@pytest.mark.parametrize("where", ["template", "principles"])
def test_a_template_over_the_bound_is_refused_at_load_before_it_is_compiled(tmp_path, where):
    f = _judge(tmp_path, MAX_TEMPLATE_CHARS + 1, where)
    t0 = time.perf_counter()
    res = run_cli("judge", "lint", str(f))
    assert time.perf_counter() - t0 < 3  # compiling it took seconds
    assert_clean_failure(res, f, stream="out")  # lint reports on stdout
    text = res.out + res.err
    assert f"at most {MAX_TEMPLATE_CHARS:,} characters" in text and "big.j2" in text
    line = 4 if where == "template" else 6
    assert f"{f}:{line}:" in text


def test_a_template_at_the_bound_loads_and_a_large_file_is_refused_unread(tmp_path):
    assert load(_judge(tmp_path, MAX_TEMPLATE_CHARS)).template == "big.j2"
    (tmp_path / "big.j2").write_bytes(b"x" * (4 * MAX_TEMPLATE_CHARS + 1))
    with pytest.raises(ConfigError, match=r"bytes; a template holds at most"):
        load(tmp_path / "j.yaml")
    (tmp_path / "big.j2").write_text("é" * (MAX_TEMPLATE_CHARS // 2 + 1))  # characters, not bytes, are counted
    assert load(tmp_path / "j.yaml")


# ------------------------------------------------------------------------------ examples


def test_a_judge_holds_a_bounded_number_of_examples():
    rule = {"name": "r", "mode": "rule", "rule": {"type": "numeric-answer"}}
    example = {"output": "Score: 3", "expect": None}
    assert len(JudgeSpec(**rule, examples=[example] * MAX_EXAMPLES).examples) == MAX_EXAMPLES
    with pytest.raises(ValidationError, match=f"at most {MAX_EXAMPLES} items"):
        JudgeSpec(**rule, examples=[example] * (MAX_EXAMPLES + 1))
