"""The judge canary (``judges[].canary`` in a pipeline): after every K-th training step the judge
re-scores a fixed set of labelled pairs through the same path training uses (its actor's judge, or
the driver's rule verifier), and the step's metrics line gets

    canary/<judge>/accuracy        share of pairs whose verdict names the labelled response
    canary/<judge>/score_mean      mean raw score given (pairwise: mean margin for response 1)
    canary/<judge>/accuracy_drift  accuracy minus the run's first reading (negative: a fall)
    canary/<judge>/score_drift     score_mean minus the first reading's
    canary/<judge>/masked          pairs without a usable judgment (counted as wrong)
    canary/<judge>/alarm           the fall is beyond canary.max_drop
    canary/<judge>/seconds         wall time of the reading

A fall beyond ``max_drop`` prints a warning and is listed in report.md. The first reading of the
run is the baseline (a resumed run finds it in metrics.jsonl); the gate's accuracy is not, since
the gate may judge other pairs.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grm.base import GrmError, regular_file_bytes
from grm.config.pipeline import CanarySpec
from grm.config.resolve import LoadedPipeline
from grm.data.items import EvalItem, labelled_pairs
from grm.judges.labelled import accuracy, outcome, samples_for, score_values
from grm.judges.types import JudgeResult, Sample
from grm.report_files import markdown_table

PREFIX = "canary/"


@dataclass(frozen=True)
class Reading:
    accuracy: float
    score_mean: float
    masked: int


def read(mode: str, items: list[EvalItem], per_item: list[list[JudgeResult]]) -> Reading:
    """Accuracy, mean score and masked pairs of one canary pass (``per_item``: each item's results)."""
    outs = [outcome(mode, "pair", res) for res in per_item]
    scores = [v for res in per_item for v in score_values(mode, res)]
    return Reading(
        accuracy=accuracy([o["verdict"] for o in outs], [it.label for it in items]),  # type: ignore[misc]
        score_mean=sum(scores) / len(scores) if scores else float("nan"),
        masked=sum(o["masked"] for o in outs),
    )


def drift(name: str, now: Reading, first: Reading, max_drop: float) -> dict[str, Any]:
    """The metrics of a reading against the run's first one; ``alarm`` when accuracy fell by more
    than ``max_drop`` accuracy points (a NaN accuracy, no judgments at all, alarms too)."""
    acc_drift = now.accuracy - first.accuracy
    k = f"{PREFIX}{name}/"
    return {
        f"{k}accuracy": now.accuracy,
        f"{k}score_mean": now.score_mean,
        f"{k}accuracy_drift": acc_drift,
        f"{k}score_drift": now.score_mean - first.score_mean,
        f"{k}masked": now.masked,
        # 1e-9: a fall of exactly max_drop (0.3 - 0.2 in floats) is within the tolerance
        f"{k}alarm": bool(math.isnan(acc_drift) or -acc_drift > max_drop + 1e-9),
    }


def warning_line(name: str, step: int, m: dict[str, Any], max_drop: float) -> str:
    k = f"{PREFIX}{name}/"
    first = m[f"{k}accuracy"] - m[f"{k}accuracy_drift"]
    return (
        f"canary warning: step {step}: judge '{name}' accuracy {m[f'{k}accuracy']:.3f} is "
        f"{-m[f'{k}accuracy_drift']:.3f} below its first reading {first:.3f} (max_drop {max_drop:g}); "
        f"score drift {m[f'{k}score_drift']:+.3f}, {m[f'{k}masked']} pair(s) masked"
    )


@dataclass
class Canary:
    name: str
    mode: str
    spec: CanarySpec
    items: list[EvalItem]
    samples: list[list[Sample]]
    """Each item's judge calls, built once: every reading sends the same ones."""
    first: Reading | None = None


class Canaries:
    """Every judge's canary: ``after_step`` runs those due and returns their metrics."""

    def __init__(self, canaries: list[Canary]) -> None:
        self.canaries = canaries

    @classmethod
    def load(cls, loaded: LoadedPipeline) -> Canaries:
        """Read every canary's pairs now: a bad file fails before Ray places a role."""
        out = []
        for j in loaded.judges:
            c = j.role.canary
            if c is not None:
                items = labelled_pairs(c.data, c.limit, f"judge '{j.name}' canary")
                out.append(Canary(j.name, j.spec.mode, c, items, [samples_for(j.spec, it) for it in items]))
        return cls(out)

    def restore(self, logged: list[dict[str, Any]]) -> None:
        """A resumed run's baselines: each canary's first reading in metrics.jsonl."""
        for c in self.canaries:
            k = f"{PREFIX}{c.name}/"
            m = next((m for m in logged if f"{k}accuracy" in m), None)
            if m is not None:
                c.first = Reading(
                    m[f"{k}accuracy"] - m[f"{k}accuracy_drift"], _num(m[f"{k}score_mean"]) - _num(m[f"{k}score_drift"]), 0
                )

    def after_step(self, step: int, judges: list[Any]) -> dict[str, Any]:
        """Readings of the canaries due after training step ``step`` (1-based) on the judges' handles."""
        from grm.terminal import console

        metrics: dict[str, Any] = {}
        handles = {j.name: j for j in judges}
        for c in self.canaries:
            if step % c.spec.every:
                continue
            t0 = time.perf_counter()
            flat = [s for ss in c.samples for s in ss]
            results = score(handles[c.name], flat)
            per_item, k = [], 0
            for ss in c.samples:
                per_item.append(results[k : k + len(ss)])
                k += len(ss)
            now = read(c.mode, c.items, per_item)
            c.first = c.first or now
            m = drift(c.name, now, c.first, c.spec.max_drop)
            m[f"{PREFIX}{c.name}/seconds"] = time.perf_counter() - t0
            if m[f"{PREFIX}{c.name}/alarm"]:
                console().print(warning_line(c.name, step, m, c.spec.max_drop), style="yellow", soft_wrap=True)
            metrics.update(m)
        return metrics


def _num(x: Any) -> float:
    return float("nan") if x is None else float(x)


def score(handle: Any, samples: list[Sample]) -> list[JudgeResult]:
    """``samples`` scored by the judge as training runs it: its first replica's actor, or the rule
    verifier in this process. A call that fails (the actor died mid-call, the judge raised) is a
    reading with every pair masked, which alarms, rather than the end of the training run."""
    try:
        if handle.local is not None:
            return handle.local.score_batch(samples)
        import ray

        try:
            return ray.get(handle.actor.score_batch.remote(samples))
        except ray.exceptions.RayError as e:
            error = str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__
    except GrmError as e:
        error = str(e)
    return [JudgeResult(judge=handle.name, error=f"canary call failed: {error}") for _ in samples]


# --------------------------------------------------------------------------- what a person reads


def describe(loaded: LoadedPipeline) -> list[str]:
    """``grm run --dry-run`` lines: each judge's gate and canary."""
    lines = []
    for j in loaded.judges:
        g, c = j.role.gate, j.role.canary
        if g is not None:
            n = f"the first {g.limit} pairs" if g.limit else "the pairs"
            lines.append(
                f"gate: judge '{j.name}' is evaluated on {n} of {g.data} before the policy loads; "
                f"below accuracy {g.min_accuracy:g} the run stops"
            )
        if c is not None:
            lines.append(
                f"canary: judge '{j.name}' re-scores the first {c.limit} pairs of {c.data} every {c.every} step(s); "
                f"a fall of more than {c.max_drop:g} accuracy points below its first reading is a warning"
            )
    return lines


def gate_rows(path: Path) -> list[dict[str, Any]]:
    """The per-judge decisions of a run's ``gate.json`` ([] when there is none); GrmError naming the
    file when it is not what the gate writes (the report must not die on an edited file)."""
    raw = regular_file_bytes(path, own=True)
    if raw is None:
        return []
    try:
        rows = list(json.loads(raw).values())
        for r in rows:
            ci = r.get("ci95")
            _ = (r["judge"], r["passed"], r["pairs"], r["eval_dir"], float(r["min_accuracy"]))
            _ = r["accuracy"] is None or float(r["accuracy"])
            _ = not ci or (float(ci[0]), float(ci[1]))
    except (ValueError, RecursionError, AttributeError, KeyError, TypeError, IndexError) as e:
        raise GrmError(f"{path}: not a gate record grm wrote ({type(e).__name__}: {e})") from None
    return rows


def report_lines(run_dir: Path, logged: list[dict[str, Any]]) -> list[str]:
    """report.md's judge-gate and canary section (none when the run has neither)."""
    lines: list[str] = []
    gate = run_dir / "gate.json"
    try:
        rows = gate_rows(gate)
    except GrmError as e:
        rows, lines = [], [f"(judge gate record not shown: {e})", ""]
    if rows:
        cells = []
        for r in rows:
            ci = f"{r['ci95'][0]:.3f}-{r['ci95'][1]:.3f}" if r.get("ci95") else ""
            acc = "" if r["accuracy"] is None else f"{r['accuracy']:.3f}"
            cells.append(
                [f"{r['judge']}", f"{r['passed']}", acc, ci, f"{r['min_accuracy']:g}", f"{r['pairs']}", f"`{r['eval_dir']}`"]
            )
        header = ["judge", "passed", "accuracy", "95% CI", "bar", "pairs", "eval dir"]
        lines += ["## Judge gate", "", *markdown_table(header, cells), ""]
    names = sorted({k.split("/")[1] for m in logged for k in m if k.startswith(PREFIX) and k.endswith("/accuracy")})
    if names:
        readings, alarms = [], []
        for m in logged:
            for n in names:
                k = f"{PREFIX}{n}/"
                if f"{k}accuracy" not in m:
                    continue
                readings.append(
                    [f"{m['step']}", n, f"{m[f'{k}accuracy']:.3f}", f"{m[f'{k}accuracy_drift']:+.3f}"]
                    + [f"{_num(m[f'{k}score_mean']):.3f}", f"{_num(m[f'{k}score_drift']):+.3f}", f"{m[f'{k}masked']}"]
                )
                if m.get(f"{k}alarm"):
                    alarms.append(
                        f"- **warning**: step {m['step']}: judge '{n}' accuracy fell {-m[f'{k}accuracy_drift']:.3f} "
                        "below its first reading, beyond its canary.max_drop"
                    )
        header = ["step", "judge", "accuracy", "drift", "score_mean", "score drift", "masked"]
        lines += ["## Judge canary", "", *markdown_table(header, readings)]
        lines += ["", *(alarms or ["No canary fell beyond its max_drop."]), ""]
    return lines
