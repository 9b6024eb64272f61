"""``grm judge render|try|lint``."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from collections.abc import Iterator
from typing import Any

from grm.judges.errors import JudgeError
from grm.judges.sample_file import read_samples


def check_fit(judge: Any, samples: list[Any], path: str) -> None:
    """Refuse a sample the judge cannot take (a pairwise judge without two responses, a missing
    reference, a checklist longer than the judge asks) naming the sample file and the item, before
    anything is rendered or scored."""
    from grm.judges.checklist import ChecklistJudge
    from grm.terminal import one_line

    for i, s in enumerate(samples):
        where = one_line(f"{path} item {i}" if len(samples) > 1 else path)
        s.check_for(judge.spec.mode, judge.spec.reference, where=where)
        if isinstance(judge, ChecklistJudge) and judge.writer is None:
            judge.from_data(s, where)


def _chat_text(judge: Any, request: Any) -> str | None:
    """The exact text the judge model sees, when its tokenizer is available locally."""
    if request.text is not None:
        return request.text
    from grm.engines.base import render_prompt
    from grm.models.loading import local_tokenizer

    tokenizer = local_tokenizer(judge.spec.model or "")
    return None if tokenizer is None else render_prompt(tokenizer, request)


def cmd_render(args: argparse.Namespace) -> int:
    """Each prompt exactly as the judge model gets it, after a line naming the stage and followed by
    a newline: byte for byte into a pipe or file, control characters escaped on a terminal
    (``grm.terminal``)."""
    from rich.text import Text

    from grm.judges.render import render
    from grm.judges.runtime import load
    from grm.judges.templates import shared_renders
    from grm.terminal import console, one_line, text, write_exact

    out = console()
    judge = load(args.judge, overrides=args.overrides)
    samples = read_samples(args.sample)
    check_fit(judge, samples, args.sample)
    with shared_renders(judge.spec.limits, 1, "this command"):  # all its renders, however many samples
        for s in samples:
            stages = render(judge, s)
            if not stages:
                out.print(
                    Text.assemble(
                        text(judge.spec.name, "bold"), text(f" is a rule verifier ({judge.spec.rule.type}); it sends no prompt")
                    )
                )
            for st in stages:
                req = st["request"]
                title = st["stage"] if st["stage"] != "judge" else f"judge view {st['view']} order {st['order']} x{st['n']}"
                if "question" in st:  # a checklist judge: one judge prompt per question (the data's text: one line)
                    title = f"judge question {st['view']}: {one_line(st['question'])}"
                exact = _chat_text(judge, req)
                if exact is not None:
                    title += " (exact model input)"
                else:
                    title += " (chat messages; fetch the model to see the exact text)"
                    exact = "\n".join(f"[{m['role']}]\n{m['content']}" for m in req.messages)
                out.print(text(f"── {title}", "bold"), soft_wrap=True)  # whole, never cut to the width
                write_exact(out.file, exact + "\n")
    return 0


def cmd_try(args: argparse.Namespace) -> int:
    from rich.table import Table
    from rich.text import Text

    from grm.judges.limits import past_deadline
    from grm.judges.runtime import load
    from grm.judges.templates import shared_renders
    from grm.terminal import console, one_line, text

    out = console()
    judge = load(args.judge, overrides=args.overrides)
    samples = read_samples(args.sample)
    check_fit(judge, samples, args.sample)
    t0 = time.perf_counter()
    with shared_renders(judge.spec.limits, 1, "this command"):
        results = judge.score_batch(samples)
    late = past_deadline(judge.spec, len(samples), time.perf_counter() - t0)
    if late:  # said on stderr: --json's stdout stays one JSON document
        print(f"warning: {late}", file=sys.stderr)
    if args.json:
        print(_json([r.to_dict() for r in results], indent=2))
        return 0
    for s, r in zip(samples, results, strict=True):
        table = Table(title=text(one_line(f"{judge.spec.name} on {s.id or 'sample'}")), show_lines=True)
        for col in ("view", "order", "#", "try", "critique", "parsed", "tokens"):
            table.add_column(col, overflow="fold")
        for rec in r.samples:
            parsed = text(f"failed: {rec.error}", "red") if rec.error else text(_json(rec.parsed))
            if rec.candidate_logprobs:
                shown = {k: None if v is None else round(v, 2) for k, v in rec.candidate_logprobs.items()}
                parsed.append(text(f"\nlogprobs {_json(shown)}"))
            table.add_row(
                str(rec.view), str(rec.order), str(rec.index), str(rec.attempt), text(rec.text), parsed, str(rec.tokens)
            )
        if r.principles:
            out.print(Text.assemble(("principles", "bold"), "\n", text(r.principles)))
        for k, a in enumerate(r.checklist or []):
            p_yes = "unread" if a["p_yes"] is None else f"P(yes) {a['p_yes']:.3f}"
            p_yes += " (passes on No)" if a.get("pass_if") == "no" else ""
            out.print(Text.assemble(text(f"question {k} (weight {a['weight']:g}): {one_line(a['question'])}  "), (p_yes, "bold")))
        out.print(table)
        final = {
            "score": r.score,
            "reward": r.reward,
            "scores": r.scores,
            "verdict": r.verdict,
            "margin": r.margin,
            "positional_agreement": r.positional_agreement,
            "details": r.details,
            "masked": r.masked,
            "parse_failures": r.parse_failures,
            "truncated": r.truncated,
            "tokens": r.tokens,
            "seconds": round(r.seconds, 2),
        }
        out.print(text("final: " + _json({k: v for k, v in final.items() if v is not None})))
    return 0


def _json(value: Any, indent: int | None = None) -> str:
    """``value`` as strict JSON (``json_safe``: no NaN or infinity, no lone surrogate), what
    ``--json`` promises a reader: Python's own ``NaN`` literal is not JSON."""
    from grm.jsonl import json_safe

    try:
        return json.dumps(json_safe(value), indent=indent, default=str, allow_nan=False)
    except ValueError as e:  # nested past MAX_JSON_DEPTH
        raise JudgeError(f"--json: the results cannot be written as JSON: {e}") from None


