"""The run directory under crashes, full disks and refused resumes (no Ray, no model): checkpoints
are written, overwritten and pruned so that a crash at any filesystem operation leaves a complete
one; a resume that changes what the checkpoints were made with leaves the directory byte for byte
as it was; every start's configuration is kept; log lines are cut in place."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from grm.base import atomic_dir
from grm.config.pipeline import PipelineSpec
from grm.orchestrator.errors import RunError
from grm.orchestrator.recorder import Recorder
from grm.orchestrator.resume import RESUME_KEEPS, cut_after
from tests.unit.crashes import Crash, crash_at, fail_at


@pytest.fixture
def no_fsync(monkeypatch):
    """Crash tests kill the process, not the power: a real fsync only makes them slow."""
    monkeypatch.setattr(os, "fsync", lambda fd: None)


def _cfg(out: Path, **changes: object) -> PipelineSpec:
    data = {
        "name": "t",
        "seed": 3,
        "pools": {"train": {"cpus": 1}},
        "policy": {"spec": "builtin:smollm2-135m-instruct", "pool": "train"},
        "judges": [{"spec": "builtin:numeric-answer"}],
        "data": {"prompts": "builtin:arith-prompts"},
        "train": {"steps": 4, "micro_batch_size": 1},
        "out_dir": str(out),
    }
    for dotted, value in changes.items():
        node = data
        *parents, last = dotted.split(".")
        for key in parents:
            node = node.setdefault(key, {})
        node[last] = value
    return PipelineSpec.model_validate(data)


class FakePolicy:
    """``save``/``load`` as the policy group's: save writes a nested atomic dir, as a trainer does."""

    def __init__(self, version: str) -> None:
        self.version = version
        self.save = SimpleNamespace(remote=self._save)
        self.sees = SimpleNamespace(remote=lambda path, token: True)  # one machine: every rank sees the run dir
        self.load = SimpleNamespace(remote=lambda path, shipped=None, token=None: path)

    def _save(self, path: str, token: str | None = None) -> list:
        with atomic_dir(Path(path) / "policy") as d:
            (d / "model.bin").write_bytes(self.version.encode() * 500)
        return []  # nothing shipped


STREAM = SimpleNamespace(state_before=lambda n: {"epoch": 0, "index": 8 - n})


def _checkpoint(rec: Recorder, step: int, version: str, keep: int = 1) -> None:
    rec.checkpoint(step, FakePolicy(version), STREAM, 0, keep, get=lambda ref: ref)


