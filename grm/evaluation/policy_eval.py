"""``grm eval --policy``: generate a policy's responses to a prompt set, score them with judges and
verifiers, and (``--against``) compare it with a second policy; resumable at every stage.

Two append-only files carry the state, each line appended and fsynced per batch (``grm.base``), so a
SIGKILL loses at most the batch in flight and a re-run with the same ``--out`` continues:
- ``responses.jsonl``: one line per (side, prompt): ``side`` is ``policy`` or ``other``;
- ``results.jsonl``: one line per (judge, side, prompt); ``side`` ``pair`` for a pairwise or
  listwise judge comparing the two policies' responses (response 1 is always POLICY's).
A line counts as done only while what it was made from is unchanged: the prompt's text (sha256) for
a response, the judge's spec hash and the judged responses' sha256 for a result. What makes the
responses themselves (policies, prompt set, sampling) is recorded in ``config.resolved.yaml`` and a
re-run that differs is refused unless ``--force``; judges may be added or changed freely.
"""

from __future__ import annotations

import gc
import hashlib
import json
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grm.base import atomic_write_text, make_dir, writer_lock
from grm.config.yaml_reader import ConfigError, load_yaml
from grm.data.prompts import Prompt, load_prompts
from grm.evaluation.errors import EvalError
from grm.evaluation.policy_source import PolicySource, resolve_policy
from grm.evaluation.runner import load_judges
from grm.jsonl import append_jsonl, read_jsonl
from grm.judges.base import Judge
from grm.judges.errors import JudgeError
from grm.judges.labelled import outcome
from grm.judges.types import Sample
from grm.terminal import escape_controls

SIDES = ("policy", "other")
PER_RESPONSE = ("rule", "pointwise", "checklist")
"""Judge modes that score each response alone; pairwise and listwise judges compare the two policies."""


@dataclass
class PolicyEvalConfig:
    policy: str
    """POLICY: run dir, checkpoint dir, policy spec or model (``grm.evaluation.policy_source``)."""
    prompts: str
    """Prompt set: anything ``data.prompts`` of a pipeline accepts."""
    out: Path
    judges: Sequence[str] = ()
    against: str | None = None
    """A second policy, generated and scored the same way and compared with POLICY."""
    limit: int | None = None
    """First N prompts only (not part of the recorded identity: raising it later adds prompts)."""
    max_new_tokens: int = 64
    temperature: float = 0.0
    """0: greedy."""
    seed: int = 0
    batch_size: int = 8
    """Prompts generated, and responses judged, per batch (and per fsync)."""
    overrides: Sequence[str] = ()
    """``key.path=value`` applied to every judge."""
    force: bool = False


def sha(text: str | None) -> str:
    return hashlib.sha256((text or "").encode()).hexdigest()[:16]


def prompt_sha(p: Prompt) -> str:
    return sha(f"{p.text}\x00{p.reference}")


def load_prompt_set(ref: str, limit: int | None) -> list[Prompt]:
    """The prompts as a pipeline's ``data:`` would read them (``checklist`` and ``constraints``
    columns carried to the judges when the set has them), in file order, ids unique."""
    from grm.config.pipeline import DataSpec
    from grm.data.sources import load_rows

    rows = load_rows(ref)
    checklist = "checklist" if rows and "checklist" in rows[0] else None
    constraints = "constraints" if rows and "constraints" in rows[0] else None
    spec = DataSpec(prompts=ref, limit=limit, shuffle=False, checklist_field=checklist, constraints_field=constraints)
    prompts = load_prompts(spec)
    seen: set[str] = set()
    for p in prompts:
        if p.id in seen:
            raise EvalError(f"{ref}: prompt id '{p.id}' appears twice; ids must be unique to resume")
        seen.add(p.id)
    if not prompts:
        raise EvalError(f"{ref}: no prompts")
    return prompts


