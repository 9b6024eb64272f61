"""What a step's outcome becomes in the run directory and on the console: its metrics line
(``step_metrics``), its samples.jsonl rows (``sample_rows``), the report's judge-cost table
(``cost_table``) and the one-line console summary (``console_line``, ``step_line``). Pure: the
recorder (``grm.orchestrator.recorder``) writes them."""

from __future__ import annotations

import math
from typing import Any

from grm.judges.cost import COUNTS, JudgeCost
from grm.orchestrator.episodes import episode_metrics
from grm.orchestrator.errors import RunError
from grm.orchestrator.types import Group, Rollout, StepOutcome, rollouts_of
from grm.report_files import markdown_table
from grm.run_format import read_row


def step_line(row: dict[str, Any], kind: str = "metrics") -> None:
    """ValueError unless ``row`` is a metrics.jsonl (or samples.jsonl) line of a format this grm
    reads (``grm.run_format``: brought to the current one in place) naming its step."""
    read_row(kind, row)
    if type(row.get("step")) is not int:
        raise ValueError("no integer 'step' field; not a line grm run writes")


def tokens_by_lag(rollouts: list[Rollout], version: int) -> dict[str, float]:
    """``rollout/tokens_lag_K``: the share of the step's sampled tokens that weights K versions
    behind ``version`` (the step's) sampled, for each K that occurs; ``rollout/spanning_versions``:
    the share of responses whose tokens came from more than one version (a sync interrupted them,
    or an episode's turns straddled one)."""
    lags: dict[int, int] = {}
    spanning = 0
    for r in rollouts:
        vs = r.sampled_versions()
        spanning += len(set(vs)) > 1
        for v in vs:
            lags[version - v] = lags.get(version - v, 0) + 1
    total = sum(lags.values())
    out = {f"rollout/tokens_lag_{k}": n / total for k, n in sorted(lags.items())} if total else {}
    return {**out, "rollout/spanning_versions": spanning / len(rollouts)} if rollouts else out


