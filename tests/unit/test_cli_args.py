"""Argument types of the command line (``grm.cli_args``): what each path and number argument takes,
and the one-line refusal of what it does not. The whole surface is fuzzed in
tests/unit/fuzz/test_cli_fuzz.py; these are the cases written out."""

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grm import cli_args as A
from grm.cli import build_parser
from tests.unit.fuzz.support import run_cli

ROOT = Path(__file__).resolve().parents[2]
ROOTED = os.geteuid() == 0  # root reads and writes whatever the mode bits say


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    (tmp_path / "f.yaml").write_text("a: 1\n")
    (tmp_path / "d").mkdir()
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    (tmp_path / "broken").symlink_to(tmp_path / "nowhere")
    (tmp_path / "to-fifo").symlink_to(tmp_path / "fifo")
    (tmp_path / "to-file").symlink_to(tmp_path / "f.yaml")
    return tmp_path


def refusal(check, value) -> str:
    with pytest.raises(argparse.ArgumentTypeError) as e:
        check(str(value))
    return str(e.value)


def test_a_file_argument_takes_a_readable_regular_file_or_a_link_to_one(tree):
    assert A.existing_file(str(tree / "f.yaml")) == str(tree / "f.yaml")
    assert A.existing_file(str(tree / "to-file")) == str(tree / "to-file")
    for name, why in [
        ("d", "is a directory, expected a regular file"),
        ("fifo", "is a FIFO (named pipe), expected a regular file"),
        ("to-fifo", "is a FIFO (named pipe)"),
        ("loop", "a symbolic link loop"),
        ("broken", f"a broken symbolic link (to {tree / 'nowhere'})"),
        ("missing", "no such file or directory"),
        ("f.yaml/x", "a part of the path before the last is not a directory"),
    ]:
        assert refusal(A.existing_file, tree / name) == f"{tree / name}: {why}" or why in refusal(A.existing_file, tree / name)
    assert refusal(A.existing_file, "/dev/null") == "/dev/null: is a character device, expected a regular file"
    assert refusal(A.existing_file, "") == "'': empty path"
    assert refusal(A.existing_file, "a\x00b") == "a\\x00b: a path cannot hold a NUL character"
    assert refusal(A.existing_file, "x" * 5000).endswith("...: file name too long")


def test_an_unreadable_file_or_directory_is_refused(tree, monkeypatch):
    (tree / "f.yaml").chmod(0)
    (tree / "d").chmod(0)
    if ROOTED:  # root may read and write anything: the access check answers as it would for a user
        monkeypatch.setattr(os, "access", lambda path, mode: False)
    assert "not readable" in refusal(A.existing_file, tree / "f.yaml")
    assert "not readable" in refusal(A.existing_dir, tree / "d")
    assert "not readable and writable" in refusal(A.out_dir, tree / "d")


def test_specs_and_data_sources_leave_builtin_names_to_the_loaders(tree):
    assert A.spec("builtin:anything") == "builtin:anything"
    assert A.data_source("builtin:arith-pairs") == "builtin:arith-pairs"
    assert A.data_source(str(tree / "d")) == str(tree / "d")  # a saved datasets directory
    assert "expected a regular file or a directory" in refusal(A.data_source, tree / "fifo")
    assert A.spec_list(f"builtin:a,{tree / 'f.yaml'}") == f"builtin:a,{tree / 'f.yaml'}"
    assert refusal(A.spec_list, f"builtin:a,{tree / 'd'}").startswith(f"{tree / 'd'}: is a directory")
    assert "no judge named" in refusal(A.spec_list, ",,")


def test_a_policy_that_names_no_path_is_left_to_the_resolver_but_an_odd_path_is_refused(tree):
    assert A.model_ref("smollm2-135m-instruct") == "smollm2-135m-instruct"
    assert A.model_ref("org/model") == "org/model"
    assert A.model_ref(str(tree / "d")) == str(tree / "d")
    for name in ("fifo", "loop", "broken"):
        refusal(A.model_ref, tree / name)


def test_an_output_directory_exists_as_a_writable_directory_or_can_be_created(tree):
    assert A.out_dir(str(tree / "d")) == str(tree / "d")
    assert A.out_dir(str(tree / "new" / "deeper")) == str(tree / "new" / "deeper")
    assert refusal(A.out_dir, tree / "f.yaml") == f"{tree / 'f.yaml'}: is a regular file, expected a directory"
    assert "a part of the path before the last is not a directory" in refusal(A.out_dir, tree / "f.yaml" / "sub")
    assert "is a FIFO" in refusal(A.out_dir, tree / "fifo")
    assert "a symbolic link loop" in refusal(A.out_dir, tree / "loop")
    assert "a symbolic link loop" in refusal(A.out_dir, tree / "loop" / "sub")
    assert "a broken symbolic link" in refusal(A.out_dir, tree / "broken")


