"""``grm run``'s held-out check (``heldout:``): before the first step and after the last (and every
``heldout.every`` steps), the policy answers the same held-out prompts greedily and rule verifiers
score the answers. One line per reading and verifier in ``heldout.jsonl`` (the step, every prompt's
reward and the answers); the console and report.md show each reading and the last one against
the first, paired over prompts with a bootstrap interval.

Rule verifiers only (``grm.config.resolve``): the judge the policy trains on never grades its test.
A resumed run keeps the readings of the steps it kept and drops those of steps it trains again."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from grm.base import GrmError, append_jsonl, read_jsonl, rewrite_jsonl
from grm.config.pipeline import DataSpec
from grm.config.resolve import LoadedPipeline
from grm.data.prompts import load_prompts
from grm.judges.runtime import build_judge
from grm.judges.types import Sample
from grm.orchestrator.errors import RunError
from grm.run_format import read_row, stamp
from grm.stats import mean_ci, paired_difference

FILE = "heldout.jsonl"


def _row_ok(row: dict[str, Any]) -> None:
    read_row("heldout", row)
    if not isinstance(row.get("step"), int) or not isinstance(row.get("judge"), str):
        raise ValueError("a held-out reading needs an integer 'step' and a 'judge' name")
    rewards = row.get("rewards")
    if not isinstance(rewards, list) or not all(r is None or isinstance(r, (int, float)) for r in rewards):
        raise ValueError("'rewards' must be a list of numbers or nulls (masked)")


def read_readings(run_dir: Path, repair: bool = False) -> list[dict[str, Any]]:
    """The readings in ``RUN/heldout.jsonl`` ([] when the run has none); a damaged line is a
    ``GrmError`` naming the file and line; ``repair`` (the run's writer only) cuts a torn last line."""
    return read_jsonl(run_dir / FILE, repair=repair, check=_row_ok)


class NoCheck:
    """A pipeline without ``heldout:``: nothing to read."""

    def restore(self, step: int) -> None:
        pass

    def after(self, step: int, policy: Any, wait: Callable[[Any], Any]) -> None:
        pass

    def summary(self) -> None:
        pass


class HeldoutCheck(NoCheck):
    def __init__(self, loaded: LoadedPipeline, run_dir: Path) -> None:
        cfg = loaded.spec
        h, d = cfg.heldout, cfg.data
        assert h is not None
        source = DataSpec(
            prompts=h.prompts,
            prompt_field=d.prompt_field,
            reference_field=d.reference_field,
            checklist_field=d.checklist_field,
            constraints_field=d.constraints_field,
            shuffle=False,
            limit=h.limit,
        )
        self.prompts = load_prompts(source)  # now: a bad row fails before Ray starts
        self.judges = [build_judge(spec, path.parent) for spec, path in loaded.heldout]
        self.source, self.every, self.last = h.prompts, h.every, cfg.train.steps
        self.max_new_tokens = h.max_new_tokens or cfg.rollout.max_new_tokens
        self.path = run_dir / FILE

    @classmethod
    def load(cls, loaded: LoadedPipeline, run_dir: Path) -> NoCheck:
        return NoCheck() if loaded.spec.heldout is None else cls(loaded, run_dir)

    def restore(self, step: int) -> None:
        """A resumed run from step ``step``: the readings of later steps (trained again) are dropped."""
        rows = read_readings(self.path.parent, repair=True)
        kept = [r for r in rows if r["step"] <= step]
        if len(kept) < len(rows):
            rewrite_jsonl(self.path, kept)

    def due(self, step: int) -> bool:
        return step in (0, self.last) or (self.every > 0 and step % self.every == 0)

    def after(self, step: int, policy: Any, wait: Callable[[Any], Any]) -> None:
        """The reading after ``step`` training steps (0: the initial policy) when one is due and not
        yet in the file: ``policy.answers`` (a ``PolicyHandle``'s) waited for with ``wait``."""
        if not self.due(step) or any(r["step"] == step for r in read_readings(self.path.parent)):
            return
        texts = wait(policy.answers.remote(self.prompts, self.max_new_tokens))
        rows = []
        for judge in self.judges:
            samples = [
                Sample(prompt=p.text, response=t, reference=p.reference, metadata=dict(p.metadata), id=p.id)
                for p, t in zip(self.prompts, texts, strict=True)
            ]
            try:
                results = judge.score_batch(samples)
            except GrmError as e:
                raise RunError(f"heldout: judge '{judge.spec.name}': {e}") from None
            rewards = [None if r is None or r.reward is None else float(r.reward) for r in results]
            rows.append(stamp("heldout", {"step": step, "judge": judge.spec.name, "rewards": rewards, "answers": texts}))
        append_jsonl(self.path, rows)
        from grm.terminal import console

        for row in rows:
            console().print(reading_line(row, self.source), soft_wrap=True)

    def summary(self) -> None:
        """The console's closing lines: each verifier's first reading against its last."""
        for line in report_lines(self.path.parent):
            if line.startswith("held-out"):
                print(line, flush=True)


def reading_line(row: dict[str, Any], source: str) -> str:
    m = mean_ci(row["rewards"])
    lo, hi = m["ci95"]
    when = "before training" if row["step"] == 0 else f"after step {row['step']}"
    masked = f", {m['masked']} masked" if m["masked"] else ""
    return f"held-out check {when}: {row['judge']} {m['mean']:.3f} [{lo:.3f}, {hi:.3f}] on {m['n']} prompts of {source}{masked}"


def report_lines(run_dir: Path) -> list[str]:
    """report.md's held-out section (none when the run has no check): every reading, then per
    verifier the last against the first, paired over prompts."""
    try:
        rows = read_readings(run_dir)
    except GrmError as e:
        return [f"(held-out check not shown: {e})", ""]
    if not rows:
        return []
    lines = ["## Held-out check (greedy answers, rule-scored)", ""]
    lines += ["| step | verifier | mean | 95% CI | prompts | masked |", "|---|---|---|---|---|---|"]
    for r in rows:
        m = mean_ci(r["rewards"])
        lines.append(
            f"| {r['step']} | {r['judge']} | {m['mean']:.3f} | {m['ci95'][0]:.3f}-{m['ci95'][1]:.3f} | {m['n']} | {m['masked']} |"
        )
    lines.append("")
    for name in dict.fromkeys(r["judge"] for r in rows):
        mine = [r for r in rows if r["judge"] == name]
        first, last = mine[0], mine[-1]
        if last is first or len(first["rewards"]) != len(last["rewards"]):
            continue
        d = paired_difference(last["rewards"], first["rewards"])
        before, after = mean_ci(first["rewards"])["mean"], mean_ci(last["rewards"])["mean"]
        lines.append(
            f"held-out {name}: {before:.3f} at step {first['step']} -> {after:.3f} at step {last['step']}, "
            f"paired change {d['mean']:+.3f} [{d['ci95'][0]:+.3f}, {d['ci95'][1]:+.3f}] over {d['n']} prompts"
        )
    return [*lines, ""]
