"""Judge templates cannot make a render do unbounded work (issue #39): steps, time and characters
are capped, the cap that stopped a render is named with the template's file and line, ``grm judge
lint`` reports such a template, and untrusted text is only ever a value, never template code."""

import json
import time

import pytest

from grm.config import JudgeSpec
from grm.judges import Sample, build_judge
from grm.judges.base import score_one
from grm.judges.errors import JudgeError
from grm.judges.lint import lint_file
from grm.judges.sandbox import RenderLimitError, RenderLimits, size_of
from grm.judges.templates import DEFAULT_LIMITS, TemplateLimitError, parse_template
from tests.unit.fuzz.support import run_cli
from tests.unit.judges.fake_engine import ScriptedEngine

HEADER = "{# expects: prompt #}\n"

# (template, the bound it hits): each would run for hours or ask for gigabytes without the bounds.
BOMBS = {
    "nested loops, 10^10 iterations": (
        "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
        "steps",
    ),
    "a range of 10^10": ("{% for i in range(10**10) %}x{% endfor %}", "range() of 10,000,000,000 items"),
    "100 MB of output": ("{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}", "emitted"),
    "string times 10^9": ("{{ 'x' * 10**9 }}", "'*' would build"),
    "list times 10^9": ("{{ ([prompt] * 10**9)|length }}", "'*' would build"),
    "list of a big string, repeated": ("{{ ([prompt * 100000] * 1000)|length }}", "'*' would build"),
    "integer tower": ("{{ (10**100000)|string|length }}", "integer"),
    "integer squared in a loop": (
        "{% set ns = namespace(x=3) %}{% for i in range(64) %}{% set ns.x = ns.x * ns.x %}{% endfor %}",
        "integer",
    ),
    "macro called twice per level": (
        "{% macro m(n) %}{% if n %}{{ m(n - 1) }}{{ m(n - 1) }}{% endif %}{% endmacro %}{{ m(40) }}",
        "steps",
    ),
    "string doubled by a macro": (
        "{% macro d(s, n) %}{% if n %}{{ d(s ~ s, n - 1) }}{% endif %}{% endmacro %}{{ d('x', 60) }}",
        "'~' would build",
    ),
    "string doubled in a namespace": (
        "{% set ns = namespace(s='x') %}{% for i in range(60) %}{% set ns.s = ns.s + ns.s %}{% endfor %}",
        "'+' would build",
    ),
    "list nested in itself 60 times": (
        "{% set ns = namespace(l=[1]) %}{% for i in range(60) %}{% set ns.l = [ns.l, ns.l] %}{% endfor %}{{ ns.l }}",
        "a literal would build",
    ),
    "output captured by a set block": (
        "{% set x %}{% for i in range(100000) %}{% for j in range(100) %}{{ prompt }}{% endfor %}{% endfor %}{% endset %}",
        "steps",
    ),
    "center filter": ("{{ prompt|center(10**10) }}", "|center would build"),
    "indent filter": ("{{ ((prompt ~ '\\n') * 1000)|indent(10**6) }}", "|indent would build"),
    "join with a huge separator": ("{{ range(100000)|join(prompt * 10000) }}", "|join would build"),
    "replace of the empty string": ("{{ (prompt * 10000)|replace('', prompt * 10000) }}", "|replace would build"),
    "printf width": ("{{ '%0999999999d' % 1 }}", "'%' would build"),
    "printf repeated mapping key": ("{{ ('%(a)s' * 1000) % {'a': prompt * 10000} }}", "'%' would build"),
    "format width": ("{{ '{:>1000000000}'.format(1) }}", "format() would build"),
    "format repeated field": ("{{ ('{0}' * 1000).format(prompt * 10000) }}", "format() would build"),
    "format filter": ("{{ '%-999999999s'|format(prompt) }}", "|format would build"),
    "expandtabs": ("{{ ('\t' * 100000).expandtabs(100000) }}", "expandtabs() would build"),
    "rjust": ("{{ prompt.rjust(10**10) }}", "rjust() would build"),
    "tojson indent": ("{{ range(1000)|list|tojson(indent=100000) }}", "|tojson would build"),
    "sum of lists": ("{{ ([[1]] * 10000)|sum(start=[]) }}", "|sum would build"),
    # bytes (str.encode is allowed) multiply like str: sized before they run, not 10 GB built first
    "bytes times 10^9": ("{{ prompt.encode() * 10**9 }}", "'*' would build"),
    "bytes center": ("{{ prompt.encode().center(10**10) }}", "center() would build"),
    "bytes printf width": ("{{ '%0999999999d'.encode() % 1 }}", "'%' would build"),
    "bytes replace of the empty string": (
        "{{ (prompt * 10000).encode().replace(''.encode(), (prompt * 10000).encode()) }}",
        "replace() would build",
    ),
}


