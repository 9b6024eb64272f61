"""``grm eval``: judge a data set with one or more judges, resumably.

``results.jsonl`` gets one line per (item, judge), appended and fsynced after every batch, so a
SIGKILL loses at most the batch in flight; a re-run with the same ``--out`` skips what is done.

A batch is held to the judge's per-call deadline (``limits`` in its spec) after the fact: one past
it is reported and counted (``deadline_overruns_this_run``), not cut short. The judge runs in this
process, where stopping a call means a thread or process around the engine; the ``openai`` engine
already bounds each request with its own timeout and retries.

A batch that fails on the judge's engine once those retries are spent is judged again item by item:
an item the server refuses even alone is masked, counted (``engine_errors_masked_this_run``) and
written with its error; three in a row, or every item, mean the server is down, and the eval stops
resumably without writing them (``_EngineFailures``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grm.base import atomic_write_text, make_dir, writer_lock
from grm.config.judge import JudgeSpec
from grm.config.yaml_reader import ConfigError, load_yaml
from grm.data.items import EvalItem, default_map, parse_map, to_items
from grm.data.items_file import write_items
from grm.data.sources import load_rows
from grm.engines.base import EngineError, EngineRefused, EngineSetupError
from grm.evaluation.errors import EvalError
from grm.evaluation.length_control import LengthControl
from grm.evaluation.result_lines import check_result_line, content, latest_results, summarize
from grm.jsonl import append_jsonl, read_jsonl_numbered
from grm.judges.base import Judge
from grm.judges.cost import costed, split
from grm.judges.errors import JudgeError
from grm.judges.labelled import samples_for
from grm.judges.limits import past_deadline
from grm.judges.runtime import build_judge, load
from grm.judges.types import JudgeResult, Sample
from grm.run_format import stamp


@dataclass
class EvalConfig:
    judges: list[str]
    data: str
    out: Path
    limit: int | None = None
    mapping: list[str] | None = None
    overrides: Sequence[str] = ()
    force: bool = False
    skip_bad_rows: bool = False
    batch_size: int = 16
    length_control: LengthControl | None = None
    """Also report the pairs' accuracy with length controlled (``grm.evaluation.length_control``)."""


def both_orders(spec: JudgeSpec) -> JudgeSpec:
    """``spec`` with swap forced on if it is pairwise: evaluation always shows both orders so
    per-order accuracy and positional agreement are measured."""
    if spec.mode != "pairwise" or spec.position.swap:
        return spec
    return spec.model_copy(update={"position": spec.position.model_copy(update={"swap": True})})


def load_judges(refs: Sequence[str], overrides: Sequence[str]) -> list[Judge]:
    judges = []
    for ref in refs:
        j = load(ref, overrides=overrides)
        spec = both_orders(j.spec)
        judges.append(j if spec is j.spec else build_judge(spec, j.base_dir))
    names = [j.spec.name for j in judges]
    if len(set(names)) != len(names):
        raise EvalError(f"two judges share a name ({', '.join(names)}); give each a distinct name")
    return judges


def config_record(cfg: EvalConfig, judges: list[Judge], mapping: dict[str, str]) -> dict[str, Any]:
    return {
        "data": cfg.data,
        "map": mapping,
        "limit": cfg.limit,
        "judges": [
            {
                "name": j.spec.name,
                "spec_sha256": j.spec_hash,
                "spec": json.loads(j.spec.model_dump_json()),
                "base_dir": str(j.base_dir),
            }
            for j in judges
        ],
    }


def read_record(path: Path) -> dict[str, Any]:
    """An eval directory's ``config.resolved.yaml``, or ``EvalError`` naming the file (and line).
    Read within a config's bounds (``load_yaml``): the directory may come from anyone, and an alias
    bomb in its record would make validating the recorded specs walk billions of values."""
    try:
        record = load_yaml(path, own=True).data
    except ConfigError as e:
        raise EvalError(f"{e}; grm eval --force writes it anew") from None
    judges = record.get("judges") if isinstance(record, dict) else None
    if not isinstance(judges, list) or not all(
        isinstance(j, dict) and isinstance(j.get("name"), str) and isinstance(j.get("spec_sha256"), str) for j in judges
    ):
        raise EvalError(f"{path}: not the record grm eval writes (a list of judges, each with a name and spec_sha256)")
    return record


