"""``grm rescore DIR``: re-parse and re-aggregate stored raw outputs, without generating."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from grm.base import regular_file_bytes, writer_lock
from grm.config import JudgeSpec, load_judge
from grm.config.paths import resolve_path
from grm.config.template_size import MAX_TEMPLATE_CHARS
from grm.evaluation.errors import EvalError
from grm.evaluation.length_control import LengthControl
from grm.evaluation.report import write_outputs
from grm.evaluation.result_lines import check_result_line, latest_results
from grm.evaluation.runner import both_orders, read_record
from grm.jsonl import read_jsonl_numbered, rewrite_jsonl
from grm.judges.base import Judge
from grm.judges.errors import JudgeError
from grm.judges.labelled import outcome
from grm.judges.rescore import rescore as rescore_result
from grm.judges.runtime import build_judge
from grm.judges.templates import template_source
from grm.run_format import stamp


def rescore(
    out: Path, judge_ref: str | None = None, console: Any = None, length_control: LengthControl | None = None
) -> dict[str, Any]:
    """Re-parse and re-aggregate ``out``'s raw outputs (with ``judge_ref``: under a changed spec) and
    rewrite its report; ``length_control`` adds the length-controlled rows (lengths are stored).

    Refused while a ``grm eval`` writes ``out`` (``grm.base.writer_lock``): its results are not
    complete, and its last line may be half written."""
    rec_path = out / "config.resolved.yaml"
    if not rec_path.is_file():
        raise EvalError(f"{out}: no config.resolved.yaml; is this a `grm eval` output directory?")
    with writer_lock(out, "grm rescore", EvalError):
        return _rescore(out, rec_path, judge_ref, console, length_control)


def names_code(spec: Any) -> str | None:
    """What in a recorded spec would make grm run code or load another spec: a ``target`` (a
    ``module:function`` a target parser imports and calls) or a meta judge's spec; None if nothing."""
    if isinstance(spec, dict):
        for k, v in spec.items():
            if k == "target" and isinstance(v, str):
                return f"target {v!r}"
            if k == "meta_judge" and v is not None:
                return f"meta_judge {v!r}"
            found = names_code(v)
            if found:
                return found
    elif isinstance(spec, list):
        return next((f for f in map(names_code, spec) if f), None)
    return None


MAX_REGEX_TIMEOUTS = 3
"""Stored outputs a recorded judge's parser pattern may time out on before rescore stops."""


def _default_time_limits(spec: JudgeSpec) -> JudgeSpec:
    """A recorded spec is data from the directory: its render and regex time limits are held to the
    defaults at most, so a crafted directory cannot make one stored output cost minutes."""
    defaults = type(spec.limits)()
    limits = spec.limits.model_copy(
        update={
            "regex_timeout_s": min(spec.limits.regex_timeout_s, defaults.regex_timeout_s),
            "template_timeout_s": min(spec.limits.template_timeout_s, defaults.template_timeout_s),
        }
    )
    return spec.model_copy(update={"limits": limits})


def _recorded_specs(rec_path: Path) -> dict[str, tuple[JudgeSpec, str, dict[str, Any]]]:
    """Each recorded judge's validated spec, its base directory and the spec as recorded."""
    specs: dict[str, tuple[JudgeSpec, str, dict[str, Any]]] = {}
    for j in read_record(rec_path)["judges"]:
        if not isinstance(j.get("spec"), dict) or not isinstance(j.get("base_dir"), str):
            raise EvalError(
                f"{rec_path}: judge '{j['name']}' has no recorded spec; rescore re-reads judge evaluations "
                "(grm eval JUDGES --data), not policy evaluations"
            )
        try:
            spec = JudgeSpec.model_validate(j["spec"], context={"base_dir": Path(j["base_dir"])})
        except ValidationError as e:  # a spec an older grm recorded, or one edited by hand
            err = e.errors(include_url=False)[0]
            field = ".".join(str(x) for x in err["loc"]) or "spec"
            raise EvalError(
                f"{rec_path}: judge '{j['name']}': its recorded spec no longer validates ({field}: {err['msg']}); "
                "evaluate again into another --out"
            ) from None
        specs[j["name"]] = (spec, j["base_dir"], j["spec"])
    return specs


