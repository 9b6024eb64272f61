"""``grm judge render|try|lint``."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from grm.judges.errors import JudgeError


def read_samples(path: str) -> list[Any]:
    from grm.base import regular_file_bytes
    from grm.jsonl import parse_failure, unique_keys
    from grm.judges.types import Sample

    p = Path(path)
    raw = regular_file_bytes(p, JudgeError)  # a FIFO or a device is refused, not opened
    if raw is None:
        raise JudgeError(f"{p}: no such file")
    try:
        data = json.loads(raw.decode("utf-8-sig"), object_pairs_hook=unique_keys)  # a byte order mark is harmless
    except UnicodeDecodeError:
        raise JudgeError(f"{p}: not valid UTF-8") from None
    except json.JSONDecodeError as e:
        raise JudgeError(f"{p}:{e.lineno}: invalid JSON: {e.msg}") from None
    except (ValueError, RecursionError) as e:  # an integer past 4300 digits; nesting too deep; a key twice
        raise JudgeError(f"{p}: invalid JSON: {parse_failure(e)}") from None
    try:  # JSON may escape a lone surrogate ("\\ud800"); no prompt can carry one to a model
        json.dumps(data, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as e:
        raise JudgeError(f"{p}: a string holds a lone surrogate ({e.object[e.start]!a}), not valid Unicode") from None
    items = data if isinstance(data, list) else [data]
    if not items:
        raise JudgeError(f"{p}: an empty list; give a sample object or a list of them")
    return [Sample.from_dict(d, where=f"{p}" + (f" item {i}" if isinstance(data, list) else "")) for i, d in enumerate(items)]


def check_fit(judge: Any, samples: list[Any], path: str) -> None:
    """Refuse a sample the judge cannot take (a pairwise judge without two responses, a missing
    reference) naming the sample file, before anything is rendered or scored."""
    for i, s in enumerate(samples):
        s.check_for(judge.spec.mode, judge.spec.reference, where=f"{path} item {i}" if len(samples) > 1 else path)


def _chat_text(judge: Any, request: Any) -> str | None:
    """The exact text the judge model sees, when its tokenizer is available locally."""
    if request.text is not None:
        return request.text
    from grm.models.store import ALIASES, is_fetched, model_dir

    model = judge.spec.model or ""
    if model in ALIASES:
        if not is_fetched(model):
            return None
        path = str(model_dir(model))
    elif Path(model).expanduser().is_dir():
        path = str(Path(model).expanduser())
    else:
        return None
    from transformers import AutoTokenizer

    from grm.engines.base import render_prompt

    return render_prompt(AutoTokenizer.from_pretrained(path), request)


def cmd_render(args: argparse.Namespace) -> int:
    """Each prompt exactly as the judge model gets it, after a line naming the stage and followed by
    a newline: byte for byte into a pipe or file, control characters escaped on a terminal
    (``grm.terminal``)."""
    from rich.text import Text

    from grm.judges.render import render
    from grm.judges.runtime import load
    from grm.terminal import console, text, write_exact

    out = console()
    judge = load(args.judge, overrides=args.overrides)
    samples = read_samples(args.sample)
    check_fit(judge, samples, args.sample)
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
            if "question" in st:  # a checklist judge: one judge prompt per question
                title = f"judge question {st['view']}: {st['question']}"
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
    from grm.terminal import console, text

    out = console()
    judge = load(args.judge, overrides=args.overrides)
    samples = read_samples(args.sample)
    check_fit(judge, samples, args.sample)
    t0 = time.perf_counter()
    results = judge.score_batch(samples)
    late = past_deadline(judge.spec, len(samples), time.perf_counter() - t0)
    if late:  # said on stderr: --json's stdout stays one JSON document
        print(f"warning: {late}", file=sys.stderr)
    if args.json:
        print(json.dumps([r.to_dict() for r in results], indent=2, default=str))
        return 0
    for s, r in zip(samples, results, strict=True):
        table = Table(title=text(f"{judge.spec.name} on {s.id or 'sample'}"), show_lines=True)
        for col in ("view", "order", "#", "try", "critique", "parsed", "tokens"):
            table.add_column(col, overflow="fold")
        for rec in r.samples:
            parsed = text(f"failed: {rec.error}", "red") if rec.error else text(json.dumps(rec.parsed))
            if rec.candidate_logprobs:
                shown = {k: None if v is None else round(v, 2) for k, v in rec.candidate_logprobs.items()}
                parsed.append(text(f"\nlogprobs {json.dumps(shown)}"))
            table.add_row(
                str(rec.view), str(rec.order), str(rec.index), str(rec.attempt), text(rec.text), parsed, str(rec.tokens)
            )
        if r.principles:
            out.print(Text.assemble(("principles", "bold"), "\n", text(r.principles)))
        for k, a in enumerate(r.checklist or []):
            p_yes = "unread" if a["p_yes"] is None else f"P(yes) {a['p_yes']:.3f}"
            p_yes += " (passes on No)" if a.get("pass_if") == "no" else ""
            out.print(Text.assemble(text(f"question {k} (weight {a['weight']:g}): {a['question']}  "), (p_yes, "bold")))
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
        out.print(text("final: " + json.dumps({k: v for k, v in final.items() if v is not None}, default=str)))
    return 0


def cmd_lint(args: argparse.Namespace) -> int:
    from grm.judges.lint import lint_file
    from grm.terminal import escape_controls

    bad = 0
    for f in args.files:
        problems = lint_file(f)
        for p in problems:  # they quote the file's own text: shown, never obeyed by the terminal
            print(escape_controls(p))
        if problems:
            bad += 1
        else:
            print(f"ok: {escape_controls(f)}")
    return 1 if bad else 0


def run(args: argparse.Namespace) -> int:
    return {"render": cmd_render, "try": cmd_try, "lint": cmd_lint}[args.judge_command](args)