def identity(cfg: PolicyEvalConfig, sources: dict[str, PolicySource]) -> dict[str, Any]:
    return {
        "mode": "policy",
        "prompts": cfg.prompts,
        "policy": sources["policy"].identity(),
        "against": sources["other"].identity() if "other" in sources else None,
        "sampling": {"max_new_tokens": cfg.max_new_tokens, "temperature": cfg.temperature, "seed": cfg.seed},
    }


def check_resume(out: Path, ident: dict[str, Any], record: dict[str, Any], force: bool) -> None:
    """Refuse to mix responses of a different policy, prompt set or sampling into ``out``."""
    import yaml

    path = out / "config.resolved.yaml"
    if path.exists() and not force:
        try:  # within a config's bounds (an alias bomb would expand in the comparison)
            prev = load_yaml(path, own=True).data
        except ConfigError as e:
            raise EvalError(f"{e}; --force writes it anew") from None
        old = {k: prev.get(k) for k in ident}
        differ = [k for k in ident if old[k] != ident[k]]
        if differ and not force:
            was = "; ".join(f"{k}: recorded {old[k]}, now {ident[k]}" for k in differ)
            raise EvalError(
                f"{out} holds a different evaluation ({', '.join(differ)} differ; {was}); "
                "use another --out, or --force to reuse its responses anyway"
            )
    atomic_write_text(path, yaml.safe_dump({**ident, **record}, sort_keys=False, allow_unicode=True))


def _chunks(xs: list[Any], size: int) -> Iterator[list[Any]]:
    for i in range(0, len(xs), size):
        yield xs[i : i + size]


def done_responses(lines: list[dict[str, Any]], prompts: list[Prompt]) -> dict[tuple[str, str], dict[str, Any]]:
    """(side, prompt id) -> its response line, for lines made from the prompt as it is now (a
    prompt whose text changed is generated again; the latest line wins)."""
    want = {p.id: prompt_sha(p) for p in prompts}
    return {(x["side"], x["prompt_id"]): x for x in lines if want.get(x["prompt_id"]) == x.get("prompt_sha")}


def judged_sha(p: Prompt, responses: Sequence[str]) -> str:
    """What a judgment was made from besides the judge and the prompt text: the responses and the
    prompt's metadata (its checklist, constraints), so a set whose constraints changed is judged anew."""
    text = "\x00".join(responses)
    if p.metadata:  # left out when empty: results written before metadata was hashed stay valid
        text += "\x00" + json.dumps(p.metadata, sort_keys=True)
    return sha(text)


def result_key(judge: Judge, side: str, p: Prompt, responses: Sequence[str]) -> tuple[str, ...]:
    return (judge.spec.name, judge.spec_hash, side, p.id, judged_sha(p, responses))


def _line_key(x: dict[str, Any]) -> tuple[str, ...]:
    return (x["judge"], x["spec_sha256"], x["side"], x["prompt_id"], x["responses_sha"])


# --------------------------------------------------------------------------- generation


def generate(cfg: PolicyEvalConfig, side: str, src: PolicySource, prompts: list[Prompt], path: Path, progress: Any) -> float:
    """Generate ``side``'s missing responses batch by batch; returns the seconds spent (0 when none
    were missing: the model is then never loaded)."""
    from grm.engines.base import SamplingParams, chat_requests

    done = done_responses(read_jsonl(path, own=True), prompts)
    todo = [p for p in prompts if (side, p.id) not in done]
    if not todo:
        return 0.0
    t0 = time.perf_counter()
    task = progress.add_task(escape_controls(f"generate {side}: loading {src.describe()}"), total=len(todo))
    from grm.evaluation.policy_source import load_engine

    engine = load_engine(src, max_batch_size=max(cfg.batch_size, 1))
    sp = SamplingParams(n=1, temperature=cfg.temperature, max_new_tokens=cfg.max_new_tokens, stop=src.stop, seed=cfg.seed)
    progress.update(task, description=f"generate {side}")
    for chunk in _chunks(todo, cfg.batch_size):
        tb = time.perf_counter()
        gens = engine.generate(chat_requests(chunk, src.system_prompt), sp)
        secs = (time.perf_counter() - tb) / len(chunk)
        append_jsonl(
            path,
            [
                {
                    "side": side,
                    "prompt_id": p.id,
                    "prompt_sha": prompt_sha(p),
                    "response": g.text,
                    "tokens": g.n_tokens,
                    "chars": len(g.text),
                    "finish_reason": g.finish_reason,
                    "seconds": secs,
                }
                for p, g in zip(chunk, gens, strict=True)
            ],
        )
        progress.update(task, advance=len(chunk))
    del engine
    gc.collect()  # the next side's model, or the judges', loads next
    return time.perf_counter() - t0