def limit_error(source: str, limits: RenderLimits = DEFAULT_LIMITS, **variables) -> tuple[str, float]:
    t = parse_template(HEADER + source, "bomb.j2")
    t0 = time.perf_counter()
    with pytest.raises(TemplateLimitError) as e:
        t.render(limits=limits, prompt="What is 2 + 2?", **variables)
    return str(e.value), time.perf_counter() - t0


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", sorted(BOMBS))
def test_a_template_that_would_run_away_stops_naming_file_line_and_bound(name):
    source, what = BOMBS[name]
    message, seconds = limit_error(source)
    assert message.startswith("bomb.j2:2: template stopped: "), message
    assert what in message, message
    assert "limits.template_" in message or "integer" in message or "range()" in message, message
    assert seconds < RenderLimits().timeout_s + 5, f"{name} took {seconds:.1f} s"


def test_each_bound_comes_from_the_limits_given():
    loops = "{% for i in range(1000) %}{% for j in range(1000) %}{% endfor %}{% endfor %}"
    message, _ = limit_error(loops, RenderLimits(max_steps=500))
    assert "more than 500 steps" in message and "limits.template_max_steps: 500" in message
    message, _ = limit_error("{% for i in range(100) %}{{ prompt }}{% endfor %}", RenderLimits(max_chars=300))
    assert "emitted more than 300 characters" in message and "limits.template_max_chars: 300" in message
    message, seconds = limit_error(loops * 50, RenderLimits(max_steps=10**12, timeout_s=0.2))
    assert "ran longer than 0.2 s" in message and "limits.template_timeout_s" in message
    assert seconds < 5
    ok = parse_template(HEADER + "{% for i in range(100) %}{{ prompt }}{% endfor %}", "ok.j2")
    assert len(ok.render(limits=RenderLimits(max_chars=10_000), prompt="abc")) == 300


def test_a_huge_filter_over_constants_is_not_run_when_the_template_compiles():
    # Jinja folds constant expressions while compiling; a folded |center(10**10) would hang parse_template
    t0 = time.perf_counter()
    t = parse_template(HEADER + "{{ 'x'|center(10**10) }}{{ 'y' * 10**10 }}{{ 'z' ~ 'w' * 10**10 }}", "fold.j2")
    assert time.perf_counter() - t0 < 2
    with pytest.raises(TemplateLimitError, match="fold.j2:2: "):
        t.render(prompt="p")


def test_ordinary_templates_render_as_before():
    source = (
        HEADER + "{% set d = {'a': 1, 'b': [1, 2]} %}{% for a, b in [(1, 2)] %}{{ a }}{{ b }}{% endfor %}"
        "{% for r in responses %}{{ loop.index0|letter }}{{ loop.length }}{% else %}none{% endfor %}"
        "{% filter upper %}{{ prompt }}{% endfilter %}{{ d.b|sum }} {{ '%s-%d' % ('a', 3) }} {{ '{}!'.format(prompt) }}"
        "{{ responses|join(', ') }} {{ prompt|truncate(9, leeway=0) }} {{ prompt ~ '.' }} {{ 2**10 }}"
    )
    out = parse_template(source, "ok.j2").render(prompt="What is 2 + 2?", responses=["x", "y"])
    assert out == "12A2B2WHAT IS 2 + 2?3 a-3 What is 2 + 2?!x, y What... What is 2 + 2?. 1024"


def test_untrusted_text_is_a_value_never_template_code():
    evil = "{{ 7 * 7 }}{% for i in range(10**5) %}{% for j in range(10**5) %}x{% endfor %}{% endfor %}{{ ''.__class__ }}"
    t = parse_template("{# expects: prompt, response, responses #}{{ prompt }}|{{ response }}|{{ responses[0] }}", "t.j2")
    out = t.render(limits=RenderLimits(max_steps=50), prompt=evil, response=evil, responses=[evil])
    assert out == "|".join([evil] * 3)


def test_a_compiled_template_rendered_around_render_refuses_to_run():
    t = parse_template(HEADER + "{{ prompt }}", "t.j2")
    with pytest.raises(RenderLimitError, match="outside grm.judges.templates.Template.render"):
        t.compiled.render(prompt="p")


def test_size_of_counts_repeats_without_walking_them():
    shared: list = [1]
    for _ in range(60):
        shared = [shared, shared]
    t0 = time.perf_counter()
    assert size_of(shared, 10**30) > 2**60
    assert time.perf_counter() - t0 < 1
    assert size_of(["ab", "cd"], 100) == 2 + 2 * 2 + 4
    cyclic: list = []
    cyclic.append(cyclic)
    assert size_of(cyclic, 100) < 10


