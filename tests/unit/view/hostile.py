"""Directories crafted to reach outside themselves, for the security tests and the fuzz test of
`grm view` (issue #39): every byte written outside them carries ``SECRET``."""

from __future__ import annotations

import json
import os
from pathlib import Path

from tests.unit.view.http_probe import SECRET
from tests.unit.view.synthetic import sample_row, write_eval, write_run


def outside(tmp: Path) -> Path:
    """Files a crafted directory may point at: none of their bytes (nor names) may be served."""
    out = tmp / "outside"
    out.mkdir()
    (out / "secret.txt").write_text(f"{SECRET}\n")
    (out / f"{SECRET}.name").write_text("x")  # a name inside a linked directory is outside data too
    (out / "secret.jsonl").write_text(json.dumps({**sample_row(1, 0, 0, 1.0), "response": SECRET}) + "\n")
    (out / "gate.json").write_text(json.dumps({"j": {"judge": SECRET, "passed": True}}))
    rows = [{"id": i, "prompt": SECRET, "a": SECRET, "b": SECRET, "label": 1} for i in ("i0", "i1", "i2")]
    (out / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    items = [{"v": 1, "id": i, "kind": "pair", "prompt": SECRET, "responses": [SECRET, SECRET], "label": 1} for i in ("i0", "i1")]
    (out / "items.jsonl").write_text("".join(json.dumps(r) + "\n" for r in items))
    return out


def make_hostile(tmp: Path) -> tuple[list[Path], Path, Path]:
    """A run and two eval directories crafted to reach outside: links to files and directories
    (absolute and relative), a link loop, a FIFO, data files that are links, and configs naming an
    outside data path (absolute, and through ~). Returns (directories to serve, the run, outside)."""
    out = outside(tmp)
    run = write_run(tmp / "run")
    (run / "report.md").write_text("# inside\n")
    os.symlink(out / "secret.txt", run / "notes.log")
    os.symlink("../outside/secret.txt", run / "rel.log")
    os.symlink(out, run / "linkdir")
    os.symlink("loop.log", run / "loop.log")
    os.mkfifo(run / "fifo.log")
    os.symlink(out / "gate.json", run / "gate.json")
    linked = tmp / "linked-run"
    linked.mkdir()
    (linked / "config.resolved.yaml").write_text("name: x\nalgorithm: {type: grpo}\n")
    os.symlink(out / "secret.jsonl", linked / "samples.jsonl")
    os.symlink(out / "secret.jsonl", linked / "metrics.jsonl")
    ev = write_eval(tmp / "ev")
    (ev / "items.jsonl").unlink()  # an eval directory from before items.jsonl: texts from nowhere else
    (ev / "config.resolved.yaml").write_text(
        f"data: {out / 'data.jsonl'}\n"
        "map: {prompt: prompt, response_a: a, response_b: b, label: label, id: id}\njudges: [{name: pairwise}]\n"
    )
    ev2 = write_eval(tmp / "ev2", judge="other")
    (ev2 / "items.jsonl").unlink()
    os.symlink(out / "items.jsonl", ev2 / "items.jsonl")
    (ev2 / "config.resolved.yaml").write_text("data: ~/../../" + str(out / "data.jsonl") + "\njudges: [{name: other}]\n")
    return [run, linked, ev, ev2], run, out
