"""Each render stays under ``limits.template_timeout_s`` and so do all the renders of one judgment
together (``grm.judges.sandbox.RenderClock``): a checklist judge renders one prompt per question, so
six renders of 4 s each took 24 s before."""

import json
import time

import pytest

from grm.config import JudgeSpec
from grm.judges import Sample, build_judge
from grm.judges.render import render
from grm.judges.sandbox import RenderLimits, shared_render_time
from grm.judges.templates import TemplateLimitError, parse_template
from tests.unit.fuzz.support import run_cli

# about 0.1 s a render on the reference machine; the limits below are scaled to it
SLOW = "{% for i in range(100000) %}{% for j in range(2) %}{% endfor %}{% endfor %}"


def test_renders_inside_a_shared_clock_stop_when_their_total_passes_it():
    t = parse_template("{# expects: prompt #}" + SLOW + "{{ prompt }}", "slow.j2")
    t0 = time.perf_counter()
    one = t.render(limits=RenderLimits(max_steps=10**7, timeout_s=5), prompt="p")
    per_render = time.perf_counter() - t0
    assert one == "p"
    with shared_render_time(per_render * 2.5, "one sample's prompts"):
        with pytest.raises(TemplateLimitError, match=r"^slow.j2:1: template stopped: the renders of one sample's prompts"):
            for _ in range(10):
                t.render(limits=RenderLimits(max_steps=10**7, timeout_s=5), prompt="p")
    # outside any clock, each render only has its own limit
    for _ in range(3):
        t.render(limits=RenderLimits(max_steps=10**7, timeout_s=5), prompt="p")


def test_nested_clocks_stop_at_the_earliest():
    t = parse_template("{# expects: prompt #}" + SLOW + "{{ prompt }}", "slow.j2")
    limits = RenderLimits(max_steps=10**7, timeout_s=5)
    with shared_render_time(0.0, "this command"), shared_render_time(100.0, "a batch"):
        with pytest.raises(TemplateLimitError, match="the renders of this command"):
            t.render(limits=limits, prompt="p")


def _checklist_judge(tmp_path, timeout_s: float):
    (tmp_path / "q.j2").write_text(
        "{# expects: prompt, response, question #}" + SLOW + "{{ prompt }} {{ response }} {{ question }}"
    )
    return JudgeSpec(
        name="cl",
        mode="checklist",
        model="m",
        template="q.j2",
        checklist={"source": "data"},
        prefill="Answer:",
        sampling={"n": 1, "temperature": 0.0, "max_new_tokens": 1},
        parser={"type": "logprob", "prefix": "", "candidates": [" Yes", " No"], "critique": False},
        limits={"template_timeout_s": timeout_s, "template_max_steps": 10**7},
    )


def test_a_checklist_judges_question_prompts_share_one_render_time(tmp_path):
    sample = Sample(prompt="p", response="r", metadata={"checklist": [f"question {k}?" for k in range(6)]})
    spec = _checklist_judge(tmp_path, 5.0)
    t0 = time.perf_counter()
    assert len(render(build_judge(spec, tmp_path), sample)) == 6
    per_render = (time.perf_counter() - t0) / 6
    # each render is well under the limit, six together are not
    spec = _checklist_judge(tmp_path, per_render * 3)
    t0 = time.perf_counter()
    with pytest.raises(TemplateLimitError, match=r"q.j2:1: template stopped: the renders of one sample's prompts ran longer"):
        render(build_judge(spec, tmp_path), sample)
    assert time.perf_counter() - t0 < per_render * 5 + 0.5


def test_grm_judge_render_bounds_a_commands_renders_with_one_line(tmp_path):
    # the limit from this machine's time for one render (a fixed 0.15 s let one render alone pass it
    # on a slower CPU): each of the six renders is well under it, the six together are not
    t = parse_template("{# expects: prompt #}" + SLOW + "{{ prompt }}", "slow.j2")
    t.render(limits=RenderLimits(max_steps=10**7, timeout_s=5), prompt="p")
    t0 = time.perf_counter()
    t.render(limits=RenderLimits(max_steps=10**7, timeout_s=5), prompt="p")
    spec = _checklist_judge(tmp_path, round((time.perf_counter() - t0) * 3, 3))
    (tmp_path / "j.json").write_text(spec.model_dump_json(exclude_none=True))
    sample = tmp_path / "s.json"
    sample.write_text(json.dumps({"prompt": "p", "response": "r", "metadata": {"checklist": [f"q {k} here" for k in range(6)]}}))
    res = run_cli("judge", "render", str(tmp_path / "j.json"), "--sample", str(sample))
    assert res.code == 2 and "Traceback" not in res.err and len(res.err.strip().splitlines()) == 1, res.err
    assert "q.j2:1: template stopped: the renders of" in res.err and "limits.template_timeout_s" in res.err
