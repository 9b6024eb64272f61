"""Run and eval files carry a format version (``grm.run_format``): what grm writes reads back, a
line of an older format (no ``format`` key) is read as migrated, and one of a newer format is
refused by every reader (resume, the recorder, eval resume, rescore, grm view) naming file and line."""

from __future__ import annotations

import json
import re

import pytest

from grm.evaluation import report
from grm.jsonl import JsonlError
from grm.orchestrator.checkpoints import driver_state
from grm.orchestrator.errors import RunError
from grm.orchestrator.recorder import Recorder
from grm.orchestrator.resume import cut_after
from grm.run_format import FORMATS, MIGRATIONS, line_format, read_row, stamp
from grm.view.eval_dir import EvalDir
from grm.view.run_dir import RunDir
from tests.unit.fuzz.support import assert_clean_failure, run_cli
from tests.unit.judges.fake_engine import ScriptedEngine
from tests.unit.orchestrator.test_run_dir_durability import FakePolicy, _cfg, _checkpoint, _run_with_checkpoint, _tree


def newer(kind: str, n: int) -> str:
    return re.escape(f"written by a newer grm ({kind} format {n}; this grm reads up to {FORMATS[kind]}): upgrade grm")


# --------------------------------------------------------------------------- the module


def test_every_format_past_1_has_one_migration_from_each_older_format():
    assert set(MIGRATIONS) <= set(FORMATS)
    assert {k: sorted(MIGRATIONS.get(k, {})) for k in FORMATS} == {k: list(range(1, n)) for k, n in FORMATS.items()}


def test_a_stamp_is_a_copy_with_the_format_as_its_last_key_which_the_lines_tail_gives():
    row = {"step": 3, "judges": {"j": {"details": {"format": 7}}}}
    out = stamp("samples", row)
    assert list(out) == ["step", "judges", "format"] and out["format"] == 1 and "format" not in row
    assert line_format(json.dumps(out).encode() + b"\n") == 1
    assert line_format(json.dumps(row).encode()) is None  # a nested "format" is not the line's
    assert line_format(b'{"step": 1, "format": 2, "id": "x"}') is None  # not at the end: the reader parses it


def test_results_1_to_2_fills_what_an_older_grm_did_not_write_and_keeps_what_it_did():
    old = {"judge": "j", "truncated": 2}  # no format key: format 1
    assert read_row("results", old) is old
    assert old == {"judge": "j", "truncated": 2, "one_order_failed": 0, "judge_directed": 0, "cost": None, "format": 2}
    current = {"judge": "j", "cost": {"calls": 1}, "format": 2}
    assert read_row("results", dict(current)) == current  # nothing to migrate
    assert read_row("metrics", {"step": 1}) == {"step": 1}  # format 1 is current: left as it was


@pytest.mark.parametrize("bad", ["1", 0, -1, True, 1.5, [1], None])
def test_a_format_that_is_not_a_number_is_refused(bad):
    with pytest.raises(RunError, match=r"^f.jsonl:2: 'format' is .*, not a format number"):
        read_row("metrics", {"step": 1, "format": bad}, "f.jsonl:2", RunError)


# --------------------------------------------------------------------------- a run directory


def test_what_the_recorder_writes_reads_back_through_every_reader(tmp_path):
    rec = Recorder(tmp_path)
    rec._tb = False  # no TensorBoard (torch) here
    metrics = {"step": 1, "reward_mean": 0.5}
    rec.log_step(metrics, [{"step": 1, "id": "s1/0", "judges": {}}])
    assert metrics == {"step": 1, "reward_mean": 0.5}  # stamped as written, not in the caller's dict
    assert json.loads((tmp_path / "samples.jsonl").read_text()) == {"step": 1, "id": "s1/0", "judges": {}, "format": 1}
    assert rec.metrics() == [{"step": 1, "reward_mean": 0.5, "format": 1}]
    _checkpoint(rec, 1, "v1")
    assert driver_state(rec.checkpoint_dir(1)) == {"step": 1, "stream": {"epoch": 0, "index": 8}, "format": 1}
    view = RunDir(tmp_path)
    m = view.metrics()
    assert m["rows"] == [{"step": 1.0, "reward_mean": 0.5}] and m["bad_rows"] == []  # the version is no curve
    page = view.sample_page(1)
    assert page["rows"] == 1 and page["bad_rows"] == []
    cut_after(tmp_path / "samples.jsonl", 0)
    assert (tmp_path / "samples.jsonl").read_bytes() == b""


def test_a_run_of_unversioned_lines_resumes_as_format_1(tmp_path):
    run = _run_with_checkpoint(tmp_path)  # metrics.jsonl written by hand, without format keys
    (run / "checkpoints" / "step-2" / "driver.json").write_text('{"step": 2, "stream": {"epoch": 0, "index": 8}}')
    (run / "samples.jsonl").write_text('{"step": 1, "id": "a"}\n{"step": 3, "id": "b"}\n')
    Recorder.create(_cfg(run), str(run))
    state = Recorder(run).resume_state(FakePolicy("v2"), get=lambda ref: ref)
    assert state.pop("policy_version") == str(run / "checkpoints" / "step-2")  # what the policy's load answered
    assert state == {"step": 2, "stream": {"epoch": 0, "index": 8}}
    assert (run / "samples.jsonl").read_text() == '{"step": 1, "id": "a"}\n'  # step 3 cut: it is redone


