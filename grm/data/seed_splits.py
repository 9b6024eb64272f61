"""Disjoint named seed ranges of a task set generated from seeds (``calc_tasks``, ``clarify_tasks``, ``revise_tasks``):
which split a seed is in, a split's rows, and the seed a row names, checked against its split."""

from __future__ import annotations

from typing import Any


class SeedSplits:
    """``splits``: name -> its seeds (disjoint ranges); ``noun`` names the tasks in messages."""

    def __init__(self, splits: dict[str, range], noun: str) -> None:
        self.splits, self.noun = splits, noun

    def split_of(self, seed: int) -> str | None:
        return next((name for name, seeds in self.splits.items() if seed in seeds), None)

    def rows(self, split: str, n: int, start: int) -> list[dict[str, Any]]:
        """``n`` rows of ``split`` from its ``start``-th seed on: ``{"seed": N, "split": NAME}``."""
        seeds = self.splits[split]
        if not 0 <= start <= start + n <= len(seeds):
            raise ValueError(f"split {split} has {len(seeds)} {self.noun}; asked for {start}..{start + n - 1}")
        return [{"seed": s, "split": split} for s in seeds[start : start + n]]

    def seed_of(self, row: dict[str, Any]) -> int:
        """The row's integer ``seed``, in its ``split`` when the row names one; ValueError otherwise."""
        seed = row.get("seed")
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ValueError(f"row needs an integer 'seed', got {seed!r}")
        split = row.get("split")
        if split is not None and self.split_of(seed) != split:
            raise ValueError(f"seed {seed} is not in split {split!r} (seeds {self.splits.get(split, 'unknown split')})")
        return seed
