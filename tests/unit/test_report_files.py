"""The report.md pieces every writer shares: one markdown table layout, and matplotlib loaded only
when a figure is drawn."""

import subprocess
import sys

import pytest

from grm.report_files import figure_png, markdown_table, new_figure


def test_a_markdown_table_is_a_header_a_rule_and_one_line_per_row():
    assert markdown_table(["judge", "n"], [["a", "3"], ["b", ""]]) == [
        "| judge | n |",
        "|---|---|",
        "| a | 3 |",
        "| b |  |",
    ]
    assert markdown_table(["step"], iter([])) == ["| step |", "|---|"]  # no rows: the header still shows


def test_report_modules_do_not_import_matplotlib_until_a_figure_is_drawn():
    code = (
        "import sys, grm.report_files, grm.evaluation.report, grm.evaluation.policy_report, grm.orchestrator.recorder\n"
        "print('matplotlib' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "False", out.stdout + out.stderr


def test_a_figure_becomes_png_bytes_and_is_closed_even_when_drawing_fails(tmp_path):
    import matplotlib.pyplot as plt

    fig, ax = new_figure(figsize=(2, 2))
    ax.plot([0, 1], [1, 0])
    assert figure_png(fig)[:8] == b"\x89PNG\r\n\x1a\n"
    assert not plt.fignum_exists(fig.number)

    fig, _ = new_figure()

    def fails(*args, **kwargs):
        raise ValueError("cannot draw")

    fig.savefig = fails
    with pytest.raises(ValueError):
        figure_png(fig)
    assert not plt.fignum_exists(fig.number)