def cmd_lint(args: argparse.Namespace) -> int:
    from grm.judges.lint import lint_file
    from grm.terminal import escape_controls

    bad = 0
    for f in args.files:
        notes: list[str] = []
        problems = lint_file(f, notes)
        for p in problems:  # they quote the file's own text: shown, never obeyed by the terminal
            print(escape_controls(p))
        if problems:
            bad += 1
        else:
            print(f"ok: {escape_controls(f)}")
        for n in notes:
            print(f"note: {escape_controls(n)}")
    return 1 if bad else 0


def run(args: argparse.Namespace) -> int:
    with no_stdin():
        return {"render": cmd_render, "try": cmd_try, "lint": cmd_lint}[args.judge_command](args)


@contextlib.contextmanager
def no_stdin() -> Iterator[None]:
    """Standard input closed for the duration: ``/dev/null`` in its place, as ``sys.stdin`` and as
    file descriptor 0. A judge command may run the user's code (a parser ``target`` on lint's
    examples and on critiques, an environment, a template's engine); none of it reads a terminal
    or a pipe meant for something else: ``input()`` there raises EOFError (a failed parse) instead
    of waiting for ever."""
    devnull = open(os.devnull, encoding="utf-8")  # noqa: SIM115 (closed below, after fd 0 is back)
    saved_fd = None
    try:
        saved_fd = os.dup(0)
    except OSError:  # no descriptor 0 at all: nothing can be read from it either
        pass
    saved = sys.stdin
    try:
        if saved_fd is not None:
            os.dup2(devnull.fileno(), 0)
        sys.stdin = devnull
        yield
    finally:
        sys.stdin = saved
        if saved_fd is not None:
            os.dup2(saved_fd, 0)
            os.close(saved_fd)
        devnull.close()