def _identity(rec: dict[str, Any]) -> dict[str, Any]:
    # .get: a directory of ``grm eval --policy`` has no data/map, and differs rather than crashing
    return {
        "data": rec.get("data"),
        "map": rec.get("map"),
        "judges": [(j["name"], j["spec_sha256"]) for j in rec.get("judges") or []],
    }


def _scorer(judge: Judge, per_item: list[list[Sample]]) -> Callable[[list[Sample]], list[JudgeResult]]:
    """How a chunk is scored: a pointwise judge sees each item's responses (a pair's two) as one
    group, so adaptive votes (``votes``) can compare them; other modes score the flat batch."""
    if judge.spec.mode != "pointwise":
        return judge.score_batch

    def grouped(_flat: list[Sample]) -> list[JudgeResult]:
        out = [r for g in judge.score_groups(per_item) for r in g]
        assert all(r is not None for r in out), "a pointwise judge scores every response"
        return out  # type: ignore[return-value]

    return grouped


def _same_item(line: dict[str, Any], item: EvalItem) -> bool:
    """Whether a results line judged ``item`` as the data holds it now (text, label, human score)."""
    return content(line) == (item.input_hash, item.kind, item.label, item.human_score)


def _done(lines: list[tuple[int, dict[str, Any]]], items: list[EvalItem], cfg: EvalConfig) -> set[tuple[str, str]]:
    """(judge, item) pairs a resume skips: judged on the item as the data holds it now. A line an
    engine error masked is judged again. A line that judged other content (the data file changed
    under the same ids) is refused, or with ``--force`` judged again: a resume never reports the old
    judgment against the new item."""
    by_id = {it.id: it for it in items}
    done = set()
    for n, line in lines:
        item = by_id.get(line["item_id"])
        if item is None or line.get("engine_error"):
            continue
        if not _same_item(line, item):
            if not cfg.force:
                raise EvalError(
                    f"{cfg.out / 'results.jsonl'}:{n}: item {item.id!r} was judged on other content than {cfg.data} holds "
                    "now (its text, label or human score changed since): use another --out, or --force to judge the "
                    "changed items again"
                )
            continue
        done.add((line["judge"], line["item_id"]))
    return done


STOP_AFTER = 3
"""Items in a row whose judgment fails on the judge's engine even alone: the server is failing, not the items."""


def _judge_chunk(judge: Judge, chunk: list[EvalItem]) -> list[dict[str, Any]]:
    """The results.jsonl lines of ``chunk`` judged as one batch; its cost is shared over the items."""
    per_item = [samples_for(judge.spec, it) for it in chunk]
    flat = [s for ss in per_item for s in ss]
    try:
        res, cost = costed(judge, _scorer(judge, per_item), flat)
    except (JudgeError, EngineSetupError) as e:  # the spec or data, not the server: no retry helps
        raise EvalError(f"judge '{judge.spec.name}': {e}") from None
    lines, k = [], 0
    for it, ss, share in zip(chunk, per_item, split(cost, len(chunk)), strict=True):
        lines.append(summarize(judge, it, res[k : k + len(ss)], share))
        k += len(ss)
    return lines


def _judge_alone(judge: Judge, chunk: list[EvalItem], failing: _EngineFailures, results_path: Path) -> None:
    """A batch failed on the judge's engine: each item is sent alone and written as it succeeds, so
    one item the server refuses (too long for its context, say) costs only that item."""
    for it in chunk:
        try:
            lines = _judge_chunk(judge, [it])
        except EngineError as e:
            lines = failing.add(it, e)  # raises EvalError when the server, not the item, is failing
        else:
            lines = failing.succeeded() + lines
        append_jsonl(results_path, [stamp("results", x) for x in lines])


