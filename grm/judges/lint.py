"""``grm judge lint``: problems a judge author can fix before spending compute.

Checks: variables the template uses that judges never receive (typos), the ``expects`` header,
templates that pass their render limits or that the sandbox refuses (each is rendered with a
made-up sample, ``LINT_SAMPLE``), instructions that never mention what the parser looks for, and
example outputs whose parse differs from the one the spec says they should have, or that time out
(all examples together get ``EXAMPLES_TIME_S``). A ``target`` parser's examples run the user's
function: lint says so in a note (``grm judge`` runs with standard input closed).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from grm.config import ConfigError, JudgeSpec, load_judge
from grm.config.judge_trajectory import TrajectoryJudgeSpec
from grm.config.parsers import BoxedParser, JsonParser, LogprobParser, RegexParser, TargetParser, VerdictParser
from grm.config.paths import resolve_path
from grm.data.trajectory import Task, ToolCall, Trajectory, Turn
from grm.judges.errors import JudgeError
from grm.judges.parsers import build_parser
from grm.judges.sandbox import RenderLimits
from grm.judges.templates import (
    DEFAULT_LIMITS,
    Template,
    TemplateLimitError,
    TemplateSandboxError,
    TemplateUndefinedError,
    lint_template,
    load_template,
    render_limits,
    shared_renders,
)
from grm.judges.trajectory_view import Episode

_META = set(".^$*+?{}[]\\|()")


def literal_prefix(pattern: str) -> str:
    """The literal text a regex starts with (e.g. 'Score:' for r'Score:\\s*(\\d+)')."""
    out = []
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\" and i + 1 < len(pattern) and not pattern[i + 1].isalnum():
            out.append(pattern[i + 1])
            i += 2
            continue
        if c in _META:
            break
        out.append(c)
        i += 1
    # A quantifier right after the prefix makes its last char optional; drop it.
    if i < len(pattern) and pattern[i] in "*?{" and out:
        out.pop()
    return "".join(out).strip()


def parser_cues(spec: JudgeSpec) -> list[str]:
    """Strings the judge's instructions should mention so the model writes what the parser reads."""
    p = spec.parser
    if isinstance(p, RegexParser):
        lit = literal_prefix(p.pattern.removeprefix("(?i)"))
        return [lit] if len(lit) >= 2 else []
    if isinstance(p, VerdictParser):
        return [p.a, p.b]
    if isinstance(p, BoxedParser):
        return ["\\boxed"]
    if isinstance(p, JsonParser):
        return [p.field.split(".")[-1]]
    if isinstance(p, LogprobParser):
        return []  # the runtime forces the prefix itself
    return []


def lint_episode(answer: str) -> dict[str, Any]:
    """A made-up calculator episode as a template sees it (one tool call, its result, the answer)."""
    call = ToolCall("calculator", {"expression": "2 + 2"}, "call_0_0")
    t = Trajectory(
        id=f"lint-{answer}",
        task=Task(
            {}, [{"role": "user", "content": "What is 2 + 2?"}], [{"type": "function", "function": {"name": "calculator"}}]
        ),
        turns=[
            Turn("assistant", "I will use the calculator.", tool_calls=[call]),
            Turn("tool", "4", tool_name="calculator", tool_call_id=call.id),
            Turn("assistant", f"ANSWER: {answer}"),
        ],
        end_reason="done",
        signals={"success": 1.0},
        final_answer=answer,
    )
    return Episode.of(t, TrajectoryJudgeSpec(signals=["success"]), len, "characters").variables()


LINT_SAMPLE = {
    "prompt": "What is 2 + 2?",
    "messages": [{"role": "user", "content": "What is 2 + 2?"}],
    "response": "2 + 2 = 4.",
    "responses": ["4", "Four.", "2 + 2 = 4"],
    "reference": "4",
    "principles": "1. Correctness (weight 1.0): the answer is right.",
    "metadata": {},
    "critique": "The answer is right. Score: 9",
    "question": "Is the answer right?",
    "trajectory": lint_episode("4"),
    "trajectories": [lint_episode("4"), lint_episode("5"), lint_episode("4")],
}
"""The made-up sample ``grm judge lint`` renders every template with."""


