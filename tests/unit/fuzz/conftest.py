"""Hypothesis settings for the fuzz tests and the case count in the terminal summary.

The ``fuzz`` profile (default) is bounded and derandomized: the same examples run on every
machine, so a CI failure reproduces locally, and the whole fuzz set stays well under a minute on
two cores. ``GRM_FUZZ_PROFILE=fuzz-long`` runs 20 times as many examples with a random seed and
shrinks failures, for a deeper search by hand.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, Phase, settings

from tests.unit.fuzz.support import CASES

_QUIET = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example, HealthCheck.filter_too_much]
# No shrinking in the default profile: a failure prints the example as found at once, where
# shrinking a slow command-line example can take minutes. fuzz-long shrinks.
settings.register_profile(
    "fuzz",
    max_examples=100,
    deadline=None,
    derandomize=True,
    database=None,
    print_blob=False,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=_QUIET,
)
settings.register_profile("fuzz-long", max_examples=2000, deadline=None, database=None, suppress_health_check=_QUIET)
settings.load_profile(os.environ.get("GRM_FUZZ_PROFILE", "fuzz"))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if CASES:
        parts = ", ".join(f"{area} {n}" for area, n in sorted(CASES.items()))
        terminalreporter.write_line(f"fuzz: {sum(CASES.values())} cases ({parts})")
