"""``grm rescore DIR``: re-parse and re-aggregate stored raw outputs, without generating."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from grm.base import read_jsonl, rewrite_jsonl
from grm.config import JudgeSpec, load_judge
from grm.evaluation.length_control import LengthControl
from grm.evaluation.report import write_outputs
from grm.evaluation.runner import EvalError, both_orders, outcome
from grm.judges.base import Judge
from grm.judges.runtime import build_judge


def rescore(
    out: Path, judge_ref: str | None = None, console: Any = None, length_control: LengthControl | None = None
) -> dict[str, Any]:
    """Re-parse and re-aggregate ``out``'s raw outputs (with ``judge_ref``: under a changed spec) and
    rewrite its report; ``length_control`` adds the length-controlled rows (lengths are stored)."""
    import yaml

    rec_path = out / "config.resolved.yaml"
    if not rec_path.exists():
        raise EvalError(f"{out}: no config.resolved.yaml; is this a `grm eval` output directory?")
    record = yaml.safe_load(rec_path.read_text())
    judges: dict[str, Judge] = {}
    for j in record["judges"]:
        spec = JudgeSpec.model_validate(j["spec"], context={"base_dir": Path(j["base_dir"])})
        judges[j["name"]] = build_judge(spec, j["base_dir"])
    if judge_ref:
        new_spec = load_judge(judge_ref)
        path = Path(judge_ref)
        target = new_spec.name if new_spec.name in judges else (next(iter(judges)) if len(judges) == 1 else None)
        if target is None:
            raise EvalError(f"--judge names '{new_spec.name}', which is not among the recorded judges ({', '.join(judges)})")
        if new_spec.mode != judges[target].spec.mode:
            raise EvalError(
                f"--judge is {new_spec.mode} but '{target}' was {judges[target].spec.mode}; the raw outputs do not fit"
            )
        judges[target] = build_judge(both_orders(new_spec), path.parent if path.exists() else None)
    lines = read_jsonl(out / "results.jsonl")
    if not lines:
        raise EvalError(f"{out}: results.jsonl is empty; nothing to rescore")
    new_lines = []
    for line in lines:
        judge = judges.get(line["judge"])
        if judge is None:
            continue
        n = 2 if judge.spec.mode in ("pairwise", "listwise") else 1
        res = [judge.rescore(r, n) for r in line["results"]]
        new = {**line, "results": [r.to_dict() for r in res], "parse_failures": sum(r.parse_failures for r in res)}
        new.update(outcome(judge.spec.mode, line["kind"], res))
        if judge_ref:
            new["judge"] = line["judge"]
        new_lines.append(new)
    rewrite_jsonl(out / "results.rescored.jsonl", new_lines)
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