def render_problems(t: Template, limits: RenderLimits | None = None, mode: str | None = None) -> list[str]:
    """Problems rendering ``t`` over a made-up sample shows: it passes its limits (a loop of 10^10
    steps, a 100 MB output), the sandbox refuses it, or an expression fails (``1/0``, a macro that
    calls itself for ever). Only a variable or field the made-up sample lacks (``metadata.topic``)
    is left to ``grm judge render --sample``, which renders real data."""
    variables = dict(LINT_SAMPLE)
    if mode == "pairwise":
        variables.update(responses=LINT_SAMPLE["responses"][:2], trajectories=LINT_SAMPLE["trajectories"][:2])
    try:
        t.render(limits=limits or DEFAULT_LIMITS, **variables)
    except TemplateUndefinedError:
        pass
    except (TemplateLimitError, TemplateSandboxError) as e:
        return [str(e)]
    except JudgeError as e:
        return [f"{e} (rendering lint's made-up sample; `grm judge render --sample` renders your data)"]
    return []


def _same(got: object, want: object) -> bool:
    if isinstance(want, (int, float)) and isinstance(got, (int, float)):
        return abs(float(got) - float(want)) < 1e-9
    if isinstance(want, list) and isinstance(got, list):
        return len(want) == len(got) and all(_same(a, b) for a, b in zip(got, want, strict=True))
    return got == want


EXAMPLES_TIME_S = 3.0
"""Seconds all of a judge's ``examples`` may spend being parsed, together: each regex parse gets
what is left (at most the judge's ``limits.regex_timeout_s``), so fifteen examples that each time
out take 3 s, not fifteen times the limit."""


def _lint_examples(spec: JudgeSpec, path: Path, notes: list[str] | None) -> list[str]:
    """Each example output parsed as the judge would parse it, all within ``EXAMPLES_TIME_S``: a
    parse that differs from the example's ``expect``, or that ran out of time (it says nothing about
    the text, whatever ``expect`` says), is a problem."""
    if isinstance(spec.parser, TargetParser) and spec.examples and notes is not None:
        notes.append(
            f"{path}: the {len(spec.examples)} example(s) were parsed by running your function {spec.parser.target!r} "
            "(user code, run with no input: stdin is closed)"
        )
    problems: list[str] = []
    end = time.monotonic() + EXAMPLES_TIME_S
    try:
        build_parser(spec.parser, regex_timeout_s=spec.limits.regex_timeout_s)  # a bad parser is said once
    except JudgeError as e:
        return [f"{path}: parser: {e}"]
    for k, ex in enumerate(spec.examples):
        left = end - time.monotonic()
        if left <= 0:
            return problems + [
                f"{path}: examples[{k}:]: not checked: parsing the examples took more than the {EXAMPLES_TIME_S:g} s "
                "lint gives them all"
            ]
        parse = build_parser(spec.parser, regex_timeout_s=min(spec.limits.regex_timeout_s, left))
        got = parse((spec.prefill or "") + ex.output)
        if got.timed_out:
            problems.append(f"{path}: examples[{k}]: parse timed out on example {k} ({got.error})")
            continue
        value = got.value
        if spec.mode == "pointwise" and isinstance(value, list) and len(value) == 1:
            value = value[0]
        if not _same(value, ex.expect):
            problems.append(
                f"{path}: examples[{k}]: parser gives {json.dumps(value)} ({got.error or 'ok'}), "
                f"the example expects {json.dumps(ex.expect)}"
            )
    return problems


def lint_judge(path: Path, notes: list[str] | None = None) -> list[str]:
    """Problems with the judge spec at ``path``; ``notes`` (when given) gets what lint did that the
    user should know of (it ran their parser function)."""
    try:
        spec = load_judge(path)
    except ConfigError as e:
        return [str(e)]
    with shared_renders(spec.limits, 1, f"lint of {path}"):  # its templates' renders, together
        return _lint_spec(spec, path, notes)