# --------------------------------------------------------------------------- scoring


def result_line(judge: Judge, side: str, p: Prompt, responses: Sequence[str], r: Any) -> dict[str, Any]:
    """One results.jsonl line: the outcome (score, or verdict for a comparison), masking, the
    per-key ``details`` a verifier may report, and the raw result."""
    mode = judge.spec.mode
    line: dict[str, Any] = {
        "judge": judge.spec.name,
        "spec_sha256": judge.spec_hash,
        "mode": mode,
        "side": side,
        "prompt_id": p.id,
        "responses_sha": judged_sha(p, responses),
        "parse_failures": r.parse_failures,
        "samples_total": len(r.samples),
        "tokens": r.tokens,
        "seconds": r.seconds,
        # per-constraint outcomes of an instruction-following verifier (JudgeResult.details, when the
        # judge reports them)
        "details": getattr(r, "details", None),
        "result": r.to_dict(),
    }
    if side == "pair":
        line.update(outcome(mode, "pair", [r]))
    else:
        line.update({"score": r.score, "masked": r.score is None})
    return line


def judged(
    judge: Judge, prompts: list[Prompt], responses: dict[tuple[str, str], dict[str, Any]], sides: Sequence[str]
) -> Iterator[tuple[str, Prompt, list[str]]]:
    """(side, prompt, responses judged) of every judgment ``judge`` makes: each side's response
    alone, or, for a comparison judge, the pair (POLICY's response first)."""
    per_response = judge.spec.mode in PER_RESPONSE
    for side in sides if per_response else ("pair",):
        for p in prompts:
            texts = [responses[(s, p.id)]["response"] for s in ([side] if per_response else SIDES)]
            yield side, p, texts


def current_results(
    lines: list[dict[str, Any]],
    judges: list[Judge],
    prompts: list[Prompt],
    responses: dict[tuple[str, str], dict[str, Any]],
    sides: Sequence[str],
) -> list[dict[str, Any]]:
    """The results lines of these judges on the current responses, one per judgment (the latest)."""
    wanted = {result_key(j, side, p, texts) for j in judges for side, p, texts in judged(j, prompts, responses, sides)}
    latest = {}
    for x in lines:
        k = _line_key(x) if "responses_sha" in x else None
        if k in wanted:
            latest[k] = x
    return list(latest.values())


def score(
    judges: list[Judge],
    prompts: list[Prompt],
    responses: dict[tuple[str, str], dict[str, Any]],
    sides: Sequence[str],
    path: Path,
    batch_size: int,
    progress: Any,
) -> None:
    """Every judge on every response it has not scored yet (a comparison judge on each prompt's
    pair of responses), batch by batch."""
    done = {_line_key(x) for x in read_jsonl(path, own=True) if "responses_sha" in x}
    for judge in judges:
        per_response = judge.spec.mode in PER_RESPONSE
        work = [
            (side, p, texts)
            for side, p, texts in judged(judge, prompts, responses, sides)
            if result_key(judge, side, p, texts) not in done
        ]
        if not work:
            continue
        task = progress.add_task(escape_controls(f"judge {judge.spec.name}"), total=len(work))
        for chunk in _chunks(work, batch_size):
            samples = [
                Sample.of_prompt(p, id=f"{side}/{p.id}", **({"response": texts[0]} if per_response else {"responses": texts}))
                for side, p, texts in chunk
            ]
            try:
                res = judge.score_batch(samples)
            except JudgeError as e:
                raise EvalError(f"judge '{judge.spec.name}': {e}") from None
            append_jsonl(path, [result_line(judge, s, p, t, r) for (s, p, t), r in zip(chunk, res, strict=True)])
            progress.update(task, advance=len(chunk))


