"""``grm export`` without a model: which checkpoint SOURCE and --step name, what --out may be, the
one-line refusals, the model card, and the atomic write (the model writer replaced by a stub)."""

import json
from pathlib import Path

import pytest
import yaml

from grm.cli import main
from grm.evaluation import export
from grm.evaluation.export import ExportError, check_out, export_policy, find_checkpoint


@pytest.fixture(scope="module")
def quickstart_config():
    """config.resolved.yaml as ``grm run builtin:quickstart`` records it."""
    from grm.config.resolve import load_pipeline

    spec = load_pipeline("builtin:quickstart").spec
    return yaml.safe_dump(json.loads(spec.model_dump_json()), sort_keys=False)


@pytest.fixture
def run(tmp_path, quickstart_config):
    """A run directory: complete checkpoints of steps 2 and 4, a half-written one of step 5, metrics of steps 1-5."""
    run = tmp_path / "run"
    for step in (2, 4, 5):
        (run / "checkpoints" / f"step-{step}" / "policy").mkdir(parents=True)
    for step in (2, 4):
        (run / "checkpoints" / f"step-{step}" / "COMPLETE").write_text("ok\n")
    (run / "config.resolved.yaml").write_text(quickstart_config)
    rows = [
        {"step": s, "reward_mean": 0.1 * s, "kl": 0.001 * s, "entropy": 1.5, "reward/numeric-answer": s / 10, "format": 1}
        for s in range(1, 6)
    ]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return run


@pytest.fixture
def stub_writer(monkeypatch):
    """Records the policy each export writes, and writes a stand-in config.json."""
    written = []

    def write_model(src, where):
        written.append(src)
        (where / "config.json").write_text("{}")

    monkeypatch.setattr(export, "write_model", write_model)
    return written


def test_a_run_gives_its_latest_complete_checkpoint_or_the_step_asked(run, monkeypatch):
    assert find_checkpoint(run) == (run, run / "checkpoints" / "step-4")  # step-5 has no COMPLETE
    assert find_checkpoint(run, 2) == (run, run / "checkpoints" / "step-2")
    ckpt = run / "checkpoints" / "step-2"
    assert find_checkpoint(ckpt) == (run, ckpt) and find_checkpoint(ckpt, 2) == (run, ckpt)
    monkeypatch.chdir(run / "checkpoints")  # a checkpoint named from inside checkpoints/ still finds its run
    assert find_checkpoint(Path("step-2")) == (run, ckpt)
    monkeypatch.chdir(ckpt)
    assert find_checkpoint(Path(".")) == (run, ckpt)


def test_a_checkpoint_named_relatively_exports_with_its_runs_config(run, tmp_path, monkeypatch, stub_writer):
    monkeypatch.chdir(run / "checkpoints")
    export_policy(Path("step-2"), tmp_path / "hf")
    assert stub_writer[0].checkpoint == run / "checkpoints" / "step-2"
    assert "from run `run/checkpoints/step-2`" in (tmp_path / "hf" / "README.md").read_text()


def test_a_step_the_run_lacks_names_the_run_and_lists_the_complete_steps(run):
    with pytest.raises(ExportError, match=r"run: no complete checkpoint for --step 3; complete steps: 2, 4$"):
        find_checkpoint(run, 3)
    with pytest.raises(ExportError, match=r"--step 5 \(it is incomplete: no COMPLETE marker\); complete steps: 2, 4"):
        find_checkpoint(run, 5)
    with pytest.raises(ExportError, match="step-5: incomplete checkpoint"):
        find_checkpoint(run / "checkpoints" / "step-5")
    with pytest.raises(ExportError, match="--step 4 names another checkpoint"):
        find_checkpoint(run / "checkpoints" / "step-2", 4)
    for step in (2, 4):
        (run / "checkpoints" / f"step-{step}" / "COMPLETE").unlink()
    with pytest.raises(ExportError, match="run: the run has no complete checkpoint"):
        find_checkpoint(run)
    with pytest.raises(ExportError, match="complete steps: none"):
        find_checkpoint(run, 2)


