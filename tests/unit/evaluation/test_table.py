"""``grm eval``'s summary table at 80 columns on a terminal and through a pipe: no header is ever
broken, and a pipe gets plain text."""

import io
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from rich.console import Console

from grm.evaluation.table import fit_columns, plain_table, print_table

ROOT = Path(__file__).resolve().parents[3]
HEADERS = ["judge", "n", "acc1", "acc2", "avg", "swap", "agree", "picks longer", "acc|shorter", "spearman", "fail"]
HEADERS += ["masked", "cut", "j/s"]


def rows() -> list[dict[str, str]]:
    """The summary's columns (``summary_rows(m, ci=False)``) for two judges and the vote."""
    out = []
    for name in ("helpfulness-pairwise", "helpfulness-pointwise-logprob", "majority vote"):
        out.append({h: (name if h == "judge" else "100" if h == "n" else "0.750") for h in HEADERS})
    return out


def test_at_80_columns_the_columns_are_split_and_no_header_breaks():
    buf = io.StringIO()
    con = Console(force_terminal=True, width=80, file=buf, record=True)
    print_table(con, rows(), "Evaluation report (out)")
    text = con.export_text()
    lines = text.splitlines()
    assert all(len(ln) <= 80 for ln in lines)
    header_lines = [ln for ln in lines if "judge" in ln and "┃" in ln]
    assert len(header_lines) >= 2  # the columns did not fit one table
    shown = [h.strip() for ln in header_lines for h in ln.strip("┃ ").split("┃")]
    assert sorted(set(shown)) == sorted(HEADERS)  # every header whole, in exactly one cell
    for name in ("helpfulness-pointwise-logprob", "majority vote"):  # each part names the judge
        assert sum(name in ln for ln in lines) == len(header_lines)
    assert "\x1b[" in buf.getvalue()  # a terminal still gets colour


def test_fit_columns_keeps_order_and_leads_with_the_judge():
    groups = fit_columns(rows(), 80)
    assert all(g[0] == "judge" for g in groups)
    assert [c for g in groups for c in g[1:]] == HEADERS[1:]
    assert fit_columns(rows(), 1000) == [HEADERS]


def test_through_a_pipe_the_table_is_plain_text_one_line_per_row():
    script = textwrap.dedent(
        """
        from rich.console import Console
        from grm.evaluation.table import print_table
        from tests.unit.evaluation.test_table import rows
        print_table(Console(), rows(), "Evaluation report (out)")
        """
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "80"}
    env.pop("FORCE_COLOR", None)
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, check=True).stdout
    assert "\x1b" not in out
    lines = out.splitlines()
    assert lines[0] == "Evaluation report (out)"
    assert lines[1].split() == "judge n acc1 acc2 avg swap agree picks longer acc|shorter spearman fail masked cut j/s".split()
    assert len(lines) == 3 + 3 + 1 and lines[-1] == ""  # title, header, rule, 3 rows, a blank line
    at = lines[1].index("picks longer")
    assert lines[3].index("0.750", at) == at  # cells start under their header
    assert out == plain_table(rows(), "Evaluation report (out)") + "\n\n"  # a blank line before what follows


def test_judge_names_and_the_title_print_as_text_on_a_terminal_and_in_a_pipe():
    hostile = [{"judge": "[bold]j[/] :x: \x1b[31mred", "n": "[/]"}]
    for con in (Console(force_terminal=True, width=200, file=io.StringIO()), Console(width=200, file=io.StringIO())):
        print_table(con, hostile, "report ([red]out[/] \x1b]0;t\x07)")  # a plain rich console: markup on by default
        out = con.file.getvalue()
        assert "[bold]j[/] :x: \\x1b[31mred" in out and "[/]" in out and "report ([red]out[/] \\x1b]0;t\\x07)" in out
        assert "❌" not in out and "\x1b[31m" not in out and "\x1b]" not in out
