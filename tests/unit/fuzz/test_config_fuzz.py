"""Fuzz the shipped pipeline, judge and policy YAMLs through ``grm validate`` and ``grm run``.

Each example mutates one shipped file: values of the wrong type, unknown keys, wrong nesting,
unicode keys and values, huge and non-finite numbers, deleted keys, a non-mapping top level, then
possibly broken YAML text or bytes, and ``--set`` overrides on top. The command must succeed or
exit non-zero with a message naming the file, never a traceback. ``grm run`` is only driven up to
its validation: the driver module is replaced by a stub, so a YAML that validates never reaches
Ray or torch.

A spec that validates holds numbers where numbers go (never a boolean, never past 64 bits) and
finite floats. Three more classes (issue #39): names and ``builtin:`` references that try to
become paths elsewhere (a name that validates makes one directory inside ``runs/``, a builtin that
resolves lies inside the library, and ``grm validate`` and ``grm run`` agree), and YAML whose
aliases or nesting would make loading superlinear (the values composed never pass ``MAX_NODES``).
"""

from __future__ import annotations

import copy
import math
import sys
import time
import types
import typing
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from grm.config import MODELS, ConfigError, detect_kind, load
from grm.config import yaml_reader as reader
from grm.config.base import MAX_INT
from grm.config.names import RUNS, run_dir
from grm.config.paths import KINDS, builtin_dir, resolve_path
from tests.unit.fuzz.support import assert_clean_failure, budget, count, fresh, run_cli

ROOT = Path(__file__).resolve().parents[3]
SHIPPED = sorted(p for d in ("pipelines", "judges", "policy") for p in (ROOT / d).glob("*.yaml"))
DOCS = {p.name: yaml.safe_load(p.read_text()) for p in SHIPPED}
PIPELINES = sorted(p.name for p in SHIPPED if p.parent.name == "pipelines")

HUGE = [2**31, 2**63, -(2**63) - 1, 10**40, 10**400, 1e308, -1e308, 5e-324]
WEIRD_TEXT = ["", " ", "é", "ñame", "💥", "\u202e", "\u200b", "ｎａｍｅ", "null", "~", "yes", "0x1F", "1_000", "  8  ", "\x00",
              "²"]  # fmt: skip

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.sampled_from(HUGE),
    st.floats(),  # nan and +-inf included
    st.text(max_size=24),
    st.sampled_from(WEIRD_TEXT),
)
values = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3), max_leaves=6
)
odd_keys = st.one_of(st.text(max_size=12), st.sampled_from(WEIRD_TEXT), st.integers(-3, 3), st.booleans(), st.none())


def key_paths(data: Any, prefix: tuple = ()) -> list[tuple]:
    """Every key path into nested mappings and lists (the root included)."""
    out = [prefix]
    if isinstance(data, dict):
        for k, v in data.items():
            out += key_paths(v, prefix + (k,))
    elif isinstance(data, list):
        for i, v in enumerate(data):
            out += key_paths(v, prefix + (i,))
    return out


def _parent(doc: Any, path: tuple) -> Any:
    for k in path[:-1]:
        doc = doc[k]
    return doc


def _put(doc: Any, path: tuple, value: Any) -> None:
    """``doc[path] = value``, creating mappings on the way (a list index past the end is skipped)."""
    for k in path[:-1]:
        if isinstance(doc, list):
            if not isinstance(k, int) or k >= len(doc):
                return
            doc = doc[k]
        elif isinstance(doc, dict):
            if not isinstance(doc.get(k), (dict, list)):
                doc[k] = {}
            doc = doc[k]
        else:
            return
    if isinstance(doc, dict) or (isinstance(doc, list) and isinstance(path[-1], int) and path[-1] < len(doc)):
        doc[path[-1]] = value


def _get(doc: Any, path: tuple) -> Any:
    try:
        for k in path:
            doc = doc[k]
    except (KeyError, IndexError, TypeError):
        return None
    return doc


def schema_paths(model: type[BaseModel], doc: Any, prefix: tuple = ()) -> list[tuple]:
    """Every field path the config model knows, present in ``doc`` or not: a list of models is
    entered at index 0 and a dict of models at its first key, every variant of a union is entered."""
    out = []
    for name, field in model.model_fields.items():
        path = prefix + (name,)
        out.append(path)
        sub = _get(doc, (name,)) if isinstance(doc, dict) else None
        for ann, step in _models_in(field.annotation):
            if step == "index":
                out += schema_paths(ann, _get(sub, (0,)), path + (0,))
            elif step == "key":
                key = next(iter(sub), "x") if isinstance(sub, dict) and sub else "x"
                out += schema_paths(ann, _get(sub, (key,)), path + (key,))
            else:
                out += schema_paths(ann, sub, path)
    return sorted(set(out), key=lambda p: tuple(str(k) for k in p))