def test_an_output_directory_under_a_read_only_one_is_refused(tree, monkeypatch):
    (tree / "d").chmod(0o555)
    if ROOTED:
        monkeypatch.setattr(os, "access", lambda path, mode: not mode & os.W_OK)
    assert "is not a writable directory" in refusal(A.out_dir, tree / "d" / "new")


@pytest.mark.parametrize(
    "check,good,bad",
    [
        (A.positive, ["1", " 7 "], ["0", "-1", "1.5", "1e3", "", "nan", "ten", "1_000", "\u0661", "\u00b2"]),
        (A.seed, ["0", str(2**31 - 1)], ["-1", str(2**31), "0.0"]),
        (A.port, ["0", "1", "65535"], ["-1", "65536", "99999", "http"]),
        (A.non_negative, ["0", "0.7", "1e-9", "2"], ["-0.1", "nan", "inf", "-inf", "1e400", "hot"]),
    ],
)
def test_numbers_in_range_are_taken_and_the_rest_refused(check, good, bad):
    for v in good:
        assert check(v) == (float(v) if check is A.non_negative else int(v))
    for v in bad:
        assert "expected" in refusal(check, v)


@settings(max_examples=100, derandomize=True, database=None)
@given(n=st.integers(min_value=-(2**70), max_value=2**70))
def test_an_integer_is_taken_exactly_when_it_is_in_range(n):
    for check, low, high in ((A.positive, 1, None), (A.seed, 0, 2**31 - 1), (A.port, 0, 65535)):
        if n >= low and (high is None or n <= high):
            assert check(str(n)) == n
        else:
            assert "out of range" in refusal(check, n)


def test_a_bad_argument_is_one_line_naming_the_command_the_argument_and_the_value(tmp_path):
    res = run_cli("view", str(tmp_path), "--port", "99999")
    assert res.code == 2 and res.out == ""
    why = "out of range (expected an integer from 0 to 65535; 0: a free port)"
    assert res.err == f"error: grm view: argument --port: 99999: {why} (see grm view --help)\n"
    res = run_cli("judge", "render", "builtin:helpfulness-pointwise", "--sample", str(tmp_path))
    assert res.code == 2 and res.err.count("\n") == 1
    assert f"argument --sample: {tmp_path}: is a directory, expected a regular file" in res.err
    res = run_cli("eval", "builtin:numeric-answer", "--data", "builtin:arith-pairs", "--out", str(tmp_path), "--limit=-1\nx")
    assert res.code == 2 and res.err.count("\n") == 1 and "argument --limit: -1\\nx: not an integer" in res.err


def test_in_range_values_reach_the_command_as_numbers(tmp_path):
    args = build_parser().parse_args(
        ["eval", "--policy", "m", "--prompts", "builtin:arith-prompts", "--out", str(tmp_path / "o"), "--limit", "3"]
        + ["--batch-size", "2", "--max-new-tokens", "5", "--temperature", "0.5", "--seed", "7"]
    )
    assert (args.limit, args.batch_size, args.max_new_tokens, args.temperature, args.seed) == (3, 2, 5, 0.5, 7)
    assert build_parser().parse_args(["view", str(tmp_path), "--port", "8080"]).port == 8080


def test_a_reader_that_leaves_ends_the_output_quietly():
    read, write = os.pipe()
    os.close(read)  # every write the command makes meets a closed pipe
    try:
        cmd = [sys.executable, "-m", "grm", "judge", "lint", "judges/numeric-answer.yaml"]  # prints "ok: ..."
        proc = subprocess.run(cmd, stdout=write, stderr=subprocess.PIPE, cwd=ROOT, timeout=60)
    finally:
        os.close(write)
    assert proc.returncode == 141 and b"Traceback" not in proc.stderr and proc.stderr == b""


def test_a_missing_pipeline_names_only_what_is_missing(capsys):
    """Overrides are optional: the usage error names the missing pipeline alone."""
    from grm.cli import main

    for argv, missing in ((["run"], "PIPELINE.yaml"), (["judge", "render"], "JUDGE.yaml, --sample")):
        try:
            code = main(argv)
        except SystemExit as e:
            code = e.code
        err = capsys.readouterr().err
        assert code == 2 and f"the following arguments are required: {missing} (" in err, err
        assert "KEY.PATH=VALUE" not in err.splitlines()[-1]
