"""A step's samples as the sample browser pages them: grouped by prompt, filtered, sorted, cut into
pages of bounded size and diffed against each group's best response.

A step is parsed once: every row is checked and reduced to a ``Sample`` (its line, group, reward,
advantage, length, whether it is masked or cut), kept while the step's lines stay the same, and a
page reads again only the lines it shows. Measured on a crafted step of 500,000 rows in one group,
every page re-parsed the whole step (15.7 s, 507 MB) and sent all its rows (135 MB); now a page has
at most ``PAGE_ROWS`` rows and ``PAGE_BYTES`` of lines whatever the grouping (a group larger than a
page is split across pages), and a step is read up to ``MAX_STEP_ROWS`` rows and ``MAX_STEP_BYTES``.
The same step now: 0.8 s for the first page (65,536 rows parsed), 0.04 s a page turn, 69 KB each;
a step of 20,000 three-turn episodes: 2.5 s once (Trajectory.from_dict is half of it), 0.07 s a turn.

Building one row's view must never cost its page: any exception while checking a row or reading its
episode makes that row a bad row naming its line, and the rest of the step shows.
"""

from __future__ import annotations

import difflib
import hashlib
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from grm.view.episode import with_episode
from grm.view.index import MAX_ROW_BYTES, LineIndex, bad_row
from grm.view.rows import SampleRow, check

SAMPLE_SORTS = ("reward", "advantage", "length", "masked")
SAMPLE_FILTERS = ("all", "masked", "unmasked", "positive", "negative", "truncated")
"""positive/negative: the advantage's sign; truncated: the response hit max_new_tokens."""
MAX_STEP_BYTES = 256 * 2**20
"""Bytes of samples.jsonl one step's page reads at most (a step of 8192 real rows is ~15 MB)."""
MAX_STEP_ROWS = 65_536
"""Rows of one step read at most (8x a step of 8192 real rows): a step's first parse is bounded by
rows as well as bytes (500,000 rows of 300 bytes are only 150 MB)."""
PAGE_ROWS = 200
"""Rows one page shows at most, whatever the grouping."""
PAGE_BYTES = 32 * 2**20
"""Bytes of lines one page shows at most (a single longer row still shows, alone)."""
SHOWN_BAD_ROWS = 50
MAX_GROUP_CHARS = 200
"""A longer group key is shown (and grouped) by its head and a hash of the whole."""


def masked_reasons(row: dict[str, Any]) -> list[str]:
    """Why a sample got no usable reward, judge by judge (empty when it was scored)."""
    reasons = []
    for name, j in (row.get("judges") or {}).items():
        if j is None:
            reasons.append(f"{name}: no result (judge failed or timed out)")
        elif j.get("masked"):
            parsed = j.get("parsed") or []
            unparsed = sum(p is None for p in parsed)
            reasons.append(f"{name}: masked ({unparsed} of {len(parsed)} critiques unparsed)")
    if not reasons and row.get("reward") is None:
        reasons.append("reward is undefined")
    return reasons


def sample_view(row: dict[str, Any], where: str) -> dict[str, Any]:
    """A parsed samples.jsonl row as the page shows it (checked, its episode drawn, its ``length``
    and ``masked_reasons`` added), or a bad row naming ``where``: whatever goes wrong while building
    one row's view (an OverflowError from a 401-digit log-prob, a bug) is that row's problem."""
    try:
        row = with_episode(check(SampleRow, row, where), where)
        if "_error" not in row:
            row["length"] = len(row.get("response") or "")
            row["masked_reasons"] = masked_reasons(row)
        return row
    except Exception as e:  # noqa: BLE001 - one row, never its page
        return bad_row(where, f"cannot be shown ({type(e).__name__}: {e})")


def group_key(row: dict[str, Any]) -> str:
    """The prompt group of a row (``group``, else ``prompt_id``, else one group of its own: "")."""
    for k in ("group", "prompt_id"):
        if row.get(k) is not None:
            key = str(row[k])
            if len(key) <= MAX_GROUP_CHARS:
                return key
            digest = hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:16]
            return f"{key[:100]}... [{len(key):,} characters, sha256 {digest}]"
    return ""


class Sample(NamedTuple):
    """What the browser keeps of a row between pages: enough to group, filter, sort and page it."""

    line: int
    bytes: int
    group: str
    reward: float | None
    advantage: float | None
    length: int
    masked: bool
    truncated: bool


def _number(x: Any) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None


def _sample(row: dict[str, Any], line: int, size: int) -> Sample:
    return Sample(
        line,
        size,
        group_key(row),
        _number(row.get("reward")),
        _number(row.get("advantage")),
        row["length"],
        bool(row["masked_reasons"]),
        row.get("finish_reason") == "length",
    )


