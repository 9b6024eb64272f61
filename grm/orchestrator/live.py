"""What ``grm run`` shows while it runs.

On a terminal: a rich ``Live`` panel, redrawn twice a second, with step n/N and the ETA, the phase
the step is in, the rollout samples landed and the items each judge (and each replica) has judged,
and the last step's rewards, masking, KL and judge cost per judge; each finished step's line is
printed above it, so the scrollback keeps the history. Anywhere else (stdout a pipe or file,
``--no-live``, ``CI`` set): exactly one plain line per step, so CI logs stay readable.

The scheduler reports rollout chunks as they land and judge calls as they finish (``landed``,
``judged``); the driver reports the phase and the finished step. Training shows its elapsed
seconds, not micro-batch progress: the policy actor runs one call at a time, so a progress counter
could only be polled with a second, threaded entry into it.

The pipeline's and the judges' names come from user YAML: they enter the panel as ``Text``
(``grm.terminal.text``), never as markup, whatever console the display is given.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

from grm.judges.cost import COUNTS


class StepProgress(Protocol):
    """What the scheduler tells a display as a step's data comes in."""

    def landed(self, step: int, samples: int) -> None:
        """A rollout chunk of ``step`` with ``samples`` responses landed."""
        ...

    def judged(self, step: int, judge: str, replica: int | None, samples: int) -> None:
        """A call of ``judge`` (on ``replica``; None: in this process) judged ``samples`` of ``step``."""
        ...

    wants_training: bool
    """Whether ``training`` is worth polling the policy for (a live panel is showing)."""

    def training(self, done: int, previous: int | None) -> None:
        """The policy (rank 0) has run ``done`` micro-batches of the step training now; ``previous``:
        how many the previous step's training ran (None before the first)."""
        ...


class NoProgress:
    wants_training = False

    def landed(self, step: int, samples: int) -> None:
        pass

    def training(self, done: int, previous: int | None) -> None:
        pass

    def judged(self, step: int, judge: str, replica: int | None, samples: int) -> None:
        pass


def live_wanted(no_live: bool = False, console: Any = None) -> bool:
    """The live panel only for a person at a terminal: not with ``--no-live``, not under CI
    (``CI`` set to anything but false/0), not when stdout is a pipe or file or a dumb terminal."""
    if no_live or os.environ.get("CI", "").lower() not in ("", "0", "false"):
        return False
    if console is None:
        from grm.terminal import console as literal_console

        console = literal_console()
    return bool(console.is_terminal and not console.is_dumb_terminal)


@dataclass
class StepCounts:
    """What has come in for one step."""

    samples: int = 0
    judged: dict[str, int] = field(default_factory=dict)
    replicas: dict[str, dict[int, int]] = field(default_factory=dict)