def _models_in(ann: Any, step: str = "field") -> list[tuple[type[BaseModel], str]]:
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return [(ann, step)]
    origin, args = typing.get_origin(ann), typing.get_args(ann)
    if origin is list:
        step = "index"
    elif origin is dict:
        step, args = "key", args[1:]
    return [m for a in args for m in _models_in(a, step)]


SCHEMA = {name: schema_paths(MODELS[detect_kind(doc)], doc) for name, doc in DOCS.items()}


numbers = st.one_of(
    st.sampled_from(HUGE + [0, -1, 1, 0.5, -0.0, float("nan"), float("inf"), float("-inf"), True, "8", "1e3"]),
    st.integers(),
    st.floats(),
)


@st.composite
def mutated_doc(draw: st.DrawFn, doc: Any, schema: list[tuple] = ()) -> Any:
    """``doc`` after one or two structural mutations (rarely: a non-mapping top level); ``schema``
    adds fields the model knows but ``doc`` does not set."""
    doc = copy.deepcopy(doc)
    if draw(st.sampled_from([False] * 19 + [True])):
        return draw(st.one_of(values, st.just(list(doc.items()))))
    for _ in range(draw(st.sampled_from([1, 1, 1, 2]))):
        paths = key_paths(doc)[:0:-1]  # leaves first: the first paths are tried most
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        parent, key = _parent(doc, path), path[-1]
        op = draw(st.sampled_from(["retype"] * 4 + ["schema", "delete", "unknown", "wrap", "rename", "move"]))
        if op == "schema" and schema:
            _put(doc, draw(st.sampled_from(list(schema))), draw(st.one_of(numbers, values)))
        elif op == "retype":
            old = parent[key]
            number = isinstance(old, (int, float)) and not isinstance(old, bool)
            parent[key] = draw(numbers if number and draw(st.integers(0, 3)) else values)
        elif op == "delete":
            del parent[key]
        elif op == "unknown":
            target = parent[key] if isinstance(parent[key], dict) else parent
            if isinstance(target, dict):
                target[draw(odd_keys)] = draw(values)
        elif op == "wrap":  # wrong nesting: a value one level too deep
            parent[key] = draw(st.sampled_from([[parent[key]], {"value": parent[key]}, {str(key): parent[key]}]))
        elif op == "rename" and isinstance(parent, dict):
            new = draw(st.sampled_from([str(key).upper(), f"{key} ", f"{key}\u200b", str(key).replace("e", "е"), draw(odd_keys)]))
            parent[new] = parent.pop(key)
        elif op == "move":  # a subtree under another mapping: wrong nesting one level sideways
            dest = draw(st.sampled_from([p for p in key_paths(doc) if isinstance(_get(doc, p), dict)]))
            if path[: len(dest)] != dest or len(dest) >= len(path):
                value = parent.pop(key) if isinstance(parent, dict) else parent[key]
                target = _get(doc, dest)
                if isinstance(target, dict):
                    target[key] = value
    return doc


SNIPPETS = [":", ": ", "- ", "{", "}", "[", "]", "\t", "  ", "\n", "'", '"', "&a ", "*a", "? ", "|", ">", "#", "\ufeff",
            "!!python/object/apply:os.system ['true']", "%YAML 1.1\n", "---\n", "...\n", "\x85", "\u2028", "\x07",
            "<<: *a\n", "!!binary x"]  # fmt: skip


YAML_SCALARS = ["0x1F", "0o17", "1_000", "1:30", "+1", "-0", ".inf", "-.inf", ".nan", "~", "yes", "off", "2001-12-14",
                "2001-12-14t21:59:43.10-05:00", "2001-13-45", "!!timestamp x", "!!bool maybe", "!!binary aGk=",
                "!!binary /w==", "!!set {a}", "!!omap [a: 1]", "!!int x", "!!float 1", "!!python/name:os.system", "&x 1",
                "*x", "*undefined", "[a]", "{a: 1}", "<<", "'quoted'", '"\\u0000"', '"\\ud800"', "1e400", "9" * 400, "- a",
                "!custom x"]  # fmt: skip