def _whole(ckpt: Path) -> tuple[int, str]:
    """(step, version) of a checkpoint, checking every file in it belongs to that version."""
    step = json.loads((ckpt / "driver.json").read_text())["step"]
    data = (ckpt / "policy" / "model.bin").read_bytes()
    version = data[: len(data) // 500].decode()
    assert data == version.encode() * 500 and (ckpt / "COMPLETE").is_file() and (ckpt / "policy" / "COMPLETE").is_file()
    return step, version


def _tree(root: Path) -> dict[str, tuple[int, bytes | None, int]]:
    """Every entry under ``root``: mode, bytes (files) and modification time in ns."""
    out = {}
    for p in sorted(root.rglob("*")):
        st_ = p.lstat()
        out[str(p.relative_to(root))] = (st_.st_mode, p.read_bytes() if p.is_file() else None, st_.st_mtime_ns)
    return out


# --------------------------------------------------------------------------- checkpoints under crashes


@pytest.mark.usefixtures("no_fsync")
@pytest.mark.parametrize(("existing", "step"), [([2], 2), ([2], 4), ([2, 4], 4)], ids=["overwrite", "prune", "both"])
def test_a_crash_at_any_filesystem_call_of_a_checkpoint_leaves_a_complete_one_to_resume_from(
    tmp_path, monkeypatch, existing, step
):
    """keep: 1, so the write of step ``step`` replaces or prunes the only other checkpoint: killed at
    its k-th filesystem call (every k until it completes), the next start finds a whole checkpoint
    (the old one or the new one) and only complete checkpoints beside it."""
    outcomes = []
    for k in range(1, 400):
        run = tmp_path / f"k{k}"
        rec = Recorder(run)
        for s in existing:
            _checkpoint(rec, s, f"old{s}")
        with crash_at(k, monkeypatch) as faults:
            try:
                _checkpoint(rec, step, "new")
            except Crash:
                pass
        after = Recorder(run)  # the next start
        latest = after.latest_checkpoint()
        assert latest is not None, f"killed at call {k}: no checkpoint left"
        got = _whole(latest)
        assert got in [(step, "new"), *((s, f"old{s}") for s in existing)], (k, got)
        assert all(p.name.startswith("step-") for p in (run / "checkpoints").iterdir()), k  # no temp or trash left
        for p in (run / "checkpoints").iterdir():
            _whole(p)
        outcomes.append(got)
        if not faults.fired:
            break
    assert outcomes[-1] == (step, "new") and len(outcomes) > 30, outcomes
    assert sorted(p.name for p in (tmp_path / f"k{len(outcomes)}" / "checkpoints").iterdir()) == [f"step-{step}"]


@pytest.mark.usefixtures("no_fsync")
def test_a_full_disk_during_a_checkpoint_is_one_line_and_keeps_the_last_checkpoint(tmp_path, monkeypatch):
    rec = Recorder(tmp_path / "run")
    _checkpoint(rec, 2, "old2")
    failures = 0
    for k in range(1, 400):
        with fail_at(k, monkeypatch) as faults:
            try:
                _checkpoint(rec, 2, "new")
            except RunError as e:
                failures += 1
                assert "\n" not in str(e) and "/checkpoints" in str(e) and "No space left on device" in str(e), str(e)
        assert _whole(rec.latest_checkpoint())[0] == 2
        assert [p.name for p in (tmp_path / "run" / "checkpoints").iterdir()] == ["step-2"], k
        _checkpoint(rec, 2, "old2")
        if not faults.fired:
            break
    assert failures > 20


def test_pruning_keeps_the_newest_checkpoints_and_the_one_just_written(tmp_path):
    rec = Recorder(tmp_path / "run")
    for s in (2, 4, 6):
        _checkpoint(rec, s, f"v{s}", keep=2)
    assert sorted(p.name for p in rec.ckpt_root.iterdir()) == ["step-4", "step-6"]
    _checkpoint(rec, 4, "again", keep=1)  # an older step rewritten: it stays, and so does the newest
    assert sorted(p.name for p in rec.ckpt_root.iterdir()) == ["step-4", "step-6"]
    assert _whole(rec.ckpt_root / "step-4") == (4, "again")


# --------------------------------------------------------------------------- resume


def _run_with_checkpoint(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    rec = Recorder.create(_cfg(run), None)
    (run / "metrics.jsonl").write_text('{"step": 1}\n{"step": 2}\n')
    _checkpoint(rec, 2, "v2")
    return run


INCOMPATIBLE = {  # field of RESUME_KEEPS: (the pipeline's change, what the refusal names)
    "seed": ({"seed": 4}, "seed: recorded 3, now 4"),
    "data": ({"data.shuffle": False}, "data.shuffle: recorded True, now False"),
    "policy.spec": ({"policy.spec": "builtin:qwen2.5-0.5b-instruct"}, "policy.spec: recorded 'builtin:smollm2"),
    "policy.overrides": ({"policy.overrides": ["system_prompt=hi"]}, "policy.overrides: recorded [], now ['system"),
    "algorithm.type": ({"algorithm": {"type": "ppo"}}, "algorithm.type: recorded 'grpo', now 'ppo'"),
    "algorithm.epochs": ({"algorithm.epochs": 2}, "algorithm.epochs: recorded 1, now 2"),
    "algorithm.mini_batches": ({"algorithm.mini_batches": 2}, "algorithm.mini_batches: recorded 1, now 2"),
    "train.backend.type": ({"train.backend.type": "torch"}, "train.backend.type: recorded 'deepspeed', now 'torch'"),
    "train.backend.ranks": ({"train.backend.ranks": 2}, "train.backend.ranks: recorded 1, now 2"),
    "train.backend.zero_stage": ({"train.backend.zero_stage": 3}, "train.backend.zero_stage: recorded 2, now 3"),
    "train.backend.dtype": ({"train.backend.dtype": "fp32"}, "train.backend.dtype: recorded 'bf16', now 'fp32'"),
}


@pytest.mark.parametrize("field", RESUME_KEEPS)
def test_a_resume_that_changes_what_the_checkpoints_were_made_with_leaves_the_run_dir_as_it_was(tmp_path, field):
    run = _run_with_checkpoint(tmp_path)
    before = _tree(run)
    change, named = INCOMPATIBLE[field]
    with pytest.raises(RunError) as e:
        Recorder.create(_cfg(run, **change), str(run))
    msg = str(e.value)
    assert "\n" not in msg and "cannot resume with this pipeline" in msg and "config.resolved.yaml" in msg, msg
    assert named in msg, msg
    assert _tree(run) == before


def test_a_resume_keeps_the_first_record_and_adds_one_per_start(tmp_path):
    run = _run_with_checkpoint(tmp_path)
    first = (run / "config.resolved.yaml").read_bytes()
    Recorder.create(_cfg(run, **{"train.steps": 10}), str(run))
    Recorder.create(_cfg(run, **{"train.steps": 12, "checkpoint.keep": 3}), str(run))
    assert (run / "config.resolved.yaml").read_bytes() == first
    one, two = (yaml.safe_load((run / f"config.resume-{i}.yaml").read_text()) for i in (1, 2))
    assert yaml.safe_load(first)["train"]["steps"] == 4 and one["train"]["steps"] == 10 and two["train"]["steps"] == 12
    assert (run / "config.resume-1.yaml").read_text().startswith("# grm run --resume from step-2")


def test_a_resume_without_a_checkpoint_or_record_is_refused_before_anything_is_written(tmp_path):
    run = tmp_path / "run"
    Recorder.create(_cfg(run), None)
    before = _tree(run)
    with pytest.raises(RunError, match="no complete checkpoint to resume from"):
        Recorder.create(_cfg(run), str(run))
    assert _tree(run) == before
    (run / "config.resolved.yaml").write_text("policy: [unclosed\n")
    with pytest.raises(RunError, match=r"recorded configuration: .*config.resolved.yaml:\d+: invalid YAML"):
        Recorder.create(_cfg(run), str(run))
    bomb = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"] + [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)]
    (run / "config.resolved.yaml").write_text("\n".join([*bomb, "seed: *a8"]) + "\n")  # 10^8 values to compare
    with pytest.raises(RunError, match=r"config.resolved.yaml:\d+: more than 10000 values once its aliases are expanded"):
        Recorder.create(_cfg(run), str(run))
    assert not list(run.glob("config.resume-*"))
    with pytest.raises(RunError, match="not a run directory"):
        Recorder.create(_cfg(tmp_path / "nothing"), str(tmp_path / "nothing"))


def test_a_fresh_start_never_lands_on_a_run_with_checkpoints(tmp_path):
    run = _run_with_checkpoint(tmp_path)
    (run / "metrics.jsonl").unlink()
    with pytest.raises(RunError, match="already holds a run; use --resume"):
        Recorder.create(_cfg(run), None)


def test_a_damaged_checkpoint_state_is_one_line_naming_the_file(tmp_path):
    run = _run_with_checkpoint(tmp_path)
    (run / "checkpoints" / "step-2" / "driver.json").write_text('{"step": "two"')
    with pytest.raises(RunError, match=r"step-2/driver.json: cannot read the checkpoint"):
        Recorder(run).resume_state(FakePolicy("v"), get=lambda ref: ref)


# --------------------------------------------------------------------------- cutting the logs


def _lines(steps: list[int]) -> bytes:
    return b"".join(json.dumps({"step": s, "text": "\u2028 ü"}, ensure_ascii=False).encode() + b"\n" for s in steps)


@settings(max_examples=60, derandomize=True, deadline=None, database=None)
@given(
    steps=st.lists(st.integers(1, 6), max_size=12).map(sorted),
    torn=st.sampled_from([b"", b'{"step": 9, "te', b"\xff\xfe"]),
    cut=st.integers(0, 7),
)
def test_cutting_keeps_exactly_the_lines_up_to_the_step_in_place(tmp_path_factory, steps, torn, cut):
    path = tmp_path_factory.mktemp("cut") / "samples.jsonl"
    path.write_bytes(_lines(steps) + torn)
    inode = path.stat().st_ino
    cut_after(path, cut)
    assert path.read_bytes() == _lines([s for s in steps if s <= cut])
    assert path.stat().st_ino == inode  # cut in place, not rewritten through a copy


def test_cutting_needs_no_free_space_and_names_the_line_it_cannot_read(tmp_path, monkeypatch):
    path = tmp_path / "samples.jsonl"
    path.write_bytes(_lines([1, 2, 3, 3, 4]))
    real_open = os.open

    def full_disk(file, flags, *args, **kwargs):  # a new file cannot be created: the disk is full
        if flags & os.O_CREAT:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), file)
        return real_open(file, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", full_disk)
    Recorder(tmp_path).truncate_after(2)
    assert path.read_bytes() == _lines([1, 2]) and os.listdir(tmp_path) == ["samples.jsonl"]
    monkeypatch.undo()
    path.write_bytes(_lines([1]) + b"not json\n" + _lines([2]))
    with pytest.raises(RunError, match=r"samples.jsonl:2: not a JSON line"):
        cut_after(path, 1)
    path.write_bytes(_lines([1, 3, 2]))
    with pytest.raises(RunError, match=r"samples.jsonl:3: a line of step 2 after lines of later steps"):
        cut_after(path, 2)
    assert path.read_bytes() == _lines([1, 3, 2])  # a refused cut changes nothing
    fifo = tmp_path / "metrics.jsonl"
    os.mkfifo(fifo)  # would block a read forever
    with pytest.raises(RunError, match=r"metrics.jsonl: not a regular file"):
        cut_after(fifo, 1)
    path.chmod(0o400)
    if os.geteuid() != 0:  # root may write anyway
        with pytest.raises(RunError, match=r"samples.jsonl: cannot cut the lines after step 1 \(Permission denied\)"):
            cut_after(path, 1)


def test_a_record_stripped_of_what_every_grm_records_is_refused_and_missing_newer_fields_are_said(tmp_path, capsys):
    from grm.orchestrator.resume import ALWAYS_RECORDED

    run = _run_with_checkpoint(tmp_path)
    good = (run / "config.resolved.yaml").read_text()
    for dotted in ALWAYS_RECORDED:  # an edited (or foreign) record cannot vouch for the checkpoints
        record = yaml.safe_load(good)
        head, _, leaf = dotted.rpartition(".")
        del (record[head] if head else record)[leaf]
        (run / "config.resolved.yaml").write_text(yaml.safe_dump(record))
        before = _tree(run)
        with pytest.raises(RunError, match=f"config.resolved.yaml: records no {dotted}: not the configuration grm run writes"):
            Recorder.create(_cfg(run), str(run))
        assert _tree(run) == before
    for other in ("[1, 2]", "just text", "{}"):
        (run / "config.resolved.yaml").write_text(other + "\n")
        with pytest.raises(RunError, match="records no seed, data, policy.spec, algorithm.type|top level must be a mapping"):
            Recorder.create(_cfg(run), str(run))
    record = yaml.safe_load(good)
    del record["train"]["backend"]["ranks"]
    (run / "config.resolved.yaml").write_text(yaml.safe_dump(record))
    capsys.readouterr()
    Recorder.create(_cfg(run, **{"train.backend.ranks": 2}), str(run))  # not recorded: not compared, and said
    assert "does not record train.backend.ranks (an older grm's run?): not compared" in capsys.readouterr().out


def test_a_run_recorded_by_an_older_grm_resumes_when_nothing_it_recorded_changed(tmp_path, monkeypatch):
    """An older record lacks fields added since, and holds the policy spec as written (relative)."""
    monkeypatch.chdir(tmp_path)
    run = _run_with_checkpoint(tmp_path)
    record = yaml.safe_load((run / "config.resolved.yaml").read_text())
    del record["train"]["backend"]["dtype"], record["algorithm"]["epochs"]
    record["policy"]["spec"] = "specs/policy.yaml"
    (run / "config.resolved.yaml").write_text(yaml.safe_dump(record))
    now = {"policy.spec": str(tmp_path / "specs" / "policy.yaml"), "train.backend.dtype": "fp32", "algorithm.epochs": 2}
    Recorder.create(_cfg(run, **now), str(run))
    assert (run / "config.resume-1.yaml").is_file()
    with pytest.raises(RunError, match="policy.spec: recorded 'specs/policy.yaml', now '/elsewhere/policy.yaml'"):
        Recorder.create(_cfg(run, **{**now, "policy.spec": "/elsewhere/policy.yaml"}), str(run))
