"""``logging.wandb`` with W&B offline (no network, no key): the spec, the run inside the run
directory, its id kept so a resume continues it, what is logged, and a missing package refused."""

import json
import sys
import time

import pytest
from pydantic import ValidationError

from grm.config.run_options import LoggingSpec, WandbSpec
from grm.orchestrator.errors import RunError

pytest.importorskip("wandb")

from grm.orchestrator.wandb_log import RUN_FILE, WandbLog, require_wandb  # noqa: E402


def records(run_dir):
    return sorted((run_dir / "wandb").glob("offline-run-*/run-*.wandb"))


def written(path, needle: bytes, within_s: float = 30.0) -> bytes:
    """The record's bytes once ``needle`` is in them: W&B's writer is its own process (wandb-core),
    which can still be writing the record when ``finish()`` has returned (seen on a loaded machine)."""
    deadline = time.monotonic() + within_s
    while needle not in (data := path.read_bytes()) and time.monotonic() < deadline:
        time.sleep(0.1)
    return data


def test_the_spec_takes_a_project_and_refuses_unknown_modes_and_fields():
    spec = LoggingSpec.model_validate({"wandb": {"project": "p", "mode": "offline", "tags": ["a"]}})
    assert spec.wandb.mode == "offline" and spec.wandb.name is None
    assert LoggingSpec().wandb is None  # off unless asked for
    for bad in ({"project": ""}, {"project": "p", "mode": "sometimes"}, {"project": "p", "api_key": "k"}):
        with pytest.raises(ValidationError):
            WandbSpec.model_validate(bad)


def test_an_offline_run_logs_finite_numbers_by_step_and_a_resume_continues_it(tmp_path, capsys):
    spec = WandbSpec(project="grm-test", mode="offline")
    log = WandbLog(spec, tmp_path, {"name": "x"})
    log.log({"step": 1, "reward_mean": 0.125, "masked": 0, "loss": float("nan"), "done": True, "by_judge": {"a": 1}})
    log.log({"step": 2, "reward_mean": 0.375})
    log.close()
    run_id = json.loads((tmp_path / RUN_FILE).read_text())["id"]
    (first,) = records(tmp_path)
    data = written(first, b"0.375")
    assert run_id in first.name and b"reward_mean" in data and b"0.375" in data and b"by_judge" not in data
    assert f"wandb: run {run_id} of project grm-test" in capsys.readouterr().out
    again = WandbLog(spec, tmp_path, {"name": "x"})  # --resume: the same W&B run
    again.log({"step": 2, "reward_mean": 0.5})  # a redone step is logged at its own step number
    again.close()
    assert json.loads((tmp_path / RUN_FILE).read_text())["id"] == run_id
    assert all(run_id in r.name for r in records(tmp_path))


def test_a_broken_record_and_a_missing_package_are_one_message(tmp_path, monkeypatch):
    (tmp_path / RUN_FILE).write_text("{not json")
    with pytest.raises(RunError, match=f"{RUN_FILE}: not the W&B record grm writes"):
        WandbLog(WandbSpec(project="p", mode="offline"), tmp_path, {})
    (tmp_path / RUN_FILE).write_text(json.dumps({"id": "../../x"}))
    with pytest.raises(RunError, match="'id' must be letters and digits"):
        WandbLog(WandbSpec(project="p", mode="offline"), tmp_path, {})
    monkeypatch.setitem(sys.modules, "wandb", None)
    with pytest.raises(RunError, match=r"pip install 'grm-rlaif\[wandb\]'"):
        require_wandb()