def deep(depth: int) -> str:
    return "nested: " + "[" * depth + "]" * depth + "\n"


def alias_bomb(levels: int) -> str:
    """``levels`` aliases of aliases: 9 ** levels values once expanded ("billion laughs")."""
    out = ["a0: &a0 [" + ", ".join(["x"] * 9) + "]"]
    out += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, levels)]
    return "\n".join(out) + "\n"


@st.composite
def yaml_bytes(draw: st.DrawFn, doc: Any) -> bytes:
    """The YAML text of ``doc``, then possibly broken as text (snippets, lost or doubled lines) and
    as bytes (invalid UTF-8, a UTF-16 BOM, a cut)."""
    try:
        text = yaml.safe_dump(
            doc, allow_unicode=True, sort_keys=False, default_flow_style=draw(st.sampled_from([None, False, True]))
        )
    except yaml.YAMLError:  # pragma: no cover - safe_dump represents every value the strategies make
        text = str(doc)
    for _ in range(draw(st.sampled_from([0, 0, 0, 1, 2]))):
        kind = draw(st.sampled_from(["insert", "line", "line", "drop-line", "double-line", "cut", "deep", "bomb"]))
        at = draw(st.integers(0, len(text)))
        lines = text.splitlines(keepends=True)
        if kind == "line":  # a key: value line of YAML's odder scalars, at the top or one level in
            key, value = draw(st.sampled_from(YAML_SCALARS + ["name", "x"])), draw(st.sampled_from(YAML_SCALARS))
            i = draw(st.integers(0, len(lines)))
            text = "".join(lines[:i] + [draw(st.sampled_from(["", "  "])) + f"{key}: {value}\n"] + lines[i:])
        elif kind == "deep":
            text += deep(draw(st.sampled_from([50, 400, 2000])))
        elif kind == "bomb":
            text += alias_bomb(draw(st.integers(2, 9)))
        elif kind == "insert":
            text = text[:at] + draw(st.one_of(st.sampled_from(SNIPPETS), st.text(max_size=6))) + text[at:]
        elif kind == "drop-line" and lines:
            del lines[draw(st.integers(0, len(lines) - 1))]
            text = "".join(lines)
        elif kind == "double-line" and lines:  # a duplicate key, usually
            i = draw(st.integers(0, len(lines) - 1))
            text = "".join(lines[: i + 1] + lines[i:])
        elif kind == "cut":
            text = text[:at]
    raw = text.encode("utf-8")
    enc = draw(st.sampled_from(["utf-8"] * 12 + ["bad-byte", "utf-16", "latin-1"]))
    if enc == "bad-byte":
        at = draw(st.integers(0, len(raw)))
        raw = raw[:at] + draw(st.sampled_from([b"\xff", b"\xc3", b"\xe2\x82", b"\x80"])) + raw[at:]
    elif enc in ("utf-16", "latin-1"):
        raw = text.encode(enc, errors="replace")
    return raw


INDEXES = ["0", "-1", "7", "²", "٣", "０", "+1", "01", " 0", "-0", "1.0"]


@st.composite
def overrides(draw: st.DrawFn, doc: Any, schema: list[tuple] = ()) -> list[str]:
    """One or two ``key.path=value`` overrides: mostly real key paths (list indexes in any digits),
    some mangled or invented, with YAML values of every type, numbers above all, or junk."""
    out = []
    paths = (key_paths(doc)[:0:-1] if isinstance(doc, dict) else []) + list(schema)
    for _ in range(draw(st.sampled_from([1, 1, 2]))):
        parts = []
        if paths and draw(st.sampled_from([True] * 4 + [False])):
            parts = [draw(st.sampled_from(INDEXES)) if isinstance(k, int) else str(k) for k in draw(st.sampled_from(paths))]
        if not parts or draw(st.sampled_from([False, False, True])):
            parts += draw(st.lists(st.one_of(st.sampled_from(WEIRD_TEXT + INDEXES), st.text(max_size=5)), min_size=1, max_size=2))
        value = draw(st.one_of(
            numbers.map(str),
            st.sampled_from(["[1, 2", "{a: 1}", ".nan", ".inf", "-.inf", "1e999", "10" * 30, "~", "{type: openai}", "",
                             "{a: 1, a: 2}", "[" * 500] + YAML_SCALARS),
            values.map(lambda v: yaml.safe_dump(v, default_flow_style=True, allow_unicode=True).removesuffix("\n...\n").strip()),
            st.text(max_size=12),
        ))  # fmt: skip
        out.append(".".join(parts) + draw(st.sampled_from(["="] * 9 + [""])) + value)
    return out


