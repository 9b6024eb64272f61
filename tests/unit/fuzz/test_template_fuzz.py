"""Fuzz judge templates through ``grm judge lint`` and ``grm judge render``.

Templates are pieced together from text, variables the judge gets and does not get, ``{% %}``
blocks (closed, unclosed, stray), filters, arithmetic that raises, unicode, and the classic sandbox
escapes. Whatever the template, lint and render either succeed or fail with a message naming the
template (or judge) file, never a traceback; no escape ever reaches Python objects.
"""

from __future__ import annotations

import copy
import json
import time
from pathlib import Path
from unittest.mock import patch

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grm.judges.cli import read_samples
from grm.judges.errors import JudgeError
from grm.judges.render import render
from grm.judges.runtime import load
from grm.judges.sandbox import RenderLimits
from grm.judges.templates import TemplateLimitError, parse_template
from tests.unit.fuzz.support import assert_clean_failure, budget, count, fresh, run_cli

VARIABLES = ["prompt", "response", "responses", "responses[0]", "responses[1]", "responses[7]", "reference", "principles",
             "metadata", "metadata.topic", "metadata['x']", "messages[0].content", "messages[-1]['role']", "critique",
             "loop.index", "respnse", "undefined_thing", "range", "lipsum", "cycler", "joiner", "namespace", "self"]  # fmt: skip
FILTERS = ["", "|upper", "|length", "|first", "|last", "|letter", "|int", "|float", "|join(', ')", "|default('x')", "|trim",
           "|e", "|safe", "|list", "|sum", "|tojson", "|reverse", "|sort", "|wordcount", "|nonexistent_filter", "|attr('x')",
           "|attr('__class__')", "|map('upper')|list", "|batch(2)|list", "|format(1)", "|replace('a', 'b')"]  # fmt: skip
ESCAPES = [
    "{{ ''.__class__ }}",
    "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "{{ prompt.__init__.__globals__ }}",
    "{{ self._TemplateReference__context }}",
    "{{ cycler.__init__.__globals__.os.popen('id').read() }}",
    "{{ lipsum.__globals__['os'] }}",
    "{{ namespace.__init__.__globals__ }}",
    "{{ '{0.__class__}'.format(prompt) }}",
    "{{ prompt|attr('__class__') }}",
    "{{ ().__class__.__base__.__subclasses__() }}",
    "{{ config }}",
    "{{ request }}",
    "{% set x = prompt.__class__ %}{{ x }}",
    "{{ responses.append('x') }}",
    "{{ metadata.update({'a': 1}) }}",
    "{{ metadata.__setitem__('a', 1) }}",
    "{{ messages.append({'role': 'user', 'content': 'x'}) }}",
    "{{ messages[0].clear() }}",
    "{{ [].pop() }}",
]
RAISES = ["{{ 1/0 }}", "{{ 1 // 0 }}", "{{ 1 % 0 }}", "{{ range(100001)|list|length }}", "{{ -100|letter }}",
          "{{ 10**30|letter }}",
          "{{ response|letter }}", "{{ 'x' + 1 }}", "{{ responses + 'x' }}", "{{ '%d' % 'x' }}", "{{ '%s %s' % prompt }}",
          "{{ 1.0e308 * 10 }}", "{{ (1e308 * 10)|int }}", "{{ prompt[10**20] }}", "{{ responses[10**20] }}",
          "{% macro m() %}{{ m() }}{% endmacro %}{{ m() }}", "{% include 'other.j2' %}", "{% import 'x.j2' as x %}",
          "{% extends 'base.j2' %}", "{% from 'x' import y %}", "{{ prompt|batch(0)|list }}", "{{ responses|slice(0)|list }}",
          "{{ response|round(10**10) }}", "{{ 3|round(2, 'nope') }}", "{{ prompt|indent(-5) }}", "{{ prompt|truncate(-1) }}",
          "{{ '{:d}'.format('x') }}", "{{ ''|random }}", "{{ [1, 'a']|sort }}", "{{ {'a': 1}|dictsort(by='nope') }}"]  # fmt: skip
BLOCKS = ["{% for r in responses %}", "{% endfor %}", "{% if prompt %}", "{% elif response %}", "{% else %}", "{% endif %}",
          "{% set x = 1 %}", "{% raw %}", "{% endraw %}", "{% for %}", "{% if %}", "{% endblock %}", "{% block b %}",
          "{% with a = 1 %}", "{% endwith %}", "{% filter upper %}", "{% endfilter %}", "{% do 1 %}", "{% break %}",
          "{% for i in range(3) %}{{ loop.index }}{% endfor %}", "{%- if true -%}", "{%", "%}", "{{", "}}", "{#", "#}",
          "{{ }}", "{{ prompt", "prompt }}", "{% for r in responses %}{{ r|letter }}{% endfor %}",
          "{% for r in responses %}{{ loop.index0|letter }}: {{ r }}{% endfor %}"]  # fmt: skip
