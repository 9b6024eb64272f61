"""The judge gate (``judges[].gate`` in a pipeline): before training, each gated judge is evaluated
on labelled pairs by ``grm eval``'s own runner, in this process; a judge below its bar stops the run
before the policy is loaded.

``grm run`` hands ``run_gates`` to the driver, which calls it once the run directory exists and
before Ray places any role (the orchestrator may not import evaluation, so the gate arrives as a
function). The run directory keeps ``gate/<judge>/`` (the eval directory: results.jsonl,
metrics.json, report.md) and ``gate.json`` (one decision per judge); ``--resume`` does not re-run a
gate that passed with the same judge spec and gate settings.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from grm.base import GrmError, atomic_write_text, discard_dir, own_dir, regular_file_bytes
from grm.config.pipeline import GateSpec
from grm.config.resolve import LoadedJudge, LoadedPipeline
from grm.data.items import labelled_pairs
from grm.judges.base import hash_spec

GATE_FILE = "gate.json"
"""In the run directory: ``{judge name: GateResult as a dict}``."""


class GateFailed(GrmError):
    """A gated judge's accuracy on its labelled pairs is below its bar; the run stopped before training."""


@dataclass(frozen=True)
class GateResult:
    judge: str
    passed: bool
    accuracy: float | None
    """Swap-combined accuracy on the gate's pairs (ties and masked count as wrong); None: undefined."""
    ci95: tuple[float, float] | None
    """Percentile bootstrap 95% interval of ``accuracy`` (``grm eval``'s)."""
    min_accuracy: float
    pairs: int
    masked_rate: float | None
    data: str
    limit: int | None
    eval_dir: str
    spec_sha256: str

    def line(self) -> str:
        """One line a person can act on: judge, accuracy with its CI, the bar, where to look."""
        acc = "undefined" if self.accuracy is None else f"{self.accuracy:.3f}"
        ci = "" if self.ci95 is None else f" (95% CI {self.ci95[0]:.3f}-{self.ci95[1]:.3f})"
        masked = f", {self.masked_rate:.0%} masked" if self.masked_rate else ""
        where = f"on {self.pairs} labelled pairs of {self.data}{masked}"
        if self.passed:
            return (
                f"gate passed: judge '{self.judge}' accuracy {acc}{ci} {where} >= min_accuracy "
                f"{self.min_accuracy:g} ({self.eval_dir})"
            )
        return (
            f"judge '{self.judge}' failed its gate: accuracy {acc}{ci} {where} is below min_accuracy "
            f"{self.min_accuracy:g}; the policy was not loaded; inspect {self.eval_dir}/report.md"
        )


def _finite(x: Any) -> float | None:
    return float(x) if isinstance(x, (int, float)) and math.isfinite(x) else None


def decide(judge: str, metrics: dict[str, Any], gate: GateSpec, eval_dir: Path, spec_sha256: str) -> GateResult:
    """The gate's decision from the judge's ``grm eval`` metrics (``metrics.json``'s
    ``judges.<name>``): passed when the swap-combined accuracy is at least ``gate.min_accuracy``. The
    point estimate decides; the interval is reported so a bar within it reads as the coin flip it is."""
    pairs = metrics.get("pairs") or {}
    acc = _finite(pairs.get("accuracy_swap_combined"))
    ci = pairs.get("accuracy_swap_combined_ci95")
    ci95 = (float(ci[0]), float(ci[1])) if ci and all(_finite(x) is not None for x in ci) else None
    return GateResult(
        judge=judge,
        passed=acc is not None and acc >= gate.min_accuracy,
        accuracy=acc,
        ci95=ci95,
        min_accuracy=gate.min_accuracy,
        pairs=int(pairs.get("n", 0)),
        masked_rate=_finite(metrics.get("masked_rate")),
        data=gate.data,
        limit=gate.limit,
        eval_dir=str(eval_dir),
        spec_sha256=spec_sha256,
    )


def recorded(run_dir: Path) -> dict[str, dict[str, Any]]:
    """``gate.json`` of a run directory ({} when there is none)."""
    f = run_dir / GATE_FILE
    raw = regular_file_bytes(f, own=True)
    if raw is None:
        return {}
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError) as e:
        raise GrmError(f"{f}: not a gate record grm wrote ({type(e).__name__}: {e}); delete it to run the gate again") from None
    if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
        raise GrmError(f"{f}: expected an object of per-judge gate decisions; delete it to run the gate again")
    return data


def _same_gate(prev: dict[str, Any], j: LoadedJudge, gate: GateSpec) -> bool:
    return (prev.get("spec_sha256"), prev.get("data"), prev.get("limit"), prev.get("min_accuracy")) == (
        hash_spec(j.spec),
        gate.data,
        gate.limit,
        gate.min_accuracy,
    )


def run_gates(loaded: LoadedPipeline, run_dir: Path, console: Any = None) -> list[GateResult]:
    """Evaluate every gated judge of ``loaded`` (or take a passed decision from ``gate.json``), record
    the decisions, and raise ``GateFailed`` naming each judge below its bar."""
    from grm.evaluation.runner import EvalConfig, run
    from grm.terminal import console as literal_console

    console = console or literal_console()
    decisions = recorded(run_dir)
    results = []
    for j in loaded.judges:
        gate = j.role.gate
        if gate is None:
            continue
        prev = decisions.get(j.name)
        own_dir(run_dir / "gate")
        eval_dir = own_dir(run_dir / "gate" / j.name)  # a link would have the gate delete and write elsewhere
        if prev is not None and _same_gate(prev, j, gate):
            if prev["passed"]:
                console.print(
                    f"gate: judge '{j.name}' passed before ({run_dir / GATE_FILE}); not re-run", highlight=False, soft_wrap=True
                )
                continue
        elif prev is not None and eval_dir.exists():
            discard_dir(eval_dir)  # another spec or gate: its judgments are not this gate's
        labelled_pairs(gate.data, gate.limit, f"judge '{j.name}' gate")  # no labelled pairs: say so before judging
        console.print(
            f"gate: evaluating judge '{j.name}' on {gate.data} (bar: accuracy >= {gate.min_accuracy:g})",
            highlight=False,
            soft_wrap=True,
        )
        cfg = EvalConfig(judges=[str(j.path)], data=gate.data, out=eval_dir, limit=gate.limit, overrides=j.role.overrides)
        metrics = run(cfg, console=literal_console(stderr=True))
        result = decide(j.name, metrics["judges"].get(j.name, {}), gate, eval_dir, hash_spec(j.spec))
        decisions[j.name] = asdict(result)
        atomic_write_text(run_dir / GATE_FILE, json.dumps(decisions, indent=2))
        results.append(result)
        if result.passed:
            console.print(result.line(), highlight=False, soft_wrap=True)
    failed = [r for r in results if not r.passed]
    if failed:
        raise GateFailed("\n".join(r.line() for r in failed))
    return results