def _rescore(
    out: Path, rec_path: Path, judge_ref: str | None, console: Any, length_control: LengthControl | None
) -> dict[str, Any]:
    specs = _recorded_specs(rec_path)
    judges: dict[str, Judge] = {}
    if judge_ref:
        new_spec = load_judge(judge_ref)
        path = Path(judge_ref)
        target = new_spec.name if new_spec.name in specs else (next(iter(specs)) if len(specs) == 1 else None)
        if target is None:
            raise EvalError(f"--judge names '{new_spec.name}', which is not among the recorded judges ({', '.join(specs)})")
        if new_spec.mode != specs[target][0].mode:
            raise EvalError(f"--judge is {new_spec.mode} but '{target}' was {specs[target][0].mode}; the raw outputs do not fit")
        judges[target] = build_judge(both_orders(new_spec), path.parent if path.exists() else None)
    results_path = out / "results.jsonl"
    # no repair: a torn last line is the killed eval's, cut by the `grm eval` that resumes it
    lines = latest_results(read_jsonl_numbered(results_path, repair=False, check=check_result_line, own=True), results_path)
    if not lines:
        raise EvalError(f"{out}: results.jsonl is empty; nothing to rescore")
    for name, (spec, base_dir, recorded) in specs.items():
        if name in judges or not any(line.get("judge") == name for _, line in lines):
            continue  # the --judge given; or a judge with no stored results: nothing to rescore, nothing built
        code = names_code(recorded)  # a directory is data: it may not make grm import or load anything
        if code:
            raise EvalError(
                f"{rec_path}: judge '{name}' names code to run ({code}); grm rescore runs no code an eval "
                "directory names: rescore it with --judge SPEC, a spec you trust"
            )
        _same_templates(rec_path, name, spec, base_dir, lines)
        judges[name] = build_judge(_default_time_limits(spec), base_dir)
    new_lines, timeouts = [], dict.fromkeys(judges, 0)
    for n, line in lines:
        judge = judges.get(line["judge"])
        if judge is None:
            continue
        k = 2 if judge.spec.mode in ("pairwise", "listwise") else 1
        try:
            res = [rescore_result(judge, r, k) for r in line["results"]]
            new = {
                **line,
                "results": [r.to_dict() for r in res],
                "parse_failures": sum(r.parse_failures for r in res),
                "one_order_failed": sum(r.one_order_failed for r in res),
            }
            new.update(outcome(judge.spec.mode, line["kind"], res))
        except JudgeError as e:  # this judge cannot rescore what is stored (a rule verifier keeps no raw output)
            raise EvalError(f"{results_path}:{n}: judge '{line['judge']}': {e}") from None
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as e:  # a stored result edited by hand
            raise EvalError(
                f"{results_path}:{n}: cannot rescore its stored results ({type(e).__name__}: {str(e)[:200]})"
            ) from None
        errors = [str(smp.get("error") or "") for r in new["results"] for smp in r.get("samples") or []]
        timeouts[line["judge"]] += sum(e.startswith("regex timed out") for e in errors)
        if timeouts[line["judge"]] >= MAX_REGEX_TIMEOUTS:
            raise EvalError(
                f"{results_path}:{n}: judge '{line['judge']}': its parser pattern timed out on {timeouts[line['judge']]} "
                "stored outputs; a pattern that backtracks this much is not rescored: rescore with --judge SPEC, a spec "
                "whose pattern you trust"
            )
        if judge_ref:
            new["judge"] = line["judge"]
        new_lines.append(new)
    rewrite_jsonl(out / "results.rescored.jsonl", [stamp("results", x) for x in new_lines])
    names = list(dict.fromkeys(ln["judge"] for ln in new_lines))
    return write_outputs(
        out,
        new_lines,
        names,
        extra={"rescored": True, "rescored_with": judge_ref},
        console=console,
        title="Evaluation report (rescored)",
        length_control=length_control,
    )


def _template_files(spec: JudgeSpec, base_dir: Path) -> dict[str, Path]:
    """The template files a recorded spec names, by the provenance key that records their hash."""
    refs = {
        "template_sha256": spec.template,
        "principles_template_sha256": spec.principles.template if spec.principles else None,
        "checklist_template_sha256": spec.checklist.template if spec.checklist and spec.checklist.source == "model" else None,
    }
    out = {}
    for key, ref in refs.items():
        if ref:
            try:
                out[key] = resolve_path(ref, base_dir, "prompts")
            except FileNotFoundError:
                out[key] = base_dir / ref  # hashes as missing: refused below like any other mismatch
    return out


def _file_sha256(path: Path) -> str | None:
    """A template file's hash as ``grm.judges.templates`` computes it (UTF-8, newlines as \\n); None
    when it cannot be read as one."""
    try:
        raw = regular_file_bytes(path, EvalError, limit=4 * MAX_TEMPLATE_CHARS)
        if raw is None:
            return None
        text = template_source(raw)
    except (EvalError, UnicodeDecodeError):
        return None
    return hashlib.sha256(text.encode()).hexdigest()


def _same_templates(rec_path: Path, name: str, spec: JudgeSpec, base_dir: str, lines: list[tuple[int, dict[str, Any]]]) -> None:
    """Refuse a recorded judge whose template files do not hash to what its stored results name,
    before any is compiled.

    The record's paths come from the directory, which is data: a crafted record may name any file
    (``/etc/shadow``), and building the judge would quote it in a syntax error or report its hash.
    Only whether the file is the one the results were judged with is learnt, and the message says
    nothing of what the file holds. A template edited since the eval fails the same check.
    """
    files = _template_files(spec, Path(base_dir))
    ours = [line for _, line in lines if line.get("judge") == name]
    if not files or not ours:
        return
    stored = next(
        (
            r["provenance"]
            for line in ours
            for r in (line.get("results") or [])
            if isinstance(r, dict) and isinstance(r.get("provenance"), dict)
        ),
        None,
    )
    if stored is not None and all(stored.get(k) == _file_sha256(f) for k, f in files.items()):
        return  # one stored result vouches for the files: every line came from the one eval's judge
    raise EvalError(
        f"{rec_path}: judge '{name}': its template files are not the ones its stored results were judged "
        "with (edited since, or the record names other files); rescore with --judge SPEC, a spec you trust"
    )
