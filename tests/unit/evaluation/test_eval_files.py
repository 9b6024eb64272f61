"""An eval directory read back (issue #39): a damaged results.jsonl line is named ``FILE:LINE`` by
every reader (resume, rescore), only a torn last line is dropped, and a running ``grm eval`` holds
its directory so no ``grm rescore`` or second ``grm eval`` cuts the line it is writing."""

import json
import subprocess
import sys
import textwrap
import time

import pytest
import yaml

from grm.base import LOCK_FILE, writer_lock
from grm.evaluation import report
from grm.evaluation.rescore import rescore
from grm.evaluation.runner import EvalError
from grm.jsonl import JsonlError, read_jsonl
from grm.orchestrator.recorder import Recorder
from tests.unit.fuzz.support import assert_clean_failure, run_cli
from tests.unit.judges.fake_engine import ScriptedEngine

ROWS = [
    {"prompt": f"{i}+{i}?", "response": f"The answer is {2 * i}.", "reference": str(2 * i), "human_score": 1} for i in range(3)
]


@pytest.fixture
def evaluated(tmp_path, monkeypatch):
    """A finished ``grm eval`` of a pointwise judge on a scripted engine over 3 items: its out dir."""
    monkeypatch.setattr(report, "_plots", lambda out, results, names: [])
    monkeypatch.setattr("grm.judges.engine_slot.shared_engine", lambda model, spec: ScriptedEngine(lambda *a: "Score: 7"))
    (tmp_path / "t.j2").write_text("{# expects: prompt, response #}Q: {{ prompt }} A: {{ response }}")
    (tmp_path / "pw.yaml").write_text(
        "name: pw\nmode: pointwise\nmodel: m\ntemplate: t.j2\nparser: {type: regex, range: [0, 10]}\n"
    )
    (tmp_path / "d.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    res = eval_cli(tmp_path / "d.jsonl", tmp_path / "ev")
    assert res.code == 0, res.err
    return tmp_path / "ev"


def eval_cli(data, out, *extra):
    return run_cli("eval", str(data.parent / "pw.yaml"), "--data", str(data), "--out", str(out), *extra)


def lines_of(path):
    return path.read_bytes().split(b"\n")


def test_a_torn_last_line_is_dropped_and_cut_only_by_a_repairing_read(tmp_path):
    path = tmp_path / "r.jsonl"
    whole = b'{"a": "x\xe2\x80\xa8y"}\n{"a": 2}\n'  # a raw U+2028 inside a string is no line end
    path.write_bytes(whole + b'{"a": 3, "b')
    assert read_jsonl(path, repair=False) == [{"a": "x\u2028y"}, {"a": 2}]
    assert path.read_bytes() == whole + b'{"a": 3, "b'  # a reader (grm view, rescore) cuts nothing
    assert read_jsonl(path) == [{"a": "x\u2028y"}, {"a": 2}]
    assert path.read_bytes() == whole


@pytest.mark.parametrize(
    ("bad", "needle"),
    [
        (b'{"a": 1', "invalid JSON: Expecting ',' delimiter"),
        (b"\x00\x00\x00", "invalid JSON: Expecting value"),
        (b'{"a": "\xff"}', "not valid UTF-8 (byte 0xff at column 8)"),
        (b"[1, 2]", "expected a JSON object"),
        (b"9" * 5000, "invalid JSON: a number of more than 4300 digits"),
        (b"[" * 100_000, "invalid JSON: nested too deeply"),
    ],
)
def test_a_damaged_line_before_the_last_is_named_and_the_file_left_as_found(tmp_path, bad, needle):
    path = tmp_path / "r.jsonl"
    content = b'{"a": 1}\n\n' + bad + b'\n{"a": 2}\n{"torn'
    path.write_bytes(content)
    with pytest.raises(JsonlError) as e:
        read_jsonl(path)
    assert str(e.value).startswith(f"{path}:3: ") and needle in str(e.value) and "mend or delete" in str(e.value)
    assert "\n" not in str(e.value)
    assert path.read_bytes() == content  # not even the torn tail is cut from a damaged file


@pytest.mark.parametrize(
    ("line", "needle"),
    [
        (b"{}", "field 'judge': Field required"),
        (b'"a string"', "expected a JSON object"),
        (b"not json", "invalid JSON"),
    ],
)
def test_resume_and_rescore_name_a_damaged_results_line(evaluated, line, needle):
    results = evaluated / "results.jsonl"
    rows = lines_of(results)
    results.write_bytes(b"\n".join([rows[0], line, *rows[1:]]))
    for res in (eval_cli(evaluated.parent / "d.jsonl", evaluated), run_cli("rescore", str(evaluated))):
        assert_clean_failure(res, results)
        assert f"{results}:2: " in res.err and needle.split("(")[0] in res.err, res.err


def test_a_results_line_of_the_wrong_types_is_named_not_summed(evaluated):
    results = evaluated / "results.jsonl"
    rows = [json.loads(x) for x in lines_of(results) if x]
    rows[2]["tokens"] = "many"
    results.write_text("".join(json.dumps(r) + "\n" for r in rows))
    res = run_cli("rescore", str(evaluated))
    assert_clean_failure(res, results)
    assert f"{results}:3: field 'tokens': Input should be a valid integer" in res.err, res.err


def test_rescore_leaves_a_torn_tail_to_the_eval_that_resumes(evaluated):
    results = evaluated / "results.jsonl"
    torn = results.read_bytes() + b'{"judge": "pw", "item'
    results.write_bytes(torn)
    assert run_cli("rescore", str(evaluated)).code == 0
    assert results.read_bytes() == torn
    assert len(read_jsonl(evaluated / "results.rescored.jsonl")) == 3
    assert eval_cli(evaluated.parent / "d.jsonl", evaluated).code == 0  # the writer repairs, then resumes
    assert results.read_bytes().endswith(b"}\n") and len(read_jsonl(results)) == 3


HOLDER = textwrap.dedent(
    """
    import sys
    from grm.base import writer_lock
    with writer_lock(sys.argv[1], "grm eval"):
        print("held", flush=True)
        sys.stdin.read()  # until the test closes our stdin
    """
)


@pytest.mark.timeout(60)
def test_a_running_eval_holds_its_directory_against_rescore_and_a_second_eval(evaluated):
    results = evaluated / "results.jsonl"
    half = results.read_bytes() + b'{"judge": "pw", "it'  # the running eval is mid-line
    results.write_bytes(half)
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(evaluated)], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert holder.stdout.readline() == b"held\n"
        for res in (run_cli("rescore", str(evaluated)), eval_cli(evaluated.parent / "d.jsonl", evaluated)):
            assert res.code == 2 and "Traceback" not in res.err
            assert f"{evaluated} is being written by a running grm eval (pid {holder.pid})" in res.err, res.err
        assert results.read_bytes() == half  # nothing cut, nothing appended
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)
    assert run_cli("rescore", str(evaluated)).code == 0  # the lock went with its process