@pytest.mark.timeout(120)
def test_lint_reports_a_template_that_would_run_away(tmp_path):
    (tmp_path / "loop.j2").write_text(
        "{# expects: prompt, response #}{{ prompt }} {{ response }} Score:\n" + BOMBS["nested loops, 10^10 iterations"][0]
    )
    (tmp_path / "big.j2").write_text(
        "{# expects: prompt, response #}{{ prompt }} {{ response }} Score:\n" + BOMBS["100 MB of output"][0]
    )
    judge = tmp_path / "j.yaml"
    judge.write_text(
        "name: j\nmode: pointwise\nmodel: m\ntemplate: big.j2\nparser: {type: regex, range: [1, 10]}\n"
        "limits: {template_max_chars: 5000}\n"
    )
    [problem] = lint_file(tmp_path / "loop.j2")
    assert problem.startswith(f"{tmp_path / 'loop.j2'}:2: template stopped: the render ran more than 200,000 steps")
    [problem] = lint_file(judge)
    assert "big.j2:2: template stopped: the render emitted more than 5,000 characters" in problem
    assert "limits.template_max_chars: 5000" in problem


def test_lint_does_not_report_what_depends_on_the_data(tmp_path):
    # the made-up sample has no metadata.topic: that is for `grm judge render --sample` to show
    f = tmp_path / "t.j2"
    f.write_text("{# expects: prompt, metadata #}{{ prompt }} {{ metadata.topic }}")
    assert lint_file(f) == []


def test_grm_judge_render_stops_with_one_line_naming_the_template(tmp_path):
    (tmp_path / "t.j2").write_text(
        "{# expects: prompt, response #}\n{{ prompt }} {{ response }}\n{% for i in range(10**5) %}{{ response }}{% endfor %}"
    )
    judge = tmp_path / "j.yaml"
    judge.write_text(
        "name: j\nmode: pointwise\nmodel: m\ntemplate: t.j2\nparser: {type: regex, range: [1, 10]}\n"
        "limits: {template_max_chars: 1000}\n"
    )
    sample = tmp_path / "s.json"
    sample.write_text(json.dumps({"prompt": "p", "response": "r" * 50}))
    res = run_cli("judge", "render", str(judge), "--sample", str(sample))
    assert res.code == 2 and "Traceback" not in res.err
    assert res.err.strip().count("\n") == 0, res.err
    assert f"{tmp_path / 't.j2'}:3: template stopped" in res.err and "limits.template_max_chars: 1000" in res.err


def test_a_judge_renders_within_its_spec_limits(tmp_path):
    (tmp_path / "t.j2").write_text("{# expects: prompt, response #}{% for c in response %}{{ c }}{% endfor %} Score:")
    spec = JudgeSpec(
        name="j",
        mode="pointwise",
        model="m",
        template="t.j2",
        parser={"type": "regex", "range": [1, 10]},
        limits={"template_max_steps": 100},
    )
    judge = build_judge(spec, tmp_path, ScriptedEngine(lambda p, j, c: "Score: 5"))
    assert score_one(judge, Sample(prompt="p", response="short")).score == 5.0
    with pytest.raises(JudgeError, match=r"t.j2:1: template stopped: .* \(limits.template_max_steps: 100\)"):
        score_one(judge, Sample(prompt="p", response="long " * 100))


@pytest.mark.parametrize(
    "source",
    [
        "{% if 1 %}" * 120 + "x" + "{% endif %}" * 120,  # Python allows 100 levels of indentation
        "{% for i in x %}" * 120 + "{% endfor %}" * 120,
        "{{ " + "(" * 5000 + "1" + ")" * 5000 + " }}",
        "{{ 1" + " + 1" * 15000 + " }}",  # within the size bound (65,536 characters)
    ],
)
def test_a_template_nested_past_pythons_limits_is_refused_naming_the_file(source):
    with pytest.raises(JudgeError, match=r"^deep.j2: template nests too deeply to compile$"):
        parse_template(source, "deep.j2")


def test_a_template_past_the_size_bound_is_refused_before_it_is_compiled():
    with pytest.raises(JudgeError, match=r"^huge.j2: template is 65,537 characters; at most 65,536$"):
        parse_template("x" * 65_537, "huge.j2")


@pytest.mark.timeout(60)
def test_the_expects_header_is_read_in_linear_time():
    t0 = time.perf_counter()
    # the old pattern tried every split of spaces inside the header: 0.2 s at 4,000, minutes here
    header = "{# expects: prompt," + " " * 60_000 + "response #}{{ prompt }}{{ response }}"
    assert parse_template(header, "h.j2").expects == ("prompt", "response")
    assert time.perf_counter() - t0 < 2
    assert parse_template("{#- expects: prompt,\n response -#}", "h.j2").expects == ("prompt", "response")
