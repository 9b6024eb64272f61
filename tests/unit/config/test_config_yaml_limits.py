"""YAML whose aliases or nesting would make loading superlinear is refused quickly with ``FILE:LINE:``.

The work is checked by counting, not by timing: the values PyYAML composes (``compose_node``
calls) never pass ``MAX_NODES`` + 1, whatever the aliases expand to. A 10 s wall clock per case
only detects a hang (each takes well under a second).
"""

import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from grm.config import ConfigError, load
from grm.config import yaml_reader as reader
from grm.config.loading import load_yaml, parse_override
from grm.config.yaml_reader import MAX_BYTES, MAX_DEPTH, MAX_NODES
from tests.unit.fuzz.support import assert_clean_failure, run_cli

GOOD = "name: x\nmodel: m\n"


def bomb(levels: int, fanout: int = 10) -> str:
    """``levels`` aliases of aliases: ``fanout ** levels`` values once expanded."""
    out = [f"a0: &a0 [{', '.join(['x'] * fanout)}]"]
    out += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * fanout)}]" for i in range(1, levels)]
    return "\n".join(out) + "\n"


@contextmanager
def counted(monkeypatch):
    """The number of values composed while the block runs, and a 10 s hang guard."""
    calls = [0]
    compose = reader._UniqueKeyLoader.compose_node

    def counting(self, parent, index):
        calls[0] += 1
        return compose(self, parent, index)

    monkeypatch.setattr(reader._UniqueKeyLoader, "compose_node", counting)
    t0 = time.perf_counter()
    yield calls
    assert time.perf_counter() - t0 < 10, "hang"
    assert calls[0] <= MAX_NODES + 1