def _lint_spec(spec: JudgeSpec, path: Path, notes: list[str] | None) -> list[str]:
    problems: list[str] = []
    if spec.mode == "rule":
        return problems
    template: Template | None = None
    if spec.template:
        try:
            template = load_template(resolve_path(spec.template, path.parent, "prompts"))
        except (FileNotFoundError, JudgeError) as e:
            return [f"{path}: template: {e}"]
        problems += lint_template(template)
        problems += render_problems(template, render_limits(spec.limits), spec.mode)
        if spec.reference and "reference" not in template.used_variables():
            problems.append(f"{path}: reference: true but {template.path} never uses 'reference'")
        used = template.used_variables()
        if spec.mode in ("pairwise", "listwise") and not {"responses", "trajectories"} & used:
            problems.append(f"{path}: a {spec.mode} judge's template must use 'responses' (or 'trajectories')")
        if spec.mode == "pointwise" and not {"response", "trajectory"} & used:
            problems.append(f"{path}: a pointwise judge's template must use 'response' (or 'trajectory')")
        if spec.mode == "checklist" and "response" not in used:
            problems.append(f"{path}: a checklist judge's template must use 'response'")
        wrong = "trajectories" if spec.mode == "pointwise" else "trajectory" if spec.mode in ("pairwise", "listwise") else None
        if wrong in used:
            problems.append(
                f"{path}: a {spec.mode} judge's template gets no '{wrong}' (one episode is 'trajectory', several 'trajectories')"
            )
        if spec.trajectory.first_faulty_turn and "first faulty turn" not in template.source.lower():
            problems.append(f"{path}: trajectory.first_faulty_turn but {template.path} never asks for 'First faulty turn: N'")
        if spec.mode == "checklist" and "question" not in template.used_variables():
            problems.append(f"{path}: a checklist judge's template must use 'question' (the checklist item it asks)")
        problems += _lint_writer(spec, path) + _lint_principles(spec, path)
        stated = template.source + (spec.system or "") + (spec.prefill or "")
        for cue in parser_cues(spec):
            if cue.lower() not in stated.lower():
                problems.append(
                    f"{path}: parser: the {spec.parser.type} parser looks for {cue!r} but neither "
                    f"{template.path} nor system/prefill ever mention it; the model will not write it"
                )
    if not isinstance(spec.parser, LogprobParser):
        problems += _lint_examples(spec, path, notes)
    if spec.aggregate.type == "meta":  # what only building finds: the meta judge, and its own
        from grm.judges.runtime import build_judge

        try:
            build_judge(spec, path.parent)
        except (JudgeError, ConfigError) as e:
            problems.append(f"{path}: aggregate.meta_judge: {e}")
    return problems


def _lint_principles(spec: JudgeSpec, path: Path) -> list[str]:
    if spec.principles is None:
        return []
    try:
        t = load_template(resolve_path(spec.principles.template, path.parent, "prompts"))
    except (FileNotFoundError, JudgeError) as e:
        return [f"{path}: principles.template: {e}"]
    return render_problems(t, render_limits(spec.limits))


def _lint_writer(spec: JudgeSpec, path: Path) -> list[str]:
    """A checklist writer's template: clean, and shown the prompt it writes a checklist for."""
    if spec.checklist is None or spec.checklist.template is None:
        return []
    try:
        t = load_template(resolve_path(spec.checklist.template, path.parent, "prompts"))
    except (FileNotFoundError, JudgeError) as e:
        return [f"{path}: checklist.template: {e}"]
    problems = lint_template(t) + render_problems(t, render_limits(spec.limits))
    if not {"prompt", "messages"} & t.used_variables():
        problems.append(f"{path}: checklist.template {t.path} never shows the prompt ('prompt' or 'messages')")
    unseen = sorted(t.used_variables() & {"response", "responses", "question", "principles", "critique"})
    if unseen:
        problems.append(
            f"{path}: checklist.template {t.path} uses {unseen}: a checklist is written per prompt, before any response"
        )
    return problems


def lint_file(path: str | Path, notes: list[str] | None = None) -> list[str]:
    """Problems with a judge spec or a template (``.j2``); ``notes`` as for ``lint_judge``."""
    p = Path(path)
    if not p.exists():
        return [f"{p}: no such file"]
    if p.suffix == ".j2":
        try:
            t = load_template(p)
        except JudgeError as e:
            return [str(e)]
        return lint_template(t) + render_problems(t)
    return lint_judge(p, notes)