def test_the_lock_is_exclusive_within_a_process_and_a_leftover_lock_file_is_not_a_lock(tmp_path):
    (tmp_path / LOCK_FILE).write_text("grm eval (pid 999999999)\n")  # left by a process long gone
    with writer_lock(tmp_path, "grm rescore"):
        assert (tmp_path / LOCK_FILE).read_text() == f"grm rescore (pid {__import__('os').getpid()})\n"
        with pytest.raises(EvalError, match=rf"^{tmp_path} is being written by a running grm rescore \(pid \d+\)"):
            with writer_lock(tmp_path, "grm eval", EvalError):
                pass
    with writer_lock(tmp_path, "grm eval"):
        pass


def test_a_damaged_record_is_named_and_force_writes_it_anew(evaluated):
    record = evaluated / "config.resolved.yaml"
    record.write_text("data: x\njudges: [\n")
    res = run_cli("rescore", str(evaluated))
    assert_clean_failure(res, record)
    assert f"{record}:3: invalid YAML" in res.err and "--force writes it anew" in res.err, res.err
    assert_clean_failure(eval_cli(evaluated.parent / "d.jsonl", evaluated), record)
    assert eval_cli(evaluated.parent / "d.jsonl", evaluated, "--force").code == 0
    assert run_cli("rescore", str(evaluated)).code == 0
    record.write_text("judges: [{name: j, spec_sha256: abc, mode: pointwise}]\n")  # a policy evaluation's record
    with pytest.raises(EvalError, match="judge 'j' has no recorded spec; rescore re-reads judge evaluations"):
        rescore(evaluated)