def finite_everywhere(x: Any) -> list[str]:
    """Paths of non-finite floats in a validated spec: a config that loads must hold real numbers."""
    if isinstance(x, BaseModel):
        return [f"{k}.{p}".rstrip(".") for k in type(x).model_fields for p in finite_everywhere(getattr(x, k))]
    if isinstance(x, dict):
        return [f"{k}.{p}".rstrip(".") for k, v in x.items() for p in finite_everywhere(v)]
    if isinstance(x, (list, tuple)):
        return [f"{i}.{p}".rstrip(".") for i, v in enumerate(x) for p in finite_everywhere(v)]
    return [""] if isinstance(x, float) and not math.isfinite(x) else []


def _scalars(ann: Any) -> set[Any]:
    if ann in (int, float, bool):
        return {ann}
    return set().union(*(_scalars(a) for a in typing.get_args(ann)))


def _bools_or_huge(x: Any) -> list[str]:
    if isinstance(x, bool) or (isinstance(x, int) and abs(x) > MAX_INT):
        return [""]
    if isinstance(x, dict):
        return [f"{k}.{p}".rstrip(".") for k, v in x.items() for p in _bools_or_huge(v)]
    if isinstance(x, (list, tuple)):
        return [f"{i}.{p}".rstrip(".") for i, v in enumerate(x) for p in _bools_or_huge(v)]
    return []


def mistyped_everywhere(x: Any) -> list[str]:
    """Paths of a validated spec where a number field holds a boolean or an integer past 64 bits."""
    out = []
    if isinstance(x, BaseModel):
        for name, f in type(x).model_fields.items():
            value = getattr(x, name)
            kinds = _scalars(f.annotation)
            if kinds & {int, float} and bool not in kinds:
                out += [f"{name}.{p}".rstrip(".") for p in _bools_or_huge(value)]
            out += [f"{name}.{p}".rstrip(".") for p in mistyped_everywhere(value)]
    elif isinstance(x, (list, tuple)):
        out += [f"{i}.{p}" for i, v in enumerate(x) for p in mistyped_everywhere(v)]
    elif isinstance(x, dict):
        out += [f"{k}.{p}" for k, v in x.items() for p in mistyped_everywhere(v)]
    return out


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("yaml-fuzz")


class _Validated(Exception):
    """Raised by the stub driver: ``grm run`` validated its pipeline and would start Ray now."""


@pytest.fixture(scope="module")
def stub_driver() -> Any:
    """``grm.orchestrator.launch`` replaced by a module whose ``run_pipeline`` raises ``_Validated``."""

    def run_pipeline(*args: Any, **kwargs: Any) -> Path:
        raise _Validated

    stub = types.ModuleType("grm.orchestrator.launch")
    stub.run_pipeline = run_pipeline  # type: ignore[attr-defined]
    saved = sys.modules.get("grm.orchestrator.launch")
    sys.modules["grm.orchestrator.launch"] = stub
    yield
    if saved is None:
        del sys.modules["grm.orchestrator.launch"]
    else:
        sys.modules["grm.orchestrator.launch"] = saved


def check_validate(f: Path, sets: list[str]) -> None:
    """``grm validate F --set ...``: ok with finite numbers everywhere, or a clean failure."""
    res = run_cli("validate", str(f), *[f"--set={s}" for s in sets])
    if res.code == 0:
        assert res.out.startswith("ok:"), res.out
        spec = load(f, sets)
        assert finite_everywhere(spec) == [], f"validated with non-finite numbers at {finite_everywhere(spec)}"
        assert mistyped_everywhere(spec) == [], f"validated with booleans or huge integers at {mistyped_everywhere(spec)}"
        return
    assert_clean_failure(res, f, or_names="override '")


@settings(max_examples=budget(250))
@given(data=st.data())
def test_validate_mutated_yaml(folder, data):
    name = data.draw(st.sampled_from(sorted(DOCS)), label="shipped")
    doc = data.draw(mutated_doc(DOCS[name], SCHEMA[name]), label="doc")
    f = fresh(folder, ".yaml")
    f.write_bytes(data.draw(yaml_bytes(doc), label="bytes"))
    count("yaml validate")
    check_validate(f, [])