class RunDisplay:
    """The run's console: one line per step, and on a terminal (``live``) the panel as well.

    ``judges``: judge name -> replica count (0 for a judge in this process); ``samples``: responses
    a step rolls out (prompts per step x group size)."""

    def __init__(self, name: str, steps: int, samples: int, judges: dict[str, int], live: bool, console: Any = None) -> None:
        from grm.terminal import console as literal_console

        # soft_wrap: a step's line stays one line whatever the width (a pipe's default is 80)
        self.console = console or literal_console(soft_wrap=True)
        self.name, self.steps, self.samples, self.judges, self.live = name, steps, samples, judges, live
        self.counts: dict[int, StepCounts] = {}
        self.step = 0
        self.phase, self.phase_at, self.step_at = "starting", time.perf_counter(), time.perf_counter()
        self.started_at = time.perf_counter()
        self.step_seconds: list[float] = []
        self.last: dict[str, Any] | None = None
        self._live: Any = None
        self.micro: tuple[int, int | None] | None = None
        """(micro-batches done, the previous step's count) of the training under way, rank 0."""

    @property
    def wants_training(self) -> bool:
        return self.live

    @classmethod
    def for_run(cls, cfg: Any, judges: dict[str, int], live: bool) -> RunDisplay:
        """The display of a pipeline (``PipelineSpec``) whose judges have these replica counts."""
        a = cfg.algorithm
        return cls(cfg.name, cfg.train.steps, a.prompts_per_step * a.group_size, judges, live)

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        if self.live and self._live is None:
            from rich.live import Live

            self._live = Live(get_renderable=self.render, console=self.console, refresh_per_second=2, transient=False)
            self._live.start()

    def stop(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None

    # ------------------------------------------------------------------ events
    def begin(self, step: int) -> None:
        """Step ``step`` (0-based) starts: its rollout and judging are under way."""
        self.step, self.step_at = step, time.perf_counter()
        self.set_phase("rollout + judging")

    def set_phase(self, phase: str) -> None:
        self.phase, self.phase_at = phase, time.perf_counter()
        if phase == "training":
            self.micro = None

    def training(self, done: int, previous: int | None) -> None:
        self.micro = (done, previous)

    def landed(self, step: int, samples: int) -> None:
        self.counts.setdefault(step, StepCounts()).samples += samples

    def judged(self, step: int, judge: str, replica: int | None, samples: int) -> None:
        c = self.counts.setdefault(step, StepCounts())
        c.judged[judge] = c.judged.get(judge, 0) + samples
        if replica is not None:
            per = c.replicas.setdefault(judge, {})
            per[replica] = per.get(replica, 0) + samples

    def done(self, metrics: dict[str, Any]) -> None:
        """A step is trained and logged: its line, and the panel's "last step" from its metrics."""
        from rich.text import Text

        from grm.orchestrator.step_rows import console_line

        self.last = metrics
        self.step_seconds.append(metrics["seconds_step"])
        self.counts.pop(metrics["step"] - 1, None)
        self.set_phase("next step" if metrics["step"] < self.steps else "writing the checkpoint and report")
        line = Text(console_line(metrics, self.steps))
        line.stylize("bold", 0, len(f"step {metrics['step']}/{self.steps}"))
        self.console.print(line)

    # ------------------------------------------------------------------ the panel
    def eta_s(self) -> float | None:
        if not self.step_seconds:
            return None
        done = self.last["step"] if self.last else 0
        recent = self.step_seconds[-5:]  # the first step carries warm-up; recent steps predict better
        return sum(recent) / len(recent) * (self.steps - done)

    def render(self) -> Any:
        from rich.console import Group
        from rich.panel import Panel
        from rich.progress_bar import ProgressBar
        from rich.table import Table
        from rich.text import Text

        from grm.terminal import text

        now = time.perf_counter()
        eta = self.eta_s()
        finished = self.last is not None and self.last["step"] >= self.steps
        head = Text.assemble(
            (f"step {self.step + 1}/{self.steps}", "bold"),
            f"  elapsed {_clock(now - self.started_at)}  ETA {_clock(eta) if eta is not None else '-'}  |  "
            f"{self.phase} {now - self.phase_at:.1f} s",
        )
        bars = Table.grid(padding=(0, 1))
        bars.add_column(no_wrap=True)
        bars.add_column(width=24)
        bars.add_column(no_wrap=True)
        c = self.counts.get(self.step, StepCounts())
        total = max(self.samples, c.samples)
        bars.add_row("rollout", ProgressBar(total=total, completed=c.samples, width=24), f"{c.samples}/{total} samples")
        for name, replicas in self.judges.items():
            n = c.judged.get(name, 0)
            per = c.replicas.get(name, {})
            rep = "  " + " ".join(f"#{i} {per.get(i, 0)}" for i in range(replicas)) if replicas > 1 else ""
            bars.add_row(text(f"judge {name}"), ProgressBar(total=total, completed=n, width=24), f"{n}/{total}{rep}")
        if self.phase == "training":
            done, previous = self.micro or (0, None)
            if previous:  # the previous step's count sizes the bar: steps of one run are alike
                bar = ProgressBar(total=max(previous, done), completed=done, width=24)
                bars.add_row("training", bar, f"{done}/{previous} micro-batches (rank 0)  {now - self.phase_at:.1f} s")
            else:
                bars.add_row("training", "", f"{done} micro-batches (rank 0)  {now - self.phase_at:.1f} s")
        ahead = self.counts.get(self.step + 1)
        parts: list[Any] = [head] if finished else [head, bars]
        if ahead is not None:  # async: the next step's rollouts and judging overlap this one
            judged = " ".join(f"{k} {v}" for k, v in ahead.judged.items())
            parts.append(text(f"next step: {ahead.samples} samples landed; judged: {judged or '-'}", "dim"))
        if self.last is not None:
            parts.append(self.last_step_table(self.last))
        return Panel(Group(*parts), title=text(f"grm run {self.name}"), title_align="left")

    def last_step_table(self, m: dict[str, Any]) -> Any:
        from rich.table import Table

        from grm.terminal import text

        t = Table(
            title=(
                f"step {m['step']}: reward {m['reward_mean']:.3f}±{m['reward_std']:.3f}  masked {m['masked']}  "
                f"kl {m.get('kl', 0.0):.4f}  len {m['response_len_mean']:.1f}  {m['seconds_step']:.1f} s"
            ),
            title_justify="left",
            box=None,
            pad_edge=False,
        )
        cols = (
            "judge",
            "reward",
            "masked",
            "calls",
            "retries",
            "prompt tok",
            "cached tok",
            "gen tok",
            "votes skipped",
            "judge s",
        )
        for col in cols:
            t.add_column(col, no_wrap=True, justify="left" if col == "judge" else "right")
        masked = m.get("masked_by_judge") or {}
        for name in self.judges:
            cost = [m.get(f"judge_cost/{name}/{k}", 0) for k in COUNTS]
            reward = m.get(f"reward/{name}")
            t.add_row(
                text(name),
                f"{reward:.3f}" if isinstance(reward, float) else "-",
                str(masked.get(name, 0)),
                *[str(x) for x in cost],
                f"{m.get(f'judge_cost/{name}/seconds', 0.0):.1f}",
            )
        return t


def _clock(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"
