"""A template saved with a UTF-8 byte order mark reads as if it had none: lint finds its ``expects``
header and the model never gets U+FEFF as the prompt's first character."""

import json

from grm.config import JudgeSpec
from grm.judges import Sample, build_judge
from grm.judges.lint import lint_file
from grm.judges.render import render
from grm.judges.templates import load_template

BOM = b"\xef\xbb\xbf"
SOURCE = "{# expects: prompt, response #}Q: {{ prompt }}\nA: {{ response }}\nScore:"


def test_a_template_with_a_byte_order_mark_lints_clean_and_renders_without_it(tmp_path):
    (tmp_path / "t.j2").write_bytes(BOM + SOURCE.encode())
    (tmp_path / "plain.j2").write_bytes(SOURCE.encode())
    assert lint_file(tmp_path / "t.j2") == []
    t = load_template(tmp_path / "t.j2")
    assert t.expects == ("prompt", "response")
    assert t.sha256 == load_template(tmp_path / "plain.j2").sha256  # the same template, the same hash
    spec = JudgeSpec(name="j", mode="pointwise", model="m", template="t.j2", parser={"type": "regex", "range": [1, 10]})
    [stage] = render(build_judge(spec, tmp_path), Sample(prompt="p", response="r"))
    [message] = stage["request"].messages
    assert message["content"].startswith("Q: p")


def test_principles_and_checklist_writer_templates_drop_it_too(tmp_path):
    (tmp_path / "w.j2").write_bytes(BOM + b"{# expects: prompt #}Write a checklist for: {{ prompt }}")
    (tmp_path / "q.j2").write_bytes(BOM + b"{# expects: prompt, response, question #}{{ prompt }} {{ response }} {{ question }}")
    j = tmp_path / "j.json"
    spec = {
        "name": "cl",
        "mode": "checklist",
        "model": "m",
        "template": "q.j2",
        "checklist": {"source": "model", "template": "w.j2"},
        "prefill": "Answer:",
        "sampling": {"n": 1, "temperature": 0.0, "max_new_tokens": 1},
        "parser": {"type": "logprob", "prefix": "", "candidates": [" Yes", " No"], "critique": False},
    }
    j.write_text(json.dumps(spec))
    assert not [p for p in lint_file(j) if "expects" in p]
    stages = render(build_judge(JudgeSpec(**spec), tmp_path), Sample(prompt="p", response="r"))
    for st in stages:
        assert not any(m["content"].startswith("\ufeff") for m in st["request"].messages)
