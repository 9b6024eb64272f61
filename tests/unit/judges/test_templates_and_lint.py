import pytest

from grm.judges.errors import JudgeError
from grm.judges.lint import lint_file, literal_prefix
from grm.judges.templates import lint_template, parse_template


@pytest.mark.parametrize(
    "evil",
    [
        "{{ ''.__class__.__mro__[1].__subclasses__() }}",
        "{{ prompt.__class__ }}",
        "{{ cycler.__init__.__globals__ }}",
        "{% for c in ().__class__.__base__.__subclasses__() %}{{ c }}{% endfor %}",
    ],
)
def test_sandbox_refuses_attribute_escapes(evil):
    t = parse_template("{# expects: prompt #}" + evil, "evil.j2")
    with pytest.raises(JudgeError, match="evil.j2:1: (template refused by the sandbox|.*undefined)"):
        t.render(prompt="hi")


def test_templates_cannot_change_what_they_read():
    t = parse_template("{# expects: metadata #}{{ metadata.update({'a': 1}) }}", "mutate.j2")
    metadata = {"topic": "m"}
    with pytest.raises(JudgeError, match="mutate.j2:1: template refused by the sandbox"):
        t.render(metadata=metadata)
    assert metadata == {"topic": "m"}


def test_any_exception_while_rendering_names_file_and_line():
    t = parse_template("{# expects: prompt #}\n{{ prompt }}\n{{ 1 / 0 }}", "zero.j2")
    with pytest.raises(JudgeError, match="zero.j2:3: template error while rendering: ZeroDivisionError"):
        t.render(prompt="x")


def test_strict_undefined_names_the_variable():
    t = parse_template("{# expects: prompt #}{{ promt }}", "typo.j2")
    with pytest.raises(JudgeError, match="'promt' is undefined"):
        t.render(prompt="x")


def test_lint_catches_misspelt_variable_and_header(tmp_path):
    f = tmp_path / "t.j2"
    f.write_text("{# expects: prompt, response #}{{ prompt }} {{ respnse }}")
    problems = lint_file(f)
    assert any("undefined variable 'respnse'" in p and "did you mean 'response'" in p for p in problems)
    assert any("header expects 'response' but the template never uses it" in p for p in problems)
    f.write_text("{{ prompt }}")
    assert any("missing '{# expects" in p for p in lint_file(f))


def test_lint_catches_parser_that_cannot_match_template(tmp_path):
    (tmp_path / "t.j2").write_text("{# expects: prompt, response #}{{ prompt }} {{ response }}\nEnd with 'Rating: <n>'.")
    j = tmp_path / "j.yaml"
    j.write_text(
        "name: j\nmode: pointwise\nmodel: m\ntemplate: t.j2\nparser: {type: regex, pattern: 'Score:\\s*(\\d+)', range: [1, 10]}\n"
        "examples:\n  - {output: 'Rating: 7', expect: 7}\n"
    )
    problems = lint_file(j)
    assert any("looks for 'Score:'" in p for p in problems), problems
    assert any("examples[0]: parser gives null" in p for p in problems), problems
    j.write_text(j.read_text().replace("Score:", "Rating:"))
    assert lint_file(j) == []


def test_literal_prefix():
    assert literal_prefix(r"Score:\s*(\d+)") == "Score:"
    assert literal_prefix(r"\[\[([AB])\]\]") == "[["
    assert literal_prefix(r"Final score\s*=\s*(\d)") == "Final score"
    assert literal_prefix(r"Scores?:") == "Score"


def test_template_lint_unused_header_var():
    t = parse_template("{# expects: prompt, reference #}{{ prompt }}", "x.j2")
    assert any("never uses it" in p for p in lint_template(t))