class _EngineFailures:
    """One judge's items whose judgment failed on its engine even when sent alone (after the
    engine's own retries). An item the server refused with a client error (``EngineRefused``: a
    prompt over its context, say) once it has answered others is the item's own failure: masked at
    once. Any other failure is held, not written. When a later item succeeds, the failure was the
    item's own: the held items are masked, counted and written with the error (``engine_error``),
    never given a default number. After ``STOP_AFTER`` held in a row, or at the end with no item of
    the judge ever judged, it is the server (or its URL, model or key): the eval stops with a
    message and writes none of them, so a resume tries them again."""

    def __init__(self, judge: Judge, say: Callable[..., None], judged_before: bool) -> None:
        self.judge, self.say = judge, say
        self.ever_judged = judged_before
        self.held: list[tuple[EvalItem, str]] = []
        self.masked = 0

    def add(self, item: EvalItem, error: Exception) -> list[dict[str, Any]]:
        """The lines to write now: the item's masked line when the failure is its own for sure, else none."""
        reason = (str(error).splitlines() or [type(error).__name__])[0][:300]
        name = self.judge.spec.name
        self.say(f"judge '{name}': item {item.id} failed on the judge's engine ({reason})", style="yellow", markup=False)
        if isinstance(error, EngineRefused) and self.ever_judged:  # refused alone, by a server that answers others
            self.masked += 1
            return [self._masked(item, reason)]
        self.held.append((item, reason))
        if len(self.held) >= STOP_AFTER:
            raise EvalError(
                f"judge '{name}': {len(self.held)} items in a row failed on the judge's engine even alone "
                f"(last: {reason}); the server is failing, not the items. Nothing of theirs was written: "
                "fix the server and run the same command again to resume"
            )
        return []

    def succeeded(self) -> list[dict[str, Any]]:
        """An item was judged after the held ones: their lines, masked (the failures were the items' own)."""
        self.ever_judged = True
        lines = [self._masked(item, reason) for item, reason in self.held]
        self.masked += len(lines)
        self.held = []
        return lines

    def _masked(self, item: EvalItem, reason: str) -> dict[str, Any]:
        """The item's line with no judgment: every result masked (a swapped pair's two orders each
        unread), never a default number."""
        spec = self.judge.spec
        orders = [None, None] if spec.mode == "pairwise" else None
        masked = [JudgeResult(judge=spec.name, view_margins=orders) for _ in samples_for(spec, item)]
        return {**summarize(self.judge, item, masked), "engine_error": reason}

    def finish(self) -> list[dict[str, Any]]:
        """The judge's last items failed: masked if any item of the judge was ever judged, else the eval stops."""
        if self.held and not self.ever_judged:
            item, reason = self.held[-1]
            raise EvalError(
                f"judge '{self.judge.spec.name}': every item failed on the judge's engine (last: {item.id}, {reason}); "
                "nothing of theirs was written: fix the server and run the same command again to resume"
            )
        return self.succeeded() if self.held else []