def _key(s: Sample, sort: str) -> float:
    if sort == "length":
        return float(s.length)
    if sort == "masked":
        return float(s.masked)
    v = s.reward if sort == "reward" else s.advantage
    return v if v is not None and math.isfinite(v) else -math.inf


def _keep(s: Sample, filt: str) -> bool:
    adv = s.advantage
    return {
        "all": True,
        "masked": s.masked,
        "unmasked": not s.masked,
        "positive": adv is not None and adv > 0,
        "negative": adv is not None and adv < 0,
        "truncated": s.truncated,
    }[filt]


@dataclass
class StepRows:
    """A step of samples.jsonl parsed once: its rows as ``Sample``s and its bad rows. It grows with
    the lines appended to the step and is valid while the index's ``generation`` is."""

    generation: int
    read: int = 0
    """Line numbers of the step consumed (read, or skipped past a cap)."""
    bytes: int = 0
    samples: list[Sample] = field(default_factory=list)
    bad: list[str] = field(default_factory=list)
    bad_total: int = 0
    capped: bool = False
    lines: int = 0
    """Lines the step has in the file (more than ``read`` when capped)."""

    def extend(self, index: LineIndex, numbers: list[int]) -> None:
        """Read the step's line numbers past ``read`` (``numbers``: all of the step's, in file order)."""
        self.lines = len(numbers)
        if self.capped or len(numbers) <= self.read:
            return
        starts, ends = index.starts, index.ends  # kept whole if another request resets the index
        taken = []
        for n in numbers[self.read :]:
            size = ends[n] - starts[n]
            size = size if size <= MAX_ROW_BYTES else 0  # an over-long row is never read
            if self.bytes + size > MAX_STEP_BYTES or self.read + len(taken) >= MAX_STEP_ROWS:
                self.capped = True
                break
            self.bytes += size
            taken.append(n)
        self.read += len(taken)
        for n, row in zip(taken, index.rows(taken), strict=True):
            view = sample_view(row, index.where(n))
            if "_error" in view:
                self.bad_total += 1
                if len(self.bad) < SHOWN_BAD_ROWS:
                    self.bad.append(view["_error"])
            else:
                self.samples.append(_sample(view, n, ends[n] - starts[n]))


class Group(NamedTuple):
    key: str
    members: list[Sample]
    """Every row of the group, in file order."""
    kept: list[Sample]
    """The rows that pass the filter, sorted."""
    best: Sample | None
    """The row with the highest reward (None when no row has one)."""


def step_groups(samples: Iterable[Sample], *, sort: str = "reward", desc: bool = True, filt: str = "all") -> list[Group]:
    """A step's rows as groups (one per prompt) keeping only rows that pass ``filt``, each sorted
    under ``sort`` and the groups ordered by their first row."""
    members: dict[str, list[Sample]] = {}
    for s in samples:
        members.setdefault(s.group, []).append(s)
    out = []
    for key, rows in members.items():
        kept = sorted((s for s in rows if _keep(s, filt)), key=lambda s: _key(s, sort), reverse=desc)
        if not kept:
            continue
        rewarded = [s for s in rows if s.reward is not None]
        out.append(Group(key, rows, kept, max(rewarded, key=lambda s: s.reward) if rewarded else None))
    out.sort(key=lambda g: _key(g.kept[0], sort), reverse=desc)
    return out


Span = tuple[int, int, int]
"""(group, first row, row after the last) of one group's rows on a page."""


def page_spans(
    groups: list[list[int]], *, max_groups: int, max_rows: int = PAGE_ROWS, max_bytes: int = PAGE_BYTES
) -> list[list[Span]]:
    """Pages of the groups' rows (``groups``: each row's bytes, group by group, in page order). A
    page holds at most ``max_groups`` groups, ``max_rows`` rows and ``max_bytes`` (a longer row
    alone); a group that fits on a page is never split, a larger one fills pages of its own, its
    tail shared with the groups after it."""
    pages: list[list[Span]] = []
    page: list[Span] = []
    rows = size = 0
    for g, sizes in enumerate(groups):
        whole = sum(sizes)
        if len(sizes) <= max_rows and whole <= max_bytes:
            if page and (len(page) >= max_groups or rows + len(sizes) > max_rows or size + whole > max_bytes):
                pages.append(page)
                page, rows, size = [], 0, 0
            page.append((g, 0, len(sizes)))
            rows, size = rows + len(sizes), size + whole
            continue
        if page:
            pages.append(page)
        start, size = 0, 0
        for i, b in enumerate(sizes):
            if i > start and (i - start >= max_rows or size + b > max_bytes):
                pages.append([(g, start, i)])
                start, size = i, 0
            size += b
        page, rows = [(g, start, len(sizes))], len(sizes) - start
    if page:
        pages.append(page)
    return pages