def test_what_is_neither_a_run_nor_a_checkpoint_is_refused_by_name(tmp_path):
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "config.json").write_text("{}")
    with pytest.raises(ExportError, match=r"hf: already a Hugging Face model directory"):
        find_checkpoint(tmp_path / "hf")
    with pytest.raises(ExportError, match=r"empty: not a run directory \(config.resolved.yaml \+ checkpoints/\) or a checkpoint"):
        (tmp_path / "empty").mkdir()
        find_checkpoint(tmp_path / "empty")
    with pytest.raises(ExportError, match="nowhere: no such directory"):
        find_checkpoint(tmp_path / "nowhere")
    (tmp_path / "f").write_text("x")
    with pytest.raises(ExportError, match="f: not a directory"):
        find_checkpoint(tmp_path / "f")


def test_out_must_be_new_empty_or_forced_and_never_the_run_or_its_checkpoints(run, tmp_path):
    check_out(tmp_path / "new", False, run)
    (tmp_path / "empty").mkdir()
    check_out(tmp_path / "empty", False, run)
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    with pytest.raises(ExportError, match="full: exists and is not empty; use --force"):
        check_out(tmp_path / "full", False, run)
    check_out(tmp_path / "full", True, run)
    (tmp_path / "file").write_text("x")
    with pytest.raises(ExportError, match="file: exists and is not a directory"):
        check_out(tmp_path / "file", True, run)
    (tmp_path / "link").symlink_to(tmp_path / "empty")
    with pytest.raises(ExportError, match="link: is a symbolic link"):
        check_out(tmp_path / "link", True, run)
    for bad in (run, tmp_path, run / "checkpoints", run / "checkpoints" / "step-9"):  # --force would delete them
        with pytest.raises(ExportError, match="would replace the run"):
            check_out(bad, True, run)
    check_out(run / "hf", False, run)  # beside the checkpoints is fine


def test_export_writes_the_card_beside_the_model_and_replaces_out_only_when_forced(run, tmp_path, stub_writer):
    out = tmp_path / "hf"
    assert export_policy(run, out, step=2) == out
    assert stub_writer[0].checkpoint == (run / "checkpoints" / "step-2").resolve()
    assert stub_writer[0].model == "smollm2-135m-instruct"
    assert sorted(p.name for p in out.iterdir()) == ["COMPLETE", "README.md", "config.json"]
    card = (out / "README.md").read_text()
    assert 'base_model: "HuggingFaceTB/SmolLM2-135M-Instruct"' in card
    assert "- pipeline: quickstart" in card and "- algorithm: grpo" in card and "- step: 2 of 5" in card
    assert "- judges: helpfulness-pointwise-logprob (weight 0.5), numeric-answer (weight 1)" in card
    # the exported step's metrics line, not the last one (step 5's weights are not these)
    assert "## Metrics at step 2" in card and "| reward_mean | 0.2 |" in card and "| kl | 0.002 |" in card
    assert "| reward/numeric-answer | 0.2 |" in card and "response_len_mean" not in card  # a key the line lacks
    with pytest.raises(ExportError, match="exists and is not empty"):
        export_policy(run, out)
    export_policy(run, out, force=True)
    assert "## Metrics at step 4" in (out / "README.md").read_text()


def test_a_failed_write_leaves_out_as_it_was_and_no_staging_directory(run, tmp_path, monkeypatch):
    out = tmp_path / "hf"
    out.mkdir()
    (out / "keep.txt").write_text("mine")

    def broken(src, where):
        (where / "config.json").write_text("{}")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(export, "write_model", broken)
    with pytest.raises(OSError, match="No space"):
        export_policy(run, out, force=True)
    assert [p.name for p in out.iterdir()] == ["keep.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hf", "run"]