HEADERS = ["{# expects: prompt, response #}", "{# expects: prompt, responses #}", "{# expects: #}", "{#- expects: prompt -#}",
           "{# expects: nothing, at all #}", "{# expects: prompt, response", ""]  # fmt: skip

pieces = st.one_of(
    st.text(max_size=20),
    st.sampled_from(["Score: <number>", "\\boxed{}", "[[A]]", "[[B]]", "\n", "💥", "\u202e", "\x00", "{", "}", "%", "#"]),
    st.builds(lambda v, f: "{{ " + v + f + " }}", st.sampled_from(VARIABLES), st.sampled_from(FILTERS)),
    st.sampled_from(ESCAPES),
    st.sampled_from(RAISES),
    st.sampled_from(BLOCKS),
)
templates = st.builds(lambda h, ps: h + "".join(ps), st.sampled_from(HEADERS), st.lists(pieces, max_size=8))

ESCAPED = ("<class 'str'>", "<class 'object'>", "<class 'type'>", "<class 'tuple'>", "<module ", "'__builtins__'", "uid=")
"""What an escape that worked would print (Jinja's own globals, such as ``range``, print harmlessly)."""

MODES = {
    "pointwise": ({"type": "regex", "range": [1, 10]}, {"prompt": "What is 2+2?", "response": "4", "metadata": {"topic": "m"}}),
    "pairwise": ({"type": "verdict"}, {"prompt": "Capital of France?", "responses": ["Paris", "Lyon"], "reference": "Paris"}),
    "listwise": (
        {"type": "boxed", "range": [1, 10]},
        {"messages": [{"role": "user", "content": "Hi"}], "responses": ["a", "b", "c"]},
    ),
}


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("template-fuzz")


def write_judge(folder: Path, source: str, mode: str, extra: dict) -> tuple[Path, Path, Path]:
    """A judge YAML using ``source`` as its template, with a sample for its mode; fresh file names."""
    template = fresh(folder, ".j2")
    template.write_text(source, encoding="utf-8")
    parser, sample = MODES[mode]
    spec = {"name": "fuzz", "mode": mode, "model": "fuzz-model", "template": template.name, "parser": parser, **extra}
    judge = fresh(folder, ".yaml")
    judge.write_text(json.dumps(spec), encoding="utf-8")  # JSON is YAML
    sample_file = fresh(folder, ".json")
    sample_file.write_text(json.dumps(sample), encoding="utf-8")
    return judge, template, sample_file


extras = st.sampled_from([{}, {"prefill": "Critique:"}, {"system": "Be fair {{ prompt }}"}, {"chat": False}, {"reference": True}])


@settings(max_examples=budget(150))
@given(source=templates, mode=st.sampled_from(sorted(MODES)), extra=extras)
def test_lint_and_render_any_template(folder, source, mode, extra):
    judge, template, sample = write_judge(folder, source, mode, extra)
    count("templates")
    for argv, stream in (
        (["judge", "lint", str(judge)], "out"),
        (["judge", "lint", str(template)], "out"),
        (["judge", "render", str(judge), "--sample", str(sample)], "err"),
    ):
        res = run_cli(*argv)
        if res.code != 0:
            assert_clean_failure(res, judge, template, sample, stream=stream)
        for leak in ESCAPED:
            assert leak not in res.out + res.err or leak in source, f"{leak!r} leaked:\n{res.out}{res.err}"
    if res.code == 0:  # what rendered read the sample and left it as it was
        judge_obj = load(judge)
        [sample_obj] = read_samples(str(sample))
        before = copy.deepcopy(sample_obj)
        render(judge_obj, sample_obj)
        assert sample_obj == before, "rendering changed the sample"


# ------------------------------------------------------------------ unbounded work (issue #39)

NUMBERS = ["0", "2", "3", "40", "1000", "100000", "10**6", "10**9", "10**18", "-1"]
TEXTS = ["'x'", "prompt", "response", "responses[0]", "(prompt * 1000)", "'\\t\\n'", "''", "[prompt]", "(range(10)|list)"]
OPS = [
    "{s} * {n}", "{n} * {s}", "{s} ~ {s}", "{s} + {s}", "{n} ** {n}", "{n} * {n}", "{s}|center({n})", "{s}|indent({n})",
    "{s}|wordwrap({n})", "{s}|truncate({n})", "{s}|batch({n})|list", "{s}|slice({n})|list", "{s}|join({s})",
    "{s}|replace('', {s})", "'%0{n}d' % 1", "'%s%s' % ({s}, {s})", "'{{:>{n}}}'.format(1)", "'{{0}}{{0}}'.format({s})",
    "{s}|format({n})", "{s}.center({n})", "{s}.expandtabs({n})", "range({n})|list|tojson(indent={n})", "[{s}] * {n}",
    "({s}, {s}) * {n}", "{s}|string|length", "{s}|list|sum(start=[])", "range({n})",
]  # fmt: skip


