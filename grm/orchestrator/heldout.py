"""``grm run``'s held-out check (``heldout:``): before the first step and after the last (and every
``heldout.every`` steps), the policy answers the same held-out prompts greedily and rule verifiers
score the answers; the readings go to ``heldout.jsonl`` (``grm.orchestrator.heldout_file``).

Rule verifiers only (``grm.config.resolve``): a judge that runs a model, the training judge among
them, never grades the test. A resume's log trimming drops the readings of steps it trains again
(``Recorder.truncate_after``)."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from grm.base import GrmError
from grm.config.resolve import LoadedPipeline
from grm.data.prompts import Prompt
from grm.jsonl import append_jsonl
from grm.orchestrator.errors import RunError
from grm.orchestrator.heldout_file import FILE, changes, read_readings, reading_line
from grm.run_format import stamp


class Check(Protocol):
    prompts: list[Prompt]
    max_new_tokens: int

    def due(self, step: int) -> bool:
        """Whether a reading is taken after ``step`` training steps (0: the initial policy)."""
        ...

    def record(self, step: int, answers: list[str], seconds: float) -> None: ...

    def summary(self) -> None: ...


class NoCheck:
    """A pipeline without ``heldout:``: never due."""

    prompts: list[Prompt] = []
    max_new_tokens = 0

    def due(self, step: int) -> bool:
        return False

    def record(self, step: int, answers: list[str], seconds: float) -> None:
        raise AssertionError("a pipeline without heldout: takes no reading")

    def summary(self) -> None:
        pass


class HeldoutCheck:
    def __init__(self, loaded: LoadedPipeline, run_dir: Path) -> None:
        from grm.config.pipeline import DataSpec
        from grm.data.prompts import load_prompts
        from grm.judges.runtime import build_judge

        cfg = loaded.spec
        h, d = cfg.heldout, cfg.data
        assert h is not None
        columns = {"prompt_field": d.prompt_field, "reference_field": d.reference_field}
        source = DataSpec(prompts=h.prompts, constraints_field=d.constraints_field, shuffle=False, limit=h.limit, **columns)
        self.prompts = load_prompts(source)  # now: a bad row fails before Ray starts
        self.judges = [build_judge(spec, path.parent) for spec, path in loaded.heldout]
        self.source, self.every, self.last = h.prompts, h.every, cfg.train.steps
        self.max_new_tokens = h.max_new_tokens or cfg.rollout.max_new_tokens
        self.run_dir = run_dir

    @staticmethod
    def load(loaded: LoadedPipeline, run_dir: Path) -> Check:
        return NoCheck() if loaded.spec.heldout is None else HeldoutCheck(loaded, run_dir)

    def due(self, step: int) -> bool:
        """After ``step`` steps: 0 (the initial policy), the last, each ``every``-th; not when the
        file already holds it (a resume that kept that step)."""
        if step not in (0, self.last) and not (self.every > 0 and step % self.every == 0):
            return False
        try:
            return not any(r["step"] == step for r in read_readings(self.run_dir))
        except GrmError as e:
            raise RunError(str(e)) from None

    def record(self, step: int, answers: list[str], seconds: float) -> None:
        """Score the policy's ``answers`` (one per prompt, in order) with every verifier; append and print."""
        from grm.judges.types import Sample
        from grm.terminal import console

        ids = [p.id for p in self.prompts]
        rows = []
        for judge in self.judges:
            samples = [Sample.of_prompt(p, response=t, id=p.id) for p, t in zip(self.prompts, answers, strict=True)]
            try:
                results = judge.score_batch(samples)
            except GrmError as e:
                raise RunError(f"heldout: judge '{judge.spec.name}': {e}") from None
            rewards = [None if r is None or r.reward is None else float(r.reward) for r in results]
            row = {"step": step, "judge": judge.spec.name, "ids": ids, "rewards": rewards, "answers": answers}
            rows.append(stamp("heldout", {**row, "seconds": round(seconds, 3)}))
        path = self.run_dir / FILE
        try:
            append_jsonl(path, rows)
        except OSError as e:
            raise RunError(f"{path}: cannot write the reading after step {step} ({e.strerror or e})") from None
        for row in rows:
            console().print(reading_line(row, self.source), soft_wrap=True)

    def summary(self) -> None:
        """The console's closing lines: each verifier's last reading against its first."""
        try:
            lines = changes(read_readings(self.run_dir))
        except GrmError as e:
            lines = [f"(held-out check not shown: {e})"]
        for line in lines:
            print(line, flush=True)