@settings(max_examples=budget(150))
@given(data=st.data())
def test_validate_overrides(folder, data):
    name = data.draw(st.sampled_from(sorted(DOCS)), label="shipped")
    sets = data.draw(overrides(DOCS[name], SCHEMA[name]), label="overrides")
    count("yaml --set")
    check_validate(SHIPPED[[p.name for p in SHIPPED].index(name)], sets)


@settings(max_examples=budget(60))
@given(data=st.data())
def test_run_mutated_pipeline_stops_at_validation(folder, stub_driver, data):
    name = data.draw(st.sampled_from(PIPELINES), label="shipped")
    doc = data.draw(mutated_doc(DOCS[name], SCHEMA[name]), label="doc")
    sets = data.draw(st.one_of(st.just([]), overrides(DOCS[name], SCHEMA[name])), label="overrides")
    f = fresh(folder, ".yaml")
    f.write_bytes(data.draw(yaml_bytes(doc), label="bytes"))
    count("yaml run")
    try:
        res = run_cli("run", str(f), *[s for s in sets if "=" in s and not s.startswith("-")])
    except _Validated:
        return
    assert_clean_failure(res, f, or_names="override '")


# ----------------------------------------------------------------------------- names and builtin: references

HOSTILE = ["../../x", "..", ".", "/etc/passwd", "a/b", "a\\b", "a\x00b", "%2e%2e%2f", "..%2F..%2Fetc", "~", "~root/x",
           "file:///etc/passwd", " x", "x ", ".hidden", "-x", "x" * 101, "é", "ｎａｍｅ", "\u202e", "a\nb",
           "ok-name_1.2"]  # fmt: skip
REF_KEYS = ("spec", "template", "meta_judge", "prompts", "data")
"""Keys whose value names a file or a builtin (a policy or judge ``spec``, a template, a data set)."""

hostile_text = st.one_of(
    st.sampled_from(HOSTILE),
    st.lists(st.sampled_from(["..", ".", "/", "\\", "%2F", "%2e", "\x00", "judges", "policy", "prompts", "format",
                              "smollm2-135m-instruct", "pointwise-score", "quickstart", ".yaml", ".j2", "~", " "]),
             min_size=1, max_size=5).map("".join),
    st.text(max_size=16),
)  # fmt: skip


def ref_paths(doc: Any) -> list[tuple]:
    return [p for p in key_paths(doc) if p and p[-1] in REF_KEYS and isinstance(_get(doc, p), str)]


def _library() -> list[Path]:
    return [builtin_dir(k).resolve() for k in KINDS]


def _check_names_and_refs(f: Path, doc: dict) -> None:
    """A validated name makes one directory inside runs/; a validated builtin: reference resolves
    inside the library."""
    spec = load(f)
    d = run_dir(spec.name, None, "20250101-000000")
    assert d.parent == RUNS and d.name.startswith(spec.name), d
    for path in ref_paths(doc):
        value = _get(doc, path)
        if not isinstance(value, str) or path[-1] in ("prompts", "data"):
            continue  # a data set: a builtin generator's name, or a file or directory
        kind = {"template": "prompts", "meta_judge": "judges"}.get(path[-1], "judges" if "judges" in path else "policy")
        found = resolve_path(value, f.parent, kind).resolve()
        assert found.is_file(), f"{value!r} validated but is {found}, not a file"
        if value.startswith("builtin:"):
            assert any(found.is_relative_to(lib) for lib in _library()), f"{value!r} resolved to {found}"


@settings(max_examples=budget(120))
@given(data=st.data())
def test_names_and_builtin_references_stay_where_they_belong(folder, stub_driver, data):
    name = data.draw(st.sampled_from(sorted(DOCS)), label="shipped")
    doc = copy.deepcopy(DOCS[name])
    targets = [("name",)] + ref_paths(doc)
    target = data.draw(st.sampled_from(targets), label="target")
    text = data.draw(hostile_text, label="text")
    value = text if target == ("name",) else data.draw(st.sampled_from(["builtin:", "", "./", "../"]), label="prefix") + text
    _put(doc, target, value)
    f = fresh(folder, ".yaml")
    f.write_text(yaml.safe_dump(doc, allow_unicode=True, sort_keys=False))
    count("yaml names/refs")
    res = run_cli("validate", str(f))
    if res.code == 0:
        _check_names_and_refs(f, doc)
    else:
        assert_clean_failure(res, f)
    if name in PIPELINES:  # grm run refuses exactly what grm validate refuses
        try:
            ran = run_cli("run", str(f))
        except _Validated:
            assert res.code == 0, f"grm run accepted what grm validate refused:\n{res.err}"
            return
        assert res.code != 0, f"grm run refused what grm validate accepted:\n{ran.err}"
        assert_clean_failure(ran, f)