def test_a_recorded_spec_that_no_longer_validates_is_named_not_a_traceback(evaluated):
    # an older grm (or a hand edit) recorded a judge spec today's rules refuse: a name with a space
    record = evaluated / "config.resolved.yaml"
    rec = yaml.safe_load(record.read_text())
    rec["judges"][0]["spec"]["name"] = "p w"
    record.write_text(yaml.safe_dump(rec))
    res = run_cli("rescore", str(evaluated))
    assert_clean_failure(res, record)
    assert "judge 'pw': its recorded spec no longer validates (name:" in res.err, res.err


def test_an_alias_bomb_in_the_record_is_refused_at_once_not_expanded(evaluated):
    # 10^8 values once expanded, where validating a target parser's options walks every one
    record = evaluated / "config.resolved.yaml"
    bomb = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    bomb += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)]
    spec = "{name: pw, mode: pointwise, parser: {type: target, target: 'json:loads', options: {k: *a8}}}"
    bomb.append(f"judges: [{{name: pw, spec_sha256: abc, base_dir: ., spec: {spec}}}]")
    record.write_text("\n".join(bomb) + "\n")
    t0 = time.perf_counter()
    res = run_cli("rescore", str(evaluated))
    assert time.perf_counter() - t0 < 10, "expanded the aliases"
    assert_clean_failure(res, record)
    assert "once its aliases are expanded" in res.err, res.err


def test_a_runs_metrics_log_names_a_damaged_line(tmp_path):
    rec = Recorder(tmp_path)
    (tmp_path / "metrics.jsonl").write_text('{"step": 1, "note": "a\u2028b"}\n{"step": 2}\n{"step": 3, "torn')
    assert rec.metrics() == [{"step": 1, "note": "a\u2028b"}, {"step": 2}]
    (tmp_path / "metrics.jsonl").write_text('{"step": 1}\n{"step": 2, oops}\n{"step": 3}\n')
    with pytest.raises(JsonlError, match=rf"^{tmp_path / 'metrics.jsonl'}:2: invalid JSON"):
        rec.metrics()
    (tmp_path / "metrics.jsonl").write_text('{"step": 1}\n{"loss": 2}\n')
    with pytest.raises(JsonlError, match=rf"^{tmp_path / 'metrics.jsonl'}:2: no integer 'step' field"):
        rec.metrics()


@pytest.mark.parametrize(
    "hostile",
    [
        {"parser": {"type": "target", "target": "evil_module:run", "range": [1, 10]}},  # not imported: a record runs no code
        {"aggregate": {"type": "meta", "meta_judge": "pw.yaml"}},  # a spec outside the directory
    ],
)
def test_rescore_runs_no_code_an_eval_directory_names_unless_judge_replaces_it(evaluated, tmp_path, hostile, monkeypatch):
    record = evaluated / "config.resolved.yaml"
    rec = yaml.safe_load(record.read_text())
    rec["judges"][0]["spec"].update(hostile)
    record.write_text(yaml.safe_dump(rec))
    imported = []
    monkeypatch.setattr("importlib.import_module", lambda name, *a: imported.append(name))
    res = run_cli("rescore", str(evaluated))
    assert_clean_failure(res, record)
    assert "judge 'pw' names code to run" in res.err and "--judge" in res.err, res.err
    assert imported == []
    # a spec the user gives replaces it: rescoring goes on with nothing from the directory run
    res = run_cli("rescore", str(evaluated), "--judge", str(tmp_path / "pw.yaml"))
    assert res.code == 0, res.err