def test_a_newer_metrics_line_is_refused_by_resume_before_it_writes_and_named_by_every_reader(tmp_path):
    run = _run_with_checkpoint(tmp_path)
    path = run / "metrics.jsonl"
    path.write_text('{"step": 1}\n{"step": 2, "format": 9}\n')
    before = _tree(run)
    with pytest.raises(JsonlError, match=rf"^{re.escape(str(path))}:2: {newer('metrics', 9)}"):
        Recorder.create(_cfg(run), str(run))
    assert _tree(run) == before  # no config.resume-1.yaml
    with pytest.raises(JsonlError, match=rf"^{re.escape(str(path))}:2: {newer('metrics', 9)}"):
        Recorder(run).metrics()
    with pytest.raises(RunError, match=rf"^{re.escape(str(path))}:2: {newer('metrics', 9)}"):
        cut_after(path, 1)
    (bad,) = RunDir(run).metrics()["bad_rows"]
    assert re.match(rf"metrics.jsonl line 2: {newer('metrics', 9)}", bad), bad


@pytest.mark.parametrize(
    "line",
    [b'{"step": 1, "id": "c", "format": 3}', b'{"step": 1, "format": 3, "id": "c"}'],
    ids=["stamped-last", "anywhere"],
)
def test_a_newer_samples_line_is_named_by_resume_and_by_the_viewer(tmp_path, line):
    path = tmp_path / "samples.jsonl"
    stamped = json.dumps(stamp("samples", {"step": 1, "id": "b"})).encode()
    path.write_bytes(b'{"step": 1, "id": "a"}\n' + stamped + b"\n" + line + b"\n")
    before = path.read_bytes()
    with pytest.raises(RunError, match=rf"^{re.escape(str(path))}:3: {newer('samples', 3)}"):
        cut_after(path, 0)
    assert path.read_bytes() == before  # a refused cut changes nothing
    page = RunDir(tmp_path).sample_page(1)
    assert page["rows"] == 2 and len(page["bad_rows"]) == 1
    assert re.match(rf"samples.jsonl line 3: {newer('samples', 3)}", page["bad_rows"][0]), page["bad_rows"]


def test_a_newer_checkpoint_is_refused_by_resume_before_it_writes(tmp_path):
    run = _run_with_checkpoint(tmp_path)
    state = run / "checkpoints" / "step-2" / "driver.json"
    state.write_text(json.dumps({"step": 2, "stream": {"epoch": 0, "index": 8}, "format": 5}))
    before = _tree(run)
    with pytest.raises(RunError, match=rf"^{re.escape(str(state))}: {newer('checkpoint', 5)}"):
        Recorder.create(_cfg(run), str(run))
    assert _tree(run) == before


# --------------------------------------------------------------------------- an eval directory

ROWS = [{"prompt": f"{i}+{i}?", "response": f"The answer is {2 * i}.", "human_score": 1} for i in range(3)]


@pytest.fixture
def evaluated(tmp_path, monkeypatch):
    """A finished ``grm eval`` of a pointwise judge on a scripted engine over 3 items: its out dir."""
    monkeypatch.setattr(report, "_plots", lambda out, results, names: [])
    monkeypatch.setattr("grm.judges.engine_slot.shared_engine", lambda model, spec: ScriptedEngine(lambda *a: "Score: 7"))
    (tmp_path / "t.j2").write_text("{# expects: prompt, response #}Q: {{ prompt }} A: {{ response }}")
    spec = "name: pw\nmode: pointwise\nmodel: m\ntemplate: t.j2\nparser: {type: regex, range: [0, 10]}\n"
    (tmp_path / "pw.yaml").write_text(spec)
    (tmp_path / "d.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    res = eval_cli(tmp_path, tmp_path / "ev")
    assert res.code == 0, res.err
    return tmp_path / "ev"


def eval_cli(base, out):
    return run_cli("eval", str(base / "pw.yaml"), "--data", str(base / "d.jsonl"), "--out", str(out))


def _lines(path):
    return [json.loads(x) for x in path.read_text().splitlines()]


def _write(path, lines):
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))


def test_results_read_back_and_an_unversioned_line_is_migrated_by_rescore(evaluated):
    lines = _lines(evaluated / "results.jsonl")
    assert [list(x)[-1] for x in lines] == ["format"] * 3 and {x["format"] for x in lines} == {FORMATS["results"]}
    old = {k: v for k, v in lines[0].items() if k not in ("format", "truncated", "one_order_failed", "judge_directed", "cost")}
    _write(evaluated / "results.jsonl", [old, *lines[1:]])  # line 1 as an older grm wrote it
    assert run_cli("rescore", str(evaluated)).code == 0
    rescored = _lines(evaluated / "results.rescored.jsonl")
    assert {x["format"] for x in rescored} == {FORMATS["results"]}
    assert (rescored[0]["truncated"], rescored[0]["judge_directed"], rescored[0]["cost"]) == (0, 0, None)
    assert rescored[1]["cost"] == lines[1]["cost"] and rescored[1]["cost"] is not None
    assert eval_cli(evaluated.parent, evaluated).code == 0  # the eval's resume reads it too: nothing to redo
    assert EvalDir(evaluated).summary()["bad_rows"] == []


def test_a_newer_results_line_is_named_by_eval_resume_rescore_and_the_viewer(evaluated):
    path = evaluated / "results.jsonl"
    lines = _lines(path)
    lines[1]["format"] = FORMATS["results"] + 1
    _write(path, lines)
    for res in (eval_cli(evaluated.parent, evaluated), run_cli("rescore", str(evaluated))):
        assert_clean_failure(res, path)
        assert re.search(rf"{re.escape(str(path))}:2: {newer('results', FORMATS['results'] + 1)}", res.err), res.err
    assert not (evaluated / "results.rescored.jsonl").exists()
    (bad,) = EvalDir(evaluated).summary()["bad_rows"]
    assert re.match(rf"results.jsonl line 2: {newer('results', FORMATS['results'] + 1)}", bad), bad
