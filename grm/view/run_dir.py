"""A run directory as the page sees it: per-step metrics (``grm.view.run_metrics``), a step's
samples grouped by prompt (``grm.view.sample_browser``), its judge gate and what cannot be read."""

from __future__ import annotations

import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any

from grm.view.folder import SMALL_FILE_LIMIT, Folder
from grm.view.index import LineIndex, parse_row
from grm.view.run_metrics import MetricLog
from grm.view.sample_browser import StepRows, sample_page

PARSED_STEPS = 4
"""Steps whose parse is kept between pages (the one being browsed and a few before it)."""


class RunDir:
    """A run directory; every call re-reads what the run appended since the last one."""

    kind = "run"

    def __init__(self, folder: Folder | Path) -> None:
        self.folder = folder if isinstance(folder, Folder) else Folder(folder)
        self.path = self.folder.path
        self.metrics_log = MetricLog(self.folder)
        self.samples = LineIndex(self.folder, "samples.jsonl")
        self._gate_problem: str | None = None
        self._steps: OrderedDict[int, StepRows] = OrderedDict()
        self._steps_lock = threading.Lock()

    def metrics(self) -> dict[str, Any]:
        self.metrics_log.refresh()
        return {**self.metrics_log.plotted(), "gate": self.gate()}

    def gate(self) -> list[dict[str, Any]]:
        """The judge gates this run passed or failed (``gate.json``, written before the policy
        loads), one entry per judge; empty when the run has none or the file is unreadable (then
        ``problems`` says why)."""
        self._gate_problem = None
        try:
            data = parse_row(self.folder.read("gate.json", SMALL_FILE_LIMIT), "gate.json")
        except FileNotFoundError:
            return []
        except OSError as e:
            self._gate_problem = str(e)
            return []
        if "_error" in data:
            self._gate_problem = data["_error"]
            return []
        return [g for g in data.values() if isinstance(g, dict)]

    def problems(self) -> list[str]:
        """What the page cannot show from this directory, one line each; every file is looked at
        here, so the list is the same whatever the page asked for before."""
        self.samples.refresh()
        self.metrics_log.refresh()
        self.gate()
        out = [p for p in (self.samples.problem, self.metrics_log.problem, self._gate_problem) if p]
        if self.samples.unstepped:
            out.append(
                f"samples.jsonl: {self.samples.unstepped} lines have no integer step (not JSON, or no 'step') and are not shown"
            )
        return out

    def steps(self) -> list[int]:
        self.samples.refresh()
        return sorted(self.samples.by_step)

    def step_rows(self, step: int) -> StepRows:
        """The parse of ``step``, read once and extended by the lines appended to it since; parsed
        again from the start only when samples.jsonl was replaced."""
        with self._steps_lock:  # one parse at a time: concurrent first pages of a step wait for it
            self.samples.refresh()
            rows = self._steps.pop(step, None)
            if rows is None or rows.generation != self.samples.generation:
                rows = StepRows(self.samples.generation)
            rows.extend(self.samples, list(self.samples.by_step.get(step, [])))
            self._steps[step] = rows
            while len(self._steps) > PARSED_STEPS:
                self._steps.popitem(last=False)
            return rows

    def sample_page(
        self, step: int, *, sort: str = "reward", desc: bool = True, filt: str = "all", page: int = 0, per_page: int = 20
    ) -> dict[str, Any]:
        rows = self.step_rows(step)
        return sample_page(self.samples, step, rows, sort=sort, desc=desc, filt=filt, page=page, per_page=per_page)