# --------------------------------------------------------------------------- the command


def run_policy_eval(cfg: PolicyEvalConfig, console: Any = None) -> dict[str, Any]:
    """Run (or resume) a policy evaluation; returns the summary also written to summary.json. The
    output directory is held from its creation to the end (``grm.base.writer_lock``)."""
    with ExitStack() as held:
        return _run_policy_eval(cfg, console, held)


def _run_policy_eval(cfg: PolicyEvalConfig, console: Any, held: ExitStack) -> dict[str, Any]:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    from grm.evaluation.policy_report import write_policy_outputs
    from grm.terminal import console as literal_console

    console = console or literal_console(stderr=True)
    if cfg.batch_size < 1 or cfg.max_new_tokens < 1 or cfg.temperature < 0:
        raise EvalError("--batch-size and --max-new-tokens must be >= 1 and --temperature >= 0")
    prompts = load_prompt_set(cfg.prompts, cfg.limit)
    judges = load_judges(list(cfg.judges), cfg.overrides)
    compare = [j for j in judges if j.spec.mode not in PER_RESPONSE]
    if compare and cfg.against is None:
        names = ", ".join(f"'{j.spec.name}' ({j.spec.mode})" for j in compare)
        raise EvalError(f"judge {names} compares two responses: give --against OTHER to compare POLICY with")
    sources = {"policy": resolve_policy(cfg.policy)}
    if cfg.against is not None:
        sources["other"] = resolve_policy(cfg.against)
    sides = list(sources)

    make_dir(cfg.out, EvalError)
    held.enter_context(writer_lock(cfg.out, "grm eval", EvalError))
    ident = identity(cfg, sources)
    record = {
        "policy_ref": cfg.policy,
        "against_ref": cfg.against,
        "limit": cfg.limit,
        "judges": [{"name": j.spec.name, "spec_sha256": j.spec_hash, "mode": j.spec.mode} for j in judges],
    }
    check_resume(cfg.out, ident, record, cfg.force)

    resp_path, res_path = cfg.out / "responses.jsonl", cfg.out / "results.jsonl"
    before = done_responses(read_jsonl(resp_path, own=True), prompts)
    if before:
        console.print(f"resuming: {len(before)} of {len(prompts) * len(sides)} responses already in {resp_path}")
    t_start = time.perf_counter()
    gen_seconds = {}
    with Progress(
        TextColumn("{task.description}", style="bold", markup=False),  # judge names, model paths: not markup
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        console=console,
    ) as progress:
        for side in sides:
            gen_seconds[side] = generate(cfg, side, sources[side], prompts, resp_path, progress)
        responses = done_responses(read_jsonl(resp_path, own=True), prompts)
        score(judges, prompts, responses, sides, res_path, cfg.batch_size, progress)

    results = current_results(read_jsonl(res_path, own=True), judges, prompts, responses, sides)
    return write_policy_outputs(
        cfg.out,
        prompts,
        responses,
        results,
        judges,
        sides,
        extra={
            "policy": {"ref": cfg.policy, **sources["policy"].identity()},
            "against": {"ref": cfg.against, **sources["other"].identity()} if "other" in sources else None,
            "prompts": cfg.prompts,
            "sampling": ident["sampling"],
            "wall_seconds_this_run": time.perf_counter() - t_start,
            "generation_seconds_this_run": gen_seconds,
        },
        console=literal_console(),
    )