MAX_DIFF_WORDS = 2000
DIFF_BUDGET = 50_000_000
"""Word pairs (len(best) x len(response)) one page may diff. SequenceMatcher is quadratic on
repetitive text: 3000 x 3000 words of a ten-word vocabulary take 0.26 s, so a page of long crafted
responses is cut at about 1.5 s of diffing; a page of 320 real 300-word responses needs 3e7."""


def word_diff(best: str, text: str) -> list[list[str]]:
    """``text`` against ``best`` as ``[op, words]`` runs, op in equal/insert/delete (whitespace kept)."""
    a, b = re.findall(r"\S+\s*", best), re.findall(r"\S+\s*", text)
    out: list[list[str]] = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if op == "equal":
            out.append(["equal", "".join(b[j1:j2])])
            continue
        if i2 > i1:
            out.append(["delete", "".join(a[i1:i2])])
        if j2 > j1:
            out.append(["insert", "".join(b[j1:j2])])
    return out


def add_diffs(groups: list[dict[str, Any]], best_texts: list[str | None]) -> None:
    """Each row's ``diff`` against its group's best response (None for the best, or when the texts
    are too long to diff within the page's budget: ``diff_skipped`` then says so)."""
    budget = DIFF_BUDGET
    for g, best in zip(groups, best_texts, strict=True):
        best_words = None if best is None else len(best.split())
        for r in g["rows"]:
            r["diff"] = None
            if best is None or r["best"]:
                continue
            text = r.get("response") or ""
            words = len(text.split())
            cost = max(1, words) * max(1, best_words or 0)
            if max(words, best_words or 0) > MAX_DIFF_WORDS or cost > budget:
                r["diff_skipped"] = "too long to diff here"
                continue
            budget -= cost
            r["diff"] = word_diff(best, text)


def sample_page(
    index: LineIndex, step: int, rows: StepRows, *, sort: str, desc: bool, filt: str, page: int, per_page: int
) -> dict[str, Any]:
    """Page ``page`` of the parsed step ``rows``: its groups' rows read again from ``index`` and shown
    whole, with each group's prompt and best response (diffs against it)."""
    samples, step_bad, bad_total = list(rows.samples), list(rows.bad), rows.bad_total  # another page may extend it
    groups = step_groups(samples, sort=sort, desc=desc, filt=filt)
    pages = page_spans([[s.bytes for s in g.kept] for g in groups], max_groups=per_page)
    spans = pages[page] if page < len(pages) else []
    wanted: set[int] = set()
    for g, a, b in spans:
        group = groups[g]
        wanted.update(s.line for s in group.kept[a:b])
        wanted.add(group.members[0].line)  # its prompt
        if group.best is not None:
            wanted.add(group.best.line)
    lines = sorted(wanted)
    views = {n: sample_view(row, index.where(n)) for n, row in zip(lines, index.rows(lines), strict=True)}
    shown, best_texts, bad = [], [], []
    for g, a, b in spans:
        group = groups[g]
        best = None if group.best is None else views[group.best.line]
        out = []
        for s in group.kept[a:b]:
            r = views[s.line]
            if "_error" in r:  # read differently from the first parse: the file changed under the page
                bad.append(r["_error"])
                continue
            out.append({**r, "best": group.best is not None and s.line == group.best.line})
        shown.append(
            {
                "group": group.key,
                "prompt": views[group.members[0].line].get("prompt"),
                "size": len(group.members),
                "kept": len(group.kept),
                "first": a,
                "rows": out,
            }
        )
        best_texts.append(None if best is None or "_error" in best else best.get("response") or "")
    add_diffs(shown, best_texts)
    note = ""
    if rows.capped:
        note = (
            f"step {step} has {rows.lines:,} rows; the first {rows.read:,} are shown "
            f"(a step is read up to {MAX_STEP_ROWS:,} rows and {MAX_STEP_BYTES // 2**20} MiB)"
        )
    return {
        "step": step,
        "rows": len(samples),
        "groups_total": len(groups),
        "page": page,
        "per_page": per_page,
        "pages": len(pages),
        "rows_per_page": PAGE_ROWS,
        "groups": shown,
        "bad_rows": (step_bad + bad)[:SHOWN_BAD_ROWS],
        "bad_rows_total": bad_total + len(bad),
        "note": note,
    }