@st.composite
def expressions(draw: st.DrawFn) -> str:
    return draw(st.sampled_from(OPS)).format(s=draw(st.sampled_from(TEXTS)), n=draw(st.sampled_from(NUMBERS)))


def _loop(n: str, body: str) -> str:
    return "{% for i in range(" + n + ") %}" + body + "{% endfor %}"


def _macro(body: str, n: str) -> str:
    return "{% macro m(k) %}{% if k > 0 %}" + body + "{{ m(k - 1) }}{{ m(k - 1) }}{% endif %}{% endmacro %}{{ m(" + n + ") }}"


def _doubling(n: str, op: str) -> str:
    grow = {"~": "ns.s ~ ns.s", "+": "ns.s + ns.s", "list": "[ns.s, ns.s]"}[op]
    return "{% set ns = namespace(s='x') %}" + _loop(n, "{% set ns.s = " + grow + " %}") + "{{ ns.s|length }}"


runaway = st.recursive(
    st.one_of(expressions().map(lambda e: "{{ " + e + " }}"), st.sampled_from(["x", "{{ prompt }}", "{{ response }}"])),
    lambda inner: st.one_of(
        st.builds(_loop, st.sampled_from(NUMBERS), inner),
        inner.map(lambda b: "{% for c in response %}" + b + "{% endfor %}"),
        inner.map(lambda b: "{% set x %}" + b + "{% endset %}{{ x|length }}"),
        inner.map(lambda b: "{% filter upper %}" + b + "{% endfilter %}"),
        st.builds(_macro, inner, st.sampled_from(["3", "20", "40"])),
        st.builds(_doubling, st.sampled_from(["3", "40", "1000"]), st.sampled_from(["~", "+", "list"])),
        st.lists(inner, min_size=2, max_size=3).map("".join),
    ),
    max_leaves=6,
)
"""Templates built to run away: loops nested over huge ranges and over the response's characters,
operators and filters that multiply, macros that call themselves twice, doubling in a namespace."""

SMALL = RenderLimits(max_chars=50_000, max_steps=20_000, timeout_s=2.0)
RUNAWAY_SAMPLE = {"prompt": "What is 2+2?", "response": "Four, because 2+2=4. " * 50, "responses": ["4", "5"]}


@settings(max_examples=budget(300))
@given(body=runaway)
def test_any_template_renders_within_its_limits_or_stops_naming_the_file(body):
    count("templates")
    t0 = time.perf_counter()
    try:
        t = parse_template("{# expects: prompt, response, responses #}" + body, "runaway.j2")
        out = t.render(limits=SMALL, **RUNAWAY_SAMPLE)
    except JudgeError as e:
        assert str(e).startswith("runaway.j2"), e
        out = None
        if isinstance(e, TemplateLimitError):
            count("templates stopped by a limit")
    seconds = time.perf_counter() - t0
    assert seconds < SMALL.timeout_s + 3, f"{seconds:.1f} s"
    assert out is None or len(out) <= SMALL.max_chars


@settings(max_examples=budget(40))
@given(body=runaway, mode=st.sampled_from(sorted(MODES)))
def test_lint_and_render_stop_a_runaway_template_cleanly(folder, body, mode):
    count("templates")
    limits = {"template_max_chars": SMALL.max_chars, "template_max_steps": SMALL.max_steps, "template_timeout_s": SMALL.timeout_s}
    judge, template, sample = write_judge(folder, "{# expects: prompt, response, responses #}" + body, mode, {"limits": limits})
    with patch("grm.judges.lint.DEFAULT_LIMITS", SMALL):  # a template alone: no spec to take limits from
        for argv, stream in (
            (["judge", "lint", str(judge)], "out"),
            (["judge", "lint", str(template)], "out"),
            (["judge", "render", str(judge), "--sample", str(sample)], "err"),
        ):
            t0 = time.perf_counter()
            res = run_cli(*argv)
            assert time.perf_counter() - t0 < 3 * (SMALL.timeout_s + 3), argv
            if res.code != 0:
                assert_clean_failure(res, judge, template, sample, stream=stream)