# ----------------------------------------------------------------------------- aliases and nesting


@contextmanager
def composed():
    """The values PyYAML composes while the block runs (``compose_node`` calls)."""
    calls = [0]
    original = reader._UniqueKeyLoader.compose_node

    def counting(self: Any, parent: Any, index: Any) -> Any:
        calls[0] += 1
        return original(self, parent, index)

    reader._UniqueKeyLoader.compose_node = counting  # type: ignore[method-assign]
    try:
        yield calls
    finally:
        reader._UniqueKeyLoader.compose_node = original  # type: ignore[method-assign]


@st.composite
def yaml_structure(draw: st.DrawFn) -> str:
    """One flow-style YAML value built to cost: aliases of aliases (sequences or merge keys), a
    recursive alias, nesting deep in flow or block style, or a mix; may be tiny or far past a limit."""
    kind = draw(st.sampled_from(["bomb", "merge-bomb", "recursive", "deep-flow", "deep-map", "deep-alias", "wide"]))
    fan, levels = draw(st.integers(1, 12)), draw(st.integers(1, 9))
    if kind == "bomb":
        parts = [f"&b0 [{', '.join(['x'] * fan)}]"]
        parts += [f"&b{i} [{', '.join([f'*b{i - 1}'] * fan)}]" for i in range(1, levels)]
        return "[" + ", ".join(parts) + "]"
    if kind == "merge-bomb":
        parts = ["&m0 {" + ", ".join(f"k{j}: 1" for j in range(fan)) + "}"]
        parts += [f"&m{i} {{" + ", ".join(f"k{j}: *m{i - 1}" for j in range(fan)) + "}" for i in range(1, levels)]
        parts.append(f"{{<<: [{', '.join([f'*m{levels - 1}'] * fan)}]}}")
        return "[" + ", ".join(parts) + "]"
    if kind == "recursive":
        return draw(st.sampled_from(["&r [*r]", "&r {a: *r}", "&r [1, [2, {b: *r}]]", "&r {x: 1, <<: *r}", "&r {? *r : 1}"]))
    depth = draw(st.sampled_from([1, 10, 62, 63, 64, 65, 200, 5000]))
    if kind == "deep-flow":
        return "[" * depth + "1" + "]" * depth
    if kind == "deep-map":
        return "{a: " * depth + "1" + "}" * depth
    if kind == "deep-alias":  # each alias nests the one before a few levels deeper
        step = draw(st.integers(1, 8))
        parts = ["&d0 1"] + [f"&d{i} " + "[" * step + f"*d{i - 1}" + "]" * step for i in range(1, levels)]
        return "[" + ", ".join(parts) + "]"
    return "[" + ", ".join(["1"] * draw(st.sampled_from([10, 5000, 12000]))) + "]"


@settings(max_examples=budget(80))
@given(data=st.data())
def test_aliases_and_nesting_load_in_bounded_work(folder, data):
    name = data.draw(st.sampled_from(sorted(DOCS)), label="shipped")
    value = data.draw(yaml_structure(), label="structure")
    text = yaml.safe_dump(DOCS[name], allow_unicode=True, sort_keys=False)
    where = data.draw(st.sampled_from(["new key", "existing key", "override"]), label="where")
    sets = []
    if where == "override":
        sets = [f"{data.draw(st.sampled_from(['name', 'x', 'train.backend.deepspeed_config']), label='key')}={value}"]
    elif where == "new key":
        text += f"extra: {value}\n"
    else:
        lines = text.splitlines(keepends=True)
        i = data.draw(st.sampled_from([i for i, line in enumerate(lines) if ": " in line and not line.startswith(" ")]))
        lines[i] = lines[i].split(": ", 1)[0] + f": {value}\n"
        text = "".join(lines)
    f = fresh(folder, ".yaml")
    f.write_text(text)
    count("yaml aliases/nesting")
    t0 = time.perf_counter()
    with composed() as calls:
        try:
            load(f, sets)
        except ConfigError as e:
            msg = str(e)
            assert "Traceback" not in msg and (msg.startswith(f"{f}") or msg.startswith("override '")), msg
    assert calls[0] <= (reader.MAX_NODES + 1) * (1 + len(sets)), calls[0]
    assert time.perf_counter() - t0 < 10, "hang"