def _chunks(items: list[EvalItem], size: int) -> Iterator[list[EvalItem]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def run(cfg: EvalConfig, console: Any = None) -> dict[str, Any]:
    """Run (or resume) an evaluation; returns the metrics dict also written to metrics.json.

    The output directory is held (``grm.base.writer_lock``) from its creation to the end, so a
    second ``grm eval`` or a ``grm rescore`` of it is refused rather than cutting the line this
    one is writing."""
    with ExitStack() as held:
        return _run(cfg, console, held)


def _run(cfg: EvalConfig, console: Any, held: ExitStack) -> dict[str, Any]:
    import yaml
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    from grm.evaluation.report import write_outputs
    from grm.terminal import console as literal_console
    from grm.terminal import escape_controls

    console = console or literal_console(stderr=True)
    rows = load_rows(cfg.data)
    columns = set().union(*rows)
    mapping = default_map(cfg.data, columns) if not cfg.mapping else parse_map(cfg.mapping)
    absent = [f"{k}={v}" for k, v in mapping.items() if v not in columns] if cfg.mapping else []
    if absent and rows:  # a misspelt optional column would silently mask every item (no reference...)
        shown = ", ".join(sorted(columns)[:20])
        raise EvalError(f"--map {', '.join(absent)}: no row of {cfg.data} has such a column (its columns: {shown})")
    items, problems = to_items(rows, mapping, cfg.data, skip_bad_rows=cfg.skip_bad_rows)
    if cfg.limit is not None:
        items = items[: cfg.limit]
    if not items:
        raise EvalError(f"{cfg.data}: no usable rows")
    judges = load_judges(cfg.judges, cfg.overrides)

    make_dir(cfg.out, EvalError)
    held.enter_context(writer_lock(cfg.out, "grm eval", EvalError))
    record = config_record(cfg, judges, mapping)
    rec_path = cfg.out / "config.resolved.yaml"
    if rec_path.exists() and not cfg.force:
        previous = read_record(rec_path)
        if _identity(previous) != _identity(record):
            raise EvalError(
                f"{cfg.out} holds results of a different evaluation (judges/spec hashes, data or column map differ: "
                f"recorded {_identity(previous)}, now {_identity(record)}); use another --out, or --force to mix them"
            )
    atomic_write_text(rec_path, yaml.safe_dump(record, sort_keys=False, allow_unicode=True))
    # the items themselves, so `grm view` shows prompts and responses from inside this directory
    write_items(cfg.out, items)

    results_path = cfg.out / "results.jsonl"
    done = _done(latest_results(read_jsonl_numbered(results_path, check=check_result_line, own=True), results_path), items, cfg)
    todo = {j.spec.name: [it for it in items if (j.spec.name, it.id) not in done] for j in judges}
    total = sum(len(v) for v in todo.values())
    if total < sum(len(items) for _ in judges):
        console.print(f"resuming: {sum(len(items) for _ in judges) - total} judgments already in {results_path}")
    t_start = time.perf_counter()
    overruns = {j.spec.name: 0 for j in judges}
    engine_errors = {j.spec.name: 0 for j in judges}
    with Progress(
        TextColumn("{task.description}", style="bold", markup=False),  # a judge's name: not markup
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[rate]} items/s", markup=False),
        TimeRemainingColumn(),
        console=console,
        transient=False,
        disable=total == 0,
    ) as progress:
        for judge in judges:
            pending = todo[judge.spec.name]
            task = progress.add_task(escape_controls(judge.spec.name), total=len(pending), rate="-")
            t0 = time.perf_counter()
            n_done = 0
            failing = _EngineFailures(judge, progress.console.print, judged_before=len(pending) < len(items))
            for chunk in _chunks(pending, cfg.batch_size):
                t_batch = time.perf_counter()
                try:
                    lines = _judge_chunk(judge, chunk)
                except EngineError:  # after the engine's own retries: find the items that fail alone
                    _judge_alone(judge, chunk, failing, results_path)
                else:
                    n_samples = sum(len(samples_for(judge.spec, it)) for it in chunk)
                    late = past_deadline(judge.spec, n_samples, time.perf_counter() - t_batch)
                    if late:
                        overruns[judge.spec.name] += 1
                        progress.console.print(late, style="yellow", markup=False)
                    append_jsonl(results_path, [stamp("results", x) for x in failing.succeeded() + lines])
                n_done += len(chunk)
                progress.update(task, advance=len(chunk), rate=f"{n_done / (time.perf_counter() - t0):.2f}")
            append_jsonl(results_path, [stamp("results", x) for x in failing.finish()])
            engine_errors[judge.spec.name] = failing.masked
    wall = time.perf_counter() - t_start
    final = latest_results(read_jsonl_numbered(results_path, check=check_result_line, own=True), results_path)
    wanted = {it.id: it for it in items}
    names = {j.spec.name for j in judges}
    all_results = [r for _, r in final if r["judge"] in names and r["item_id"] in wanted and _same_item(r, wanted[r["item_id"]])]
    return write_outputs(
        cfg.out,
        all_results,
        [j.spec.name for j in judges],
        extra={
            "wall_seconds_this_run": wall,
            "deadline_overruns_this_run": overruns,
            "engine_errors_masked_this_run": engine_errors,
            "bad_rows_skipped": len(problems),
            "items": len(items),
        },
        console=literal_console(),
        length_control=cfg.length_control,
    )