def test_a_damaged_metrics_log_is_said_in_the_card_and_does_not_stop_the_export(run, tmp_path, stub_writer):
    (run / "metrics.jsonl").write_text('{"step": 1}\n{"step": 2, "format": 99}\n')
    export_policy(run, tmp_path / "hf")
    card = (tmp_path / "hf" / "README.md").read_text()
    assert "metrics.jsonl could not be read" in card and "metrics.jsonl:2" in card and "newer grm" in card


def test_the_command_line_says_one_line_naming_the_path_and_exits_2(run, tmp_path, capsys, stub_writer):
    assert main(["export", str(run), "--out", str(tmp_path / "hf"), "--step", "3"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(run) in err and "complete steps: 2, 4" in err and "Traceback" not in err
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "x").write_text("x")
    assert main(["export", str(run), "--out", str(tmp_path / "hf")]) == 2
    assert "hf: exists and is not empty; use --force" in capsys.readouterr().err
    assert main(["export", str(run), "--out", str(tmp_path / "hf"), "--force"]) == 0
    assert f"wrote {tmp_path / 'hf'}: config.json, model.safetensors" in capsys.readouterr().out
    (tmp_path / "file").write_text("x")
    for argv, why in (
        (["export", str(run), "--out", str(tmp_path / "file")], "is a regular file, expected a directory"),
        (["export", str(tmp_path / "nowhere"), "--out", str(tmp_path / "o")], "nowhere: no such file or directory"),
        (["export", str(run), "--out", str(tmp_path / "o"), "--step", "-1"], "out of range"),
    ):
        with pytest.raises(SystemExit) as e:
            main(argv)
        assert e.value.code == 2
        err = capsys.readouterr().err
        assert why in err and err.count("\n") == 1, err


def test_push_uploads_the_written_directory_or_says_in_one_line_why_it_could_not(run, tmp_path, capsys, monkeypatch, stub_writer):
    import huggingface_hub

    calls = []

    class Api:
        def create_repo(self, repo, **kw):
            calls.append(("create", repo, kw["private"], kw["exist_ok"]))

        def upload_folder(self, **kw):
            sent = sorted(p.name for p in Path(kw["folder_path"]).iterdir() if p.name not in kw["ignore_patterns"])
            calls.append(("upload", kw["repo_id"], sent))  # grm's own COMPLETE marker is not sent
            return type("Commit", (), {"commit_url": f"https://hub.example/{kw['repo_id']}/commit/1"})()

    monkeypatch.setattr(huggingface_hub, "HfApi", Api)
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")  # grm keeps the hub offline unless told
    assert main(["export", str(run), "--out", str(tmp_path / "a"), "--push", "me/grm-policy"]) == 0, capsys.readouterr().err
    assert calls == [("create", "me/grm-policy", True, True), ("upload", "me/grm-policy", ["README.md", "config.json"])]
    assert "pushed" in capsys.readouterr().out
    # offline (as here): the directory is written, the push refused in one line, exit 2
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert main(["export", str(run), "--out", str(tmp_path / "b"), "--push", "me/grm-policy"]) == 2
    err = capsys.readouterr().err
    assert "unless HF_HUB_OFFLINE=0 is set" in err and err.count("\n") == 1 and (tmp_path / "b" / "config.json").exists()
    # a failing hub: the same
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    Api.upload_folder = lambda self, **kw: (_ for _ in ()).throw(OSError("connection refused"))
    assert main(["export", str(run), "--out", str(tmp_path / "c"), "--push", "me/grm-policy"]) == 2
    assert "the upload failed (OSError: connection refused)" in capsys.readouterr().err
    for bad in ("no-slash", "a/b/c", "../x", "a/.."):
        with pytest.raises(SystemExit):
            main(["export", str(run), "--out", str(tmp_path / "d"), "--push", bad])
        assert "is not a Hub repo id like OWNER/NAME" in capsys.readouterr().err


# --------------------------------------------------------------------------- the export ending `grm run`


def test_a_completed_run_ends_with_its_model_directory_and_one_line(run, capsys, stub_writer):
    from grm.evaluation.export_cli import export_finished_run

    assert export_finished_run(run) == 0
    assert capsys.readouterr().out == f"model: {run / 'model'} (AutoModelForCausalLM.from_pretrained)\n"
    assert (run / "model" / "config.json").is_file() and "policy at step 4" in (run / "model" / "README.md").read_text()
    # a resumed run that completes again replaces the model an earlier completion wrote
    (run / "checkpoints" / "step-5" / "COMPLETE").write_text("ok\n")
    assert export_finished_run(run) == 0
    assert "policy at step 5" in (run / "model" / "README.md").read_text()
    assert [s.checkpoint.name for s in stub_writer] == ["step-4", "step-5"]


def test_a_failed_export_after_a_run_is_one_warning_saying_how_to_retry_and_status_0(run, capsys, monkeypatch):
    from grm.evaluation.export_cli import export_finished_run

    def broken(src, where):
        raise RuntimeError("disk\nfull")

    monkeypatch.setattr(export, "write_model", broken)
    assert export_finished_run(run) == 0
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and err.startswith("warning: ") and "Traceback" not in err
    assert str(run) in err and "RuntimeError: disk\\nfull" in err
    assert err.rstrip().endswith(f"retry: grm export {run} --out {run / 'model'}")
    assert not (run / "model").exists()
    # a model an earlier completion left: the retry needs --force; a GrmError says itself, no class name
    (run / "model").mkdir()
    for ckpt in (run / "checkpoints").iterdir():
        (ckpt / "COMPLETE").unlink(missing_ok=True)
    assert export_finished_run(run) == 0
    err = capsys.readouterr().err
    assert "no complete checkpoint" in err and "ExportError" not in err
    assert err.rstrip().endswith(f"--out {run / 'model'} --force")


def test_ctrl_c_during_the_export_says_the_run_is_complete_and_exits_130(run, capsys, monkeypatch):
    from grm.evaluation.export_cli import export_finished_run

    def interrupted(src, where):
        raise KeyboardInterrupt

    monkeypatch.setattr(export, "write_model", interrupted)
    assert export_finished_run(run) == 130
    err = capsys.readouterr().err
    assert "is complete; its model export was interrupted" in err and f"grm export {run} --out" in err


def test_grm_run_exports_only_a_completed_run_and_only_with_checkpoint_export(tmp_path, monkeypatch, capsys):
    """``grm run``'s end (the driver stubbed): the export follows a completed run unless
    ``checkpoint.export=false``, and never a stopped or failed one."""
    import signal
    import sys
    import types

    from grm.evaluation import export_cli
    from grm.orchestrator.errors import RunError, RunStopped

    done = tmp_path / "run"
    ending: list[Exception] = []  # what the stub run raises; none: it completes

    def run_pipeline(*args, **kwargs):
        if ending:
            raise ending[0]
        return done

    stub = types.ModuleType("grm.orchestrator.launch")
    stub.run_pipeline = run_pipeline  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "grm.orchestrator.launch", stub)
    exported = []
    monkeypatch.setattr(export_cli, "export_finished_run", lambda run_dir: exported.append(run_dir) or 0)

    argv = ["run", "builtin:quickstart", f"out_dir={tmp_path}", "--no-live"]
    assert main(argv) == 0 and exported == [done]
    assert main([*argv, "checkpoint.export=false"]) == 0 and exported == [done]
    assert f"run directory: {done}" in capsys.readouterr().out
    ending[:] = [RunStopped("stopped by SIGTERM", signal.SIGTERM)]
    assert main(argv) == 143 and exported == [done]
    ending[:] = [RunError("step 2: the judge is gone")]
    assert main(argv) == 2 and exported == [done]
