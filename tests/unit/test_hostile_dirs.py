"""Directories and files grm did not write, read and written as an attacker would plant them (issue
#39): grm never writes, cuts or locks a file through a link, never blocks on a FIFO a directory's own
files name, and never reads a file outside a saved data set; hostile text in data and specs is
refused by its file and line, not carried to a traceback."""

import json
import os
import socket
import threading
from pathlib import Path

import pytest

from grm.base import LOCK_FILE, GrmError, atomic_write_bytes, atomic_write_text, make_dir, regular_file_bytes, writer_lock
from grm.data.errors import DataError
from grm.data.sources import load_rows
from grm.jsonl import JsonlError, append_jsonl, read_jsonl
from grm.orchestrator.checkpoints import driver_state
from grm.orchestrator.errors import RunError
from grm.orchestrator.resume import cut_after
from grm.report_files import figure_png, new_figure
from tests.unit.evaluation.test_eval_files import eval_cli, evaluated  # noqa: F401  (a fixture)
from tests.unit.fuzz.support import assert_clean_failure, run_cli

SECRET = b"secret: do not touch\n"


@pytest.fixture
def canary(tmp_path):
    """A file outside every directory grm is given; each test checks it is never changed."""
    (tmp_path / "outside").mkdir()
    c = tmp_path / "outside" / "canary"
    c.write_bytes(SECRET)
    yield c
    assert c.read_bytes() == SECRET


def planted(directory, name, target):
    directory.mkdir(parents=True, exist_ok=True)
    link = directory / name
    link.symlink_to(target)
    return link


# --------------------------------------------------------------------------- writers


def test_appends_cuts_and_locks_refuse_a_planted_link(tmp_path, canary):
    d = tmp_path / "run"
    for name in ("samples.jsonl", "metrics.jsonl", LOCK_FILE):
        planted(d, name, canary)
    with pytest.raises(GrmError, match="samples.jsonl: is a symbolic link"):
        append_jsonl(d / "samples.jsonl", [{"a": 1}])
    with pytest.raises(GrmError, match=f"{LOCK_FILE}: is a symbolic link"):
        with writer_lock(d, "grm eval"):
            pass
    with pytest.raises(RunError, match="metrics.jsonl: is a symbolic link"):
        cut_after(d / "metrics.jsonl", 0)
    other = canary.with_name("other.jsonl")
    other.write_bytes(b'{"a": 1}\n{"torn')  # a repairing read would cut the torn tail off the target
    planted(d, "results.jsonl", other)
    with pytest.raises(JsonlError, match="results.jsonl: is a symbolic link"):
        read_jsonl(d / "results.jsonl")
    assert other.read_bytes() == b'{"a": 1}\n{"torn'
    assert read_jsonl(d / "results.jsonl", repair=False) == [{"a": 1}]  # reading through it is no write


def test_a_dangling_link_is_not_followed_to_create_its_target(tmp_path):
    d = tmp_path / "run"
    planted(d, "samples.jsonl", tmp_path / "created-elsewhere")
    with pytest.raises(GrmError, match="symbolic link"):
        append_jsonl(d / "samples.jsonl", [{"a": 1}])
    assert not (tmp_path / "created-elsewhere").exists()


def test_whole_file_writes_replace_a_planted_link_and_leave_its_target(tmp_path, canary):
    d = tmp_path / "ev"
    for name in ("report.md", "metrics.json", "hist-j.png"):
        planted(d, name, canary)
    atomic_write_text(d / "report.md", "# report\n")
    atomic_write_bytes(d / "metrics.json", b"{}")
    fig, ax = new_figure(figsize=(2, 2))
    ax.plot([0, 1], [0, 1])
    atomic_write_bytes(d / "hist-j.png", figure_png(fig))
    assert not any((d / n).is_symlink() for n in ("report.md", "metrics.json", "hist-j.png"))
    assert (d / "report.md").read_text() == "# report\n"
    assert (d / "hist-j.png").read_bytes().startswith(b"\x89PNG")