def step_metrics(out: StepOutcome) -> dict[str, Any]:
    """One metrics.jsonl line: rewards (overall and per judge), masking, lengths and how rewards follow
    them (``length_corr/...``), staleness, seconds per phase and the judges' share of the step,
    samples and seconds per judge replica, what each judge's calls cost (``judge_cost/<judge>/...``),
    advantage, filtering, canary and trainer statistics."""
    work, groups, reward_stats, train, version = out.work, out.groups, out.reward_stats, out.train, out.version
    ref_s, sync_s, step_s = out.reference_s, out.sync_s, out.seconds
    rollouts = rollouts_of(groups)
    rewards = [x for g in groups for x in g.rewards]
    valid = [x for x in rewards if not math.isnan(x)]
    mean = sum(valid) / len(valid) if valid else float("nan")
    train_s = train.get("train_seconds", 0.0)
    judging = work.judge_window_s
    m: dict[str, Any] = {
        "step": out.step + 1,
        "policy_version": version,
        "reward_mean": mean,
        "reward_std": (sum((x - mean) ** 2 for x in valid) / len(valid)) ** 0.5 if valid else float("nan"),
        "masked": reward_stats["masked"],
        "masked_by_judge": reward_stats["masked_by_judge"],
        "response_len_mean": sum(len(r.token_ids) for r in rollouts) / len(rollouts),
        "truncated_frac": sum(r.finish_reason == "length" for r in rollouts) / len(rollouts),
        "staleness_max": max(version - r.version for r in rollouts),
        **tokens_by_lag(rollouts, version),
        "seconds_step": step_s,
        "seconds_rollout": work.rollout_s,
        "seconds_judging": judging,
        "seconds_reference": ref_s,
        "seconds_training": train_s,
        "seconds_sync": sync_s,
        # served engines: 1.0 when the step's weights reached them from disk, 0.0 by broadcast
        **({"weight_sync_disk": float(out.sync_by_disk)} if out.sync_by_disk is not None else {}),
        "seconds_idle": max(0.0, step_s - (work.rollout_s + ref_s + train_s + sync_s)),
        "judge_share": judging / step_s if step_s else 0.0,
        **{f"seconds_judge/{k}": v for k, v in work.judge_s.items()},
        # per actor-judge replica (``<judge>/<replica index>``): samples judged and seconds of its calls
        **{f"judge_items/{k}": v for k, v in work.replica_items.items()},
        **{f"judge_seconds/{k}": v for k, v in work.replica_s.items()},
        # and what its server reported (openai engine): judge_usage/<judge>/<replica>/requests, ...
        **{f"judge_usage/{k}/{c}": v for k, usage in work.replica_usage.items() for c, v in usage.items()},
        # within-group correlation of each judge's reward and of the combined reward (before and
        # after algorithm.length_control) with response length; None when undefined
        **reward_stats.get("length", {}),
        **out.advantage_stats,
        **out.filtering,
        **out.canary,
        **{k: v for k, v in train.items() if k != "train_seconds"},
        **episode_metrics([r.trajectory for r in rollouts if r.trajectory is not None]),
    }
    for name in groups[0].judged if groups else ():
        res = [x for g in groups for x in g.judged[name]]
        vals = [x.reward for x in res if x is not None and x.reward is not None]
        m[f"reward/{name}"] = sum(vals) / len(vals) if vals else float("nan")
        m[f"parse_failures/{name}"] = sum(x.parse_failures for x in res if x is not None)
        m[f"one_order_failed/{name}"] = sum(x.one_order_failed for x in res if x is not None)  # swapped pairs masked
        m[f"judge_directed/{name}"] = sum(x.judge_directed for x in res if x is not None)  # text aimed at it, removed
        m[f"judge_truncated/{name}"] = sum(x.truncated for x in res if x is not None)  # responses cut to fit its context
        m[f"judge_timeouts/{name}"] = work.judge_timeouts.get(name, 0)  # calls past their deadline (re-issued, then masked)
        m[f"judge_errors/{name}"] = work.judge_errors.get(name, 0)  # calls its model server failed (likewise)
        m.update(work.judge_cost.get(name, JudgeCost()).metrics(name))  # calls, retries, tokens, seconds (grm.judges.cost)
        if name in work.cache_hits:  # a cached judge (grm.orchestrator.judge_cache)
            hits, misses = work.cache_hits[name], work.cache_misses.get(name, 0)
            m[f"judge_cache/{name}/hits"] = hits
            m[f"judge_cache/{name}/hit_rate"] = hits / (hits + misses) if hits + misses else 0.0
            m[f"judge_cache/{name}/seconds_saved"] = work.cache_saved_s.get(name, 0.0)
    return m


def check_masked_fraction(step: int, metrics: dict[str, Any], rows: int, max_fraction: float) -> None:
    """``RunError`` when more than ``faults.max_masked_fraction`` of the step's ``rows`` samples
    were masked: a run whose judges mostly fail stops instead of training on what is left."""
    if metrics["masked"] > max_fraction * rows:
        raise RunError(
            f"step {step + 1}: {metrics['masked']} of {rows} samples masked (> faults."
            f"max_masked_fraction {max_fraction}); by judge: {metrics['masked_by_judge']}"
        )