CASES = {
    # name: (text, line of the error, what it says)
    "billion laughs": (GOOD + bomb(9), 6, f"more than {MAX_NODES} values once its aliases are expanded"),
    "merge-key laughs": (
        GOOD
        + "a0: &a0 {k0: 1, k1: 2, k2: 3, k3: 4, k4: 5, k5: 6, k6: 7, k7: 8, k8: 9, k9: 0}\n"
        + "".join(f"a{i}: &a{i} {{{', '.join(f'k{j}: *a{i - 1}' for j in range(10))}}}\n" for i in range(1, 6)),
        6,
        "once its aliases are expanded",
    ),
    "recursive sequence": (GOOD + "loop: &a [1, *a]\n", 3, "recursive alias: the value of line 3 contains itself"),
    "recursive mapping": (GOOD + "loop: &a {x: {y: *a}}\n", 3, "recursive alias"),
    "recursive merge": (GOOD + "loop: &a {x: 1, <<: *a}\n", 3, "recursive alias"),
    "recursive key": (GOOD + "loop: &a {? *a : 1}\n", 3, "recursive alias"),
    "deep flow sequence": (GOOD + "deep: " + "[" * 100_000 + "]" * 100_000 + "\n", 3, f"nested more than {MAX_DEPTH} levels"),
    "deep flow mapping": (GOOD + "deep: " + "{a: " * 30_000 + "1" + "}" * 30_000 + "\n", 3, "nested more than"),
    "deep block mapping": (GOOD + "deep:\n" + "".join(" " * i + "a:\n" for i in range(1, 200)), 66, "nested more than"),
    "deep by aliases": (
        GOOD + "".join(f"d{i}: &d{i} [[[[[[[[{'*d' + str(i - 1) if i else 1}]]]]]]]]\n" for i in range(12)),
        10,
        "nested more than 64 levels deep once its aliases are expanded",
    ),
    "many values": (GOOD + "many:\n" + "- 1\n" * (MAX_NODES + 10), MAX_NODES - 3, f"more than {MAX_NODES} values"),
    "huge file": (GOOD + "system_prompt: " + "x" * MAX_BYTES + "\n", 1, f"over {MAX_BYTES} bytes"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_superlinear_yaml_is_refused_with_file_and_line(tmp_path, monkeypatch, case):
    text, line, needle = CASES[case]
    f = tmp_path / "c.yaml"
    f.write_text(text)
    with counted(monkeypatch), pytest.raises(ConfigError) as e:
        load(f)
    msg = str(e.value)
    assert msg.startswith(f"{f}:{line}: ") and needle in msg and "\n" not in msg, msg


def test_aliases_below_the_limits_still_load_and_their_line_map_stays_bounded(tmp_path, monkeypatch):
    f = tmp_path / "ok.yaml"
    f.write_text(GOOD + bomb(3) + "shared: *a2\n")  # 10**3 values, twice: about 2,500 in all
    with counted(monkeypatch) as calls:
        loc = load_yaml(f)
    assert calls[0] < 60  # composed as written: an alias is one node however much it holds
    assert len(loc.data["shared"]) == 10 and len(loc.data["shared"][9][9]) == 10
    assert len(loc.lines) <= MAX_NODES
    assert loc.line_of(("shared", 9, 9, 9)) == 3  # an aliased value: the line of its anchor
    with pytest.raises(ConfigError, match=f"{f}:3: unknown key 'a0'"):
        load(f, kind="policy")


def test_a_config_at_the_depth_limit_loads():
    nested = "x: " + "[" * (MAX_DEPTH - 1) + "]" * (MAX_DEPTH - 1) + "\n"  # the mapping is a level
    v, depth = reader.parse_yaml_text(nested, Path("d.yaml")).data["x"], 1
    while v:
        v, depth = v[0], depth + 1
    assert depth == MAX_DEPTH - 1
    with pytest.raises(ConfigError, match=f"d.yaml:1: nested more than {MAX_DEPTH} levels deep"):
        reader.parse_yaml_text("x: " + "[" * MAX_DEPTH + "]" * MAX_DEPTH + "\n", Path("d.yaml"))


@pytest.mark.parametrize(
    ("value", "needle"),
    [
        ("[&a [1,1,1,1,1,1,1,1,1,1], &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a], &c [*b,*b,*b,*b,*b,*b,*b,*b,*b,*b], "
         "&d [*c,*c,*c,*c,*c,*c,*c,*c,*c,*c], [*d,*d]]", "once its aliases are expanded"),
        ("&a [*a]", "recursive alias"),
        ("[" * 10_000, "nested more than"),
    ],
)  # fmt: skip
def test_an_override_value_has_the_limits_of_a_file(monkeypatch, value, needle):
    with counted(monkeypatch), pytest.raises(ConfigError) as e:
        parse_override(f"train.backend.deepspeed_config={value}")
    assert str(e.value).startswith("override 'train.backend.deepspeed_config=") and needle in str(e.value)


def test_override_values_that_are_not_yaml_stay_text():
    assert parse_override("system_prompt=[1, 2") == (["system_prompt"], "[1, 2")
    assert parse_override("system_prompt=a: b: c") == (["system_prompt"], "a: b: c")
    assert parse_override("seed=7") == (["seed"], 7)
    assert parse_override("out_dir=") == (["out_dir"], "")


def test_a_fifo_or_device_is_refused_without_reading_it(tmp_path):
    import os

    fifo = tmp_path / "p.yaml"
    os.mkfifo(fifo)
    with pytest.raises(ConfigError, match="not a regular file"):
        load_yaml(fifo)
    with pytest.raises(ConfigError, match="not a regular file"):
        load_yaml("/dev/zero")


# Found by the fuzzers (tests/unit/fuzz): a hang and a refused merge key before their fixes.
def test_yaml_alias_bomb_is_refused_fast(tmp_path):
    lines = ["a0: &a0 [" + ", ".join(["x"] * 9) + "]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 9)]  # 9**9 values expanded
    f = tmp_path / "bomb.yaml"
    f.write_text(GOOD + "\n".join(lines) + "\n")
    t0 = time.perf_counter()
    res = run_cli("validate", str(f))
    assert time.perf_counter() - t0 < 10
    assert_clean_failure(res, f)
    assert f"{f}:7: more than 10000 values once its aliases are expanded" in res.err  # a4 holds 9**5


def test_yaml_merge_keys_work(tmp_path):
    f = tmp_path / "m.yaml"
    f.write_text(GOOD + "engine:\n  <<: {type: hf, dtype: bf16}\n  dtype: fp32\n")  # was "no constructor for merge"
    assert run_cli("validate", str(f)).code == 0