@pytest.mark.parametrize("kind", ["fifo", "dir"])
def test_a_fifo_or_directory_where_grm_keeps_a_file_is_refused_without_blocking(tmp_path, kind):
    d = tmp_path / "ev"
    d.mkdir()
    for name in (LOCK_FILE, "results.jsonl", "metrics.json"):
        os.mkfifo(d / name) if kind == "fifo" else (d / name).mkdir()
    done = []

    def attempts():
        with pytest.raises(GrmError, match=LOCK_FILE):
            with writer_lock(d, "grm eval"):
                pass
        with pytest.raises(GrmError, match="results.jsonl"):
            append_jsonl(d / "results.jsonl", [{"a": 1}])
        if kind == "dir":
            with pytest.raises(GrmError, match="metrics.json: is a directory"):
                atomic_write_text(d / "metrics.json", "{}")
        done.append(True)

    t = threading.Thread(target=attempts, daemon=True)
    t.start()
    t.join(10)
    assert done == [True], "a writer blocked on a FIFO (or failed)"


def test_an_out_dir_that_cannot_be_made_is_a_message(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(GrmError, match="exists and is not a directory"):
        make_dir(tmp_path / "f")
    with pytest.raises(GrmError, match="cannot create"):
        make_dir("/proc/grm-test-out")


def test_grm_eval_and_rescore_never_write_through_links_in_their_out_dir(evaluated, canary):  # noqa: F811
    for name in ("report.md", LOCK_FILE):
        (evaluated / name).unlink(missing_ok=True)
        planted(evaluated, name, canary)
    res = run_cli("rescore", str(evaluated))
    assert_clean_failure(res, evaluated / LOCK_FILE)
    (evaluated / LOCK_FILE).unlink()
    res = run_cli("rescore", str(evaluated))
    assert res.code == 0, res.err
    assert not (evaluated / "report.md").is_symlink()
    (evaluated / "results.jsonl").rename(evaluated / "results.real")
    planted(evaluated, "results.jsonl", canary)
    res = eval_cli(evaluated.parent / "d.jsonl", evaluated)
    assert_clean_failure(res, evaluated / "results.jsonl")


# --------------------------------------------------------------------------- readers


def test_a_checkpoint_file_that_is_a_fifo_or_too_large_is_refused(tmp_path):
    ckpt = tmp_path / "step-1"
    ckpt.mkdir()
    os.mkfifo(ckpt / "driver.json")
    with pytest.raises(RunError, match="driver.json: not a regular file"):
        driver_state(ckpt)
    (ckpt / "driver.json").unlink()
    (ckpt / "driver.json").symlink_to("/dev/zero")  # a checkpoint's own file: a link there is refused as one
    with pytest.raises(RunError, match="driver.json: is a symbolic link"):
        driver_state(ckpt)


def test_regular_file_bytes_refuses_past_its_limit_unread(tmp_path):
    f = tmp_path / "big"
    f.write_bytes(b"x" * 1001)
    with pytest.raises(GrmError, match="1001 bytes, more than the 1000"):
        regular_file_bytes(f, limit=1000)
    assert regular_file_bytes(f, limit=2000) == b"x" * 1001


def saved_dataset(tmp_path, filenames):
    ds = tmp_path / "ds"
    ds.mkdir()
    (ds / "dataset_info.json").write_text("{}")
    (ds / "state.json").write_text(json.dumps({"_data_files": [{"filename": f} for f in filenames], "_split": None}))
    return ds


@pytest.mark.parametrize("name", ["../fifo.arrow", "/etc/hostname", "", "a/../../x"])
def test_a_saved_dataset_naming_a_file_outside_itself_is_refused(tmp_path, name):
    os.mkfifo(tmp_path / "fifo.arrow")  # load_from_disk would block on it for good, past Ctrl-C
    ds = saved_dataset(tmp_path, [name])
    with pytest.raises(DataError, match="state.json: data file .* is not a file name inside"):
        load_rows(str(ds))


def test_a_saved_dataset_whose_file_is_a_fifo_or_leads_to_one_is_refused(tmp_path):
    ds = saved_dataset(tmp_path, ["data-00000-of-00001.arrow", "b.arrow"])
    os.mkfifo(tmp_path / "fifo")
    (ds / "data-00000-of-00001.arrow").symlink_to(tmp_path / "fifo")
    with pytest.raises(DataError, match="data-00000-of-00001.arrow: not a regular file"):
        load_rows(str(ds))
    (ds / "data-00000-of-00001.arrow").unlink()
    (ds / "data-00000-of-00001.arrow").write_bytes(b"")
    os.mkfifo(ds / "b.arrow")
    with pytest.raises(DataError, match="b.arrow: not a regular file"):
        load_rows(str(ds))


def test_a_split_list_beside_a_top_level_state_cannot_hide_it(tmp_path):
    os.mkfifo(tmp_path / "fifo.arrow")
    ds = saved_dataset(tmp_path, ["../fifo.arrow"])  # what datasets reads when state.json is at the top
    (ds / "dataset_dict.json").write_text('{"splits": ["train"]}')
    (ds / "train").mkdir()
    with pytest.raises(DataError, match="is not a file name inside"):
        load_rows(str(ds))
    os.mkfifo(ds / "dataset_info.json.fifo")
    (ds / "dataset_info.json").unlink()
    (ds / "dataset_info.json").symlink_to(ds / "dataset_info.json.fifo")
    with pytest.raises(DataError, match="dataset_info.json: not a regular file"):
        load_rows(str(ds))


def test_a_real_saved_dataset_still_loads(tmp_path):
    import datasets

    datasets.Dataset.from_list([{"prompt": "a"}, {"prompt": "b"}]).save_to_disk(str(tmp_path / "real"))
    assert [r["prompt"] for r in load_rows(str(tmp_path / "real"))] == ["a", "b"]
    datasets.DatasetDict({"train": datasets.Dataset.from_list([{"prompt": "c"}])}).save_to_disk(str(tmp_path / "dd"))
    assert [r["prompt"] for r in load_rows(str(tmp_path / "dd"))] == ["c"]


def test_a_rescore_does_not_hash_a_file_its_record_names(evaluated, tmp_path):  # noqa: F811
    import yaml

    rec = evaluated / "config.resolved.yaml"
    record = yaml.safe_load(rec.read_text())
    (tmp_path / "other.j2").write_text("{# expects: response #}{{ response }} (another file)")
    record["judges"][0]["base_dir"] = str(tmp_path)
    record["judges"][0]["spec"]["template"] = "other.j2"
    rec.write_text(yaml.safe_dump(record))
    res = run_cli("rescore", str(evaluated))
    assert_clean_failure(res, rec)
    assert "template files are not the ones" in res.err
    assert not (evaluated / "results.rescored.jsonl").exists()


# --------------------------------------------------------------------------- text


@pytest.mark.parametrize(
    "name,raw,line",
    [
        ("d.jsonl", b'{"prompt": "a"}\n{"prompt": "x\\ud800y"}\n', 2),
        ("d.jsonl", b'{"prompt": "a", "meta": {"k": ["\\udc00"]}}\n', 1),
        ("d.json", b'[\n{"prompt": "a"},\n{"prompt": "\\ud83d"}\n]', 3),
    ],
)
def test_a_lone_surrogate_in_data_is_refused_by_its_line(tmp_path, name, raw, line):
    (tmp_path / name).write_bytes(raw)
    with pytest.raises(DataError, match=rf"{name}:{line}: a string holds a lone UTF-16 surrogate"):
        load_rows(str(tmp_path / name))


def test_a_surrogate_pair_is_text(tmp_path):
    (tmp_path / "d.jsonl").write_bytes(b'{"prompt": "\\ud83d\\ude00"}\n')
    assert load_rows(str(tmp_path / "d.jsonl")) == [{"prompt": "\U0001f600"}]


@pytest.mark.parametrize(
    "raw,needle",
    [
        (b'{"prompt": "a", "prompt": "b"}\n', "d.jsonl:1: invalid JSON: duplicate key 'prompt'"),
        (b'{"prompt": "a", "n": ' + b"1" * 5000 + b"}\n", "d.jsonl:1: invalid JSON: a number of more than 4300 digits"),
    ],
)
def test_json_rows_with_a_key_twice_or_a_huge_number_get_a_short_message(tmp_path, raw, needle):
    (tmp_path / "d.jsonl").write_bytes(raw)
    with pytest.raises(DataError) as e:
        load_rows(str(tmp_path / "d.jsonl"))
    assert needle in str(e.value) and len(str(e.value)) < 300


@pytest.mark.parametrize("value", [True, "1_000", "\u0661", "infinity"])
def test_a_human_score_that_is_not_a_plain_number_is_refused(tmp_path, value):
    (tmp_path / "d.jsonl").write_text(json.dumps({"prompt": "p", "response": "r", "human_score": value}) + "\n")
    (tmp_path / "pw.yaml").write_text("name: pw\nmode: rule\nrule: {type: length}\n")
    res = run_cli("eval", str(tmp_path / "pw.yaml"), "--data", str(tmp_path / "d.jsonl"), "--out", str(tmp_path / "o"))
    assert_clean_failure(res, tmp_path / "d.jsonl")
    assert "human_score must be a finite number" in res.err


@pytest.mark.parametrize("end", ["\n", "\r\n", "\r"])
def test_yaml_errors_after_a_unicode_line_separator_name_the_file_line(tmp_path, end):
    f = tmp_path / "p.yaml"
    text = 'name: x\nsystem: "a\u2028b\u2029c\x85d"\nmodel: m\nbogus: 1\n'.replace("\n", end)
    f.write_bytes(text.encode("utf-8"))
    res = run_cli("validate", str(f))
    assert_clean_failure(res, f)
    assert f"{f}:4:" in res.err and "bogus" in res.err, res.err


@pytest.mark.parametrize("value,needle", [("!!binary YWJj", "!!binary is not used"), ("1" * 5000, "more than 4300 digits")])
def test_yaml_values_grm_does_not_read_are_refused_briefly(tmp_path, value, needle):
    f = tmp_path / "p.yaml"
    f.write_text(f"name: x\nmodel: m\nseed: {value}\n")
    res = run_cli("validate", str(f))
    assert_clean_failure(res, f)
    assert needle in res.err and len(res.err) < 400, res.err


def test_a_view_that_cannot_bind_is_a_message(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "metrics.jsonl").write_text('{"step": 1, "reward": 0.5}\n')
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    try:
        res = run_cli("view", str(tmp_path / "run"), "--port", str(s.getsockname()[1]))
    finally:
        s.close()
    assert res.code != 0 and "Traceback" not in res.err and "cannot listen" in res.err, res.err


# --------------------------------------------------------------------------- specs and samples

JUDGE = "name: pw\nmode: pointwise\nmodel: m\ntemplate: t.j2\nparser: {type: regex, range: [0, 10]}\n"


@pytest.mark.parametrize(
    "template,needle",
    [
        ("{% if %}", "template syntax error"),
        ("{% include 'x.j2' %}{{ response }}", "include, import and extends are not supported"),
        ("{% extends '/etc/passwd' %}", "include, import and extends are not supported"),
    ],
)
def test_validate_and_run_refuse_a_template_that_does_not_compile(tmp_path, template, needle):
    (tmp_path / "t.j2").write_text("{# expects: response #}" + template)
    (tmp_path / "pw.yaml").write_text(JUDGE)
    res = run_cli("validate", str(tmp_path / "pw.yaml"))
    assert_clean_failure(res, tmp_path / "t.j2")
    assert needle in res.err
    pipe = tmp_path / "pipe.yaml"
    text = (Path(__file__).parents[2] / "pipelines" / "quickstart.yaml").read_text()
    pipe.write_text(text)
    res = run_cli("run", str(pipe), f"judges.0.spec={tmp_path / 'pw.yaml'}")
    assert_clean_failure(res, tmp_path / "t.j2")  # before Ray starts: the message is the template's


@pytest.mark.parametrize(
    "body,needle",
    [
        ("{{ 1/0 }}", "ZeroDivisionError"),
        ("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", "RecursionError"),
        ("{{ range(1, 2, 0) | list }}", "ValueError"),
    ],
)
def test_lint_reports_a_template_that_fails_whatever_the_data(tmp_path, body, needle):
    (tmp_path / "t.j2").write_text("{# expects: response #}" + body + "{{ response }} Score: 0-10")
    (tmp_path / "pw.yaml").write_text(JUDGE)
    res = run_cli("judge", "lint", str(tmp_path / "pw.yaml"))
    assert res.code != 0 and needle in res.out + res.err, res.out + res.err


def test_lint_leaves_a_field_the_made_up_sample_lacks_to_render(tmp_path):
    (tmp_path / "t.j2").write_text("{# expects: response, metadata #}{{ metadata.topic }} {{ response }} Score: 0-10")
    (tmp_path / "pw.yaml").write_text(JUDGE)
    res = run_cli("judge", "lint", str(tmp_path / "pw.yaml"))
    assert res.code == 0, res.out + res.err


def test_validate_refuses_set_with_several_files(tmp_path):
    res = run_cli("validate", "judges/pointwise-logprob.yaml", "judges/pairwise-logprob.yaml", "--set", "name=x")
    assert res.code != 0 and "--set applies to one file" in res.err


@pytest.mark.parametrize("source", ["/dev/zero", "/etc/hostname"])
def test_validate_refuses_prompts_that_are_no_data_file(source):
    res = run_cli("validate", "pipelines/quickstart.yaml", "--set", f"data.prompts={source}")
    assert res.code != 0 and "Traceback" not in res.err and source in res.err, res.err


@pytest.mark.parametrize(
    "sample,needle",
    [
        ([], "an empty list"),
        ({"prompt": "p", "prompt ": 1}, None),
    ],
)
def test_judge_render_refuses_samples_it_would_misread(tmp_path, sample, needle):
    f = tmp_path / "s.json"
    f.write_text(json.dumps(sample))
    res = run_cli("judge", "render", "judges/pointwise-logprob.yaml", "--sample", str(f))
    if needle is None:
        assert "Traceback" not in res.err
        return
    assert_clean_failure(res, f)
    assert needle in res.err


# --------------------------------------------------------------------------- checkpoints and stores


class _RunsCode:
    def __reduce__(self):
        return (open, (str(_RunsCode.witness), "w"))


def test_a_checkpoint_whose_pickle_names_code_is_refused_unloaded(tmp_path):
    import torch

    from grm.models.checkpoints import CheckpointError, raw_checkpoint_state, refuse_foreign_pickles

    _RunsCode.witness = tmp_path / "ran"
    state = tmp_path / "step-1" / "policy" / "state"
    state.mkdir(parents=True)
    torch.save({"module": _RunsCode()}, state / "mp_rank_00_model_states.pt")
    with pytest.raises(CheckpointError, match="mp_rank_00_model_states.pt: its pickle names '.*open'"):
        raw_checkpoint_state(tmp_path / "step-1")
    assert not _RunsCode.witness.exists()
    (state / "mp_rank_00_model_states.pt").write_text("garbage")
    with pytest.raises(CheckpointError, match="not a checkpoint file grm can read"):
        raw_checkpoint_state(tmp_path / "step-1")
    import numpy as np

    torch.save({"module": {"w": torch.ones(2)}, "rng": np.random.get_state()}, state / "mp_rank_00_model_states.pt")
    refuse_foreign_pickles(state)  # tensors, plain values and numpy's RNG state are what trainers save
    assert torch.equal(raw_checkpoint_state(tmp_path / "step-1")["w"], torch.ones(2))


def test_a_link_planted_among_checkpoints_is_never_taken_for_one(tmp_path, canary):
    from grm.orchestrator.checkpoints import complete_checkpoints

    elsewhere = canary.parent / "ck2"
    elsewhere.mkdir()
    (elsewhere / "COMPLETE").write_text("ok\n")
    root = tmp_path / "run" / "checkpoints"
    planted(root, ".step-2.tmp", elsewhere)  # what a crash between a checkpoint's renames leaves, as a link
    assert complete_checkpoints(root) == []
    assert not (root / "step-2").exists() and (elsewhere / "COMPLETE").exists()
    planted(root, "step-3", elsewhere)
    with pytest.raises(RunError, match="step-3: is a symbolic link"):
        complete_checkpoints(root)
    (root / "step-3").unlink()
    root.rmdir()
    root.symlink_to(elsewhere)
    with pytest.raises(RunError, match="checkpoints: is a symbolic link"):
        complete_checkpoints(root)


def test_discard_dir_removes_a_link_not_its_target(tmp_path, canary):
    from grm.base import discard_dir, own_dir

    link = planted(tmp_path / "gate", "judge", canary.parent)
    with pytest.raises(GrmError, match="is a symbolic link"):
        own_dir(link)
    discard_dir(link)
    assert not link.exists() and canary.exists()


def test_the_model_store_lock_and_hash_follow_no_link(tmp_path, canary, monkeypatch):
    from grm.models.store import ModelStoreError, sha256_file, store_lock

    monkeypatch.setenv("GRM_HOME", str(tmp_path / "home"))
    planted(tmp_path / "home" / "locks", "m.lock", canary)
    with pytest.raises(ModelStoreError, match="m.lock: is a symbolic link"):
        with store_lock("m"):
            pass
    with pytest.raises(ModelStoreError, match="is a symbolic link"):
        sha256_file(planted(tmp_path / "home" / "gguf", "m.gguf", canary))


def test_a_rescore_record_naming_a_file_outside_does_not_quote_it(evaluated, canary):  # noqa: F811
    import yaml

    secret = canary.with_name("secret.j2")
    secret.write_text("hello\n{% CANARYWORD_s3cr3t %}\n")
    rec = evaluated / "config.resolved.yaml"
    record = yaml.safe_load(rec.read_text())
    record["judges"][0]["spec"]["template"] = str(secret)
    rec.write_text(yaml.safe_dump(record))
    res = run_cli("rescore", str(evaluated))
    assert_clean_failure(res, rec)
    assert "CANARYWORD" not in res.err + res.out


def test_export_refuses_an_out_among_checkpoints_reached_through_a_link(tmp_path):
    from grm.evaluation.export import ExportError, check_out

    real = tmp_path / "real" / "checkpoints"
    real.mkdir(parents=True)
    run = tmp_path / "run"
    run.mkdir()
    (run / "checkpoints").symlink_to(real)
    with pytest.raises(ExportError, match="among its checkpoints"):
        check_out(real, True, run)


def test_a_judge_cache_of_rows_grm_never_wrote_is_skipped_line_by_line(tmp_path):
    from grm.config import load_judge
    from grm.orchestrator.judge_cache import DIR, JudgeCache

    spec = load_judge("judges/pointwise-logprob.yaml")
    (tmp_path / DIR).mkdir()
    (tmp_path / DIR / f"{spec.name}.jsonl").write_bytes(b'[1]\n"x"\n' + b"[" * 100_000 + b'\n{"spec": 1}\n')
    assert len(JudgeCache.open(spec, tmp_path).entries) == 0


def test_an_empty_policy_is_named_not_read_as_the_current_directory(tmp_path):
    res = run_cli("eval", "--policy", "", "--prompts", "builtin:arith-prompts", "--out", str(tmp_path / "o"))
    assert res.code != 0 and "--policy is empty" in res.err, res.err


META = (
    "name: {name}\nmode: pointwise\nmodel: smollm2-135m-instruct\ntemplate: builtin:pointwise-score\n"
    "sampling: {{n: 2, temperature: 0.7, max_new_tokens: 8}}\nparser: {{type: regex, range: [1, 10]}}\n"
    "aggregate: {{type: meta, meta_judge: {other}.yaml, top_k: 1}}\n"
)


@pytest.mark.parametrize("cycle", ["self", "two"])
def test_a_meta_judge_cycle_is_a_message_in_validate_lint_and_render(tmp_path, cycle):
    for name, other in (("a", "a" if cycle == "self" else "b"), ("b", "a")):
        (tmp_path / f"{name}.yaml").write_text(META.format(name=name, other=other))
    f, sample = tmp_path / "a.yaml", tmp_path / "s.json"
    sample.write_text('{"prompt": "p", "response": "r"}')
    for argv in (["validate", str(f)], ["judge", "lint", str(f)], ["judge", "render", str(f), "--sample", str(sample)]):
        res = run_cli(*argv)
        text = res.err + res.out
        assert res.code != 0 and "Traceback" not in text and "a cycle" in text, (argv, text)


def test_a_parser_target_that_is_not_a_function_is_refused_when_built(tmp_path, monkeypatch):
    (tmp_path / "t.j2").write_text("{# expects: response #}{{ response }}")
    (tmp_path / "usermod_inf.py").write_text("import math\nINF = math.inf\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    (tmp_path / "pw.yaml").write_text(
        "name: pw\nmode: pointwise\nmodel: m\ntemplate: t.j2\nparser: {type: target, target: 'usermod_inf:INF', range: [1, 10]}\n"
    )
    res = run_cli("validate", str(tmp_path / "pw.yaml"))
    assert res.code != 0 and "not a function" in res.err, res.err


def test_ctrl_c_while_a_served_judge_waits_exits_at_once(tmp_path):
    import signal
    import subprocess
    import sys
    import time

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()  # accepts (the kernel's backlog) and never answers
    port = listener.getsockname()[1]
    (tmp_path / "served.yaml").write_text(
        "name: served\nmode: pointwise\nmodel: m\n"
        f"engine: {{type: openai, base_url: 'http://127.0.0.1:{port}/v1', endpoint: chat, timeout_s: 100, max_retries: 1}}\n"
        "template: builtin:helpfulness-pointwise\nparser: {type: regex, pattern: 'Score: (\\d+)', range: [1, 10]}\n"
    )
    (tmp_path / "s.json").write_text('{"prompt": "What is 2+2?", "response": "4"}')
    p = subprocess.Popen(
        [sys.executable, "-m", "grm", "judge", "try", str(tmp_path / "served.yaml"), "--sample", str(tmp_path / "s.json")],
        cwd=Path(__file__).parents[2],
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        time.sleep(4)  # the request is in flight
        p.send_signal(signal.SIGINT)
        t0 = time.monotonic()
        err = p.communicate(timeout=20)[1]
        assert time.monotonic() - t0 < 5 and p.returncode == 130, err
        assert "interrupted" in err and "Traceback" not in err
    finally:
        p.kill()
        listener.close()


def test_a_checkpoint_whose_state_is_a_linked_directory_is_refused(tmp_path):
    import torch

    from grm.models.checkpoints import CheckpointError, refuse_foreign_pickles

    _RunsCode.witness = tmp_path / "ran"
    (tmp_path / "elsewhere").mkdir()
    torch.save({"module": _RunsCode()}, tmp_path / "elsewhere" / "mp_rank_00_model_states.pt")
    (tmp_path / "policy").mkdir()
    (tmp_path / "policy" / "state").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(CheckpointError, match="state: a symbolic link in a checkpoint"):
        refuse_foreign_pickles(tmp_path / "policy")
    assert not _RunsCode.witness.exists()


def test_a_recorded_judge_without_results_is_not_built_by_rescore(evaluated, canary):  # noqa: F811
    import yaml

    secret = canary.with_name("secret.j2")
    secret.write_text("{% CANARYWORD_s3cr3t %}\n")
    rec = evaluated / "config.resolved.yaml"
    record = yaml.safe_load(rec.read_text())
    extra = dict(record["judges"][0], name="extra")
    extra["spec"] = dict(extra["spec"], name="extra", template=str(secret))
    record["judges"].append(extra)
    rec.write_text(yaml.safe_dump(record))
    res = run_cli("rescore", str(evaluated))
    assert "CANARYWORD" not in res.err + res.out
    assert res.code == 0, res.err


def test_served_text_keeps_its_urls_and_loses_only_the_key():
    from grm.engines.credentials import Credentials

    c = Credentials()
    c.bind("http://127.0.0.1:1/v1", "sk-abcdef123456")
    text = "clone ssh://git@example.com/x or https://u@h/y; the key sk-abcdef123456"
    assert c.redact_secrets(text) == "clone ssh://git@example.com/x or https://u@h/y; the key [redacted]"
    assert c.redact_cut("too many requests") == "too many requests"  # a one-letter end is no key


def test_a_rescore_record_with_a_backtracking_pattern_and_a_huge_time_limit_ends_in_seconds(evaluated):  # noqa: F811
    import time

    import yaml

    rec = evaluated / "config.resolved.yaml"
    record = yaml.safe_load(rec.read_text())
    spec = record["judges"][0]["spec"]
    spec["parser"]["pattern"] = r"(?s)(?:.*?=){5}z(\d)"  # polynomial, not refused as exponential
    for limit, named in ((1_000_000, "limits.regex_timeout_s"), (60, "timed out on 3 stored outputs")):
        spec["limits"]["regex_timeout_s"] = limit
        rec.write_text(yaml.safe_dump(record))
        results = evaluated / "results.jsonl"
        lines = [json.loads(s) for s in results.read_text().splitlines()]
        for line in lines:
            for r in line["results"]:
                for smp in r["samples"]:
                    smp["text"] = "=" * 400
        results.write_text("".join(json.dumps(ln) + "\n" for ln in lines))
        t0 = time.perf_counter()
        res = run_cli("rescore", str(evaluated))
        assert_clean_failure(res, or_names=named)
        assert time.perf_counter() - t0 < 10, res.err


@pytest.mark.parametrize("name", ["results.jsonl", "config.resolved.yaml"])
def test_eval_and_rescore_read_no_file_of_their_directory_through_a_planted_link(evaluated, tmp_path, name):  # noqa: F811
    outside = tmp_path / "outside-copy"
    outside.write_bytes((evaluated / name).read_bytes())  # a valid file: only the link is wrong
    (evaluated / name).unlink()
    (evaluated / name).symlink_to(outside)
    for res in (run_cli("rescore", str(evaluated)), eval_cli(tmp_path / "d.jsonl", evaluated)):
        assert_clean_failure(res, evaluated / name)
        assert "is a symbolic link" in res.err, res.err