def sample_rows(step: int, groups: list[Group], advantages: dict[str, float]) -> list[dict[str, Any]]:
    """samples.jsonl lines: every response with each judge's critiques, parses, score and reward,
    its combined reward and advantage (looked up by the sample's id)."""
    rows = []
    for g in groups:
        for k, r in enumerate(g.rollouts):
            judges = {}
            for name, res in g.judged.items():
                x = res[k]
                judges[name] = (
                    None
                    if x is None
                    else {
                        "score": x.score,
                        "reward": x.reward,
                        "masked": x.masked,
                        "critiques": [s.text for s in x.samples],
                        "parsed": [s.parsed for s in x.samples],
                        **({"comparisons": x.comparisons} if x.comparisons is not None else {}),
                        **({"checklist": x.checklist} if x.checklist is not None else {}),
                        **({"details": x.details} if x.details is not None else {}),
                        **({"faulty_turn": x.faulty_turn} if x.faulty_turn is not None else {}),
                    }
                )
            rows.append(
                {
                    "step": step + 1,
                    "id": r.id,
                    "prompt_id": r.prompt.id,
                    "group": g.key,
                    "prompt": r.prompt.text,
                    "response": r.text,
                    "finish_reason": r.finish_reason,
                    "policy_version": r.version,
                    "reward": g.rewards[k],
                    **({"reward_before_length_control": g.rewards_before_control[k]} if g.rewards_before_control else {}),
                    "advantage": advantages[r.id],
                    "judges": judges,
                    **({"anchor": g.anchor} if g.anchor is not None else {}),
                    **({"previous_anchor": g.previous} if g.previous is not None else {}),
                    **({"trajectory": r.trajectory.to_dict()} if r.trajectory is not None else {}),
                    **({"turn_credit": r.turn_credit} if r.turn_credit is not None else {}),
                }
            )
    return rows


def cost_table(ms: list[dict[str, Any]]) -> list[str]:
    """report.md lines: what each judge's calls cost over the run (``judge_cost/<judge>/...``), in
    total and per step; none when no step recorded any."""
    judges = list(dict.fromkeys(k.split("/")[1] for m in ms for k in m if k.startswith("judge_cost/")))
    if not judges:
        return []
    fields = [*COUNTS, "seconds"]
    usage = sorted({k.rsplit("/", 1)[1] for m in ms for k in m if k.startswith("judge_cost/") and "/usage_" in k})
    cols = ["judge", *fields, *usage]
    out = ["", "## Judge cost", "", "Over the run (per step in brackets). " + COST_WORDS, ""]
    rows = []
    for name in judges:
        cells = [name]
        for f in cols[1:]:
            vals = [m.get(f"judge_cost/{name}/{f}") or 0 for m in ms]
            tot = sum(vals)
            cells.append(f"{tot:.1f} ({tot / len(ms):.1f})" if f == "seconds" else f"{tot} ({tot / len(ms):.1f})")
        rows.append(cells)
    return out + markdown_table([c.replace("_", " ") for c in cols], rows)


COST_WORDS = (
    "calls: model calls (one per sampled critique, parse retry, principles or checklist writing, and per log-prob "
    "reading; a rule verifier: one per sample); retries: of those, re-samples of unparseable outputs; tokens as the "
    "engine reports them (prompt tokens include each log-prob reading's prefill; cached_tokens: of those, served from "
    "a prefix already computed); seconds: inside the judge; usage_*: what an OpenAI-compatible server reported. Calls "
    "abandoned past their deadline are not counted."
)


def console_line(m: dict[str, Any], steps: int) -> str:
    """A finished step in one line of plain text (the live display sets ``step n/N`` in bold); with
    two or more judges, each one's mean reward too (a weight-0 monitor's among them)."""
    each = {k.removeprefix("reward/"): v for k, v in m.items() if k.startswith("reward/") and isinstance(v, (int, float))}
    judges = f"({', '.join(f'{k} {v:.3f}' for k, v in each.items())}) " if len(each) > 1 else ""
    return (
        f"step {m['step']}/{steps} reward {m['reward_mean']:.3f}±{m['reward_std']:.3f} {judges}"
        f"masked {m['masked']} kl {m.get('kl', 0.0):.4f} len {m['response_len_mean']:.1f} | "
        f"rollout {m['seconds_rollout']:.1f}s judging {m['seconds_judging']:.1f}s ref {m['seconds_reference']:.1f}s "
        f"train {m['seconds_training']:.1f}s sync {m['seconds_sync']:.2f}s step {m['seconds_step']:.1f}s "
        f"ETA {m['seconds_step'] * (steps - m['step']) / 60:.1f} min"
    )
