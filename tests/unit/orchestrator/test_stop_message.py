"""The last line of a run a stop signal ended (``grm.orchestrator.launch.stopped``): what stopped
it, the steps trained, and the checkpoint ``--resume`` continues from, read from the run directory."""

import json
import signal

from grm.orchestrator.launch import stopped
from grm.orchestrator.recorder import Recorder


def run_dir(tmp_path, trained: int, checkpoints: list[int]) -> Recorder:
    (tmp_path / "run").mkdir()
    rec = Recorder(tmp_path / "run")
    lines = [json.dumps({"step": s}) for s in range(1, trained + 1)]
    (rec.path / "metrics.jsonl").write_text("".join(x + "\n" for x in lines))
    for step in checkpoints:
        rec.checkpoint_dir(step).mkdir(parents=True)
        (rec.checkpoint_dir(step) / "COMPLETE").write_text("ok\n")
    rec.checkpoint_dir(99).mkdir(parents=True)  # half written (no COMPLETE): never named
    return rec


def test_one_signal_names_the_checkpoint_of_the_last_trained_step(tmp_path):
    rec = run_dir(tmp_path, 2, [1, 2])
    assert stopped(rec, [signal.SIGTERM]) == (
        f"stopped by SIGTERM after 2 trained step(s): continue from step-2 with --resume {rec.path}"
    )


def test_a_second_signal_names_the_older_checkpoint_and_the_steps_trained_again(tmp_path):
    rec = run_dir(tmp_path, 3, [1])
    assert stopped(rec, [signal.SIGTERM, signal.SIGTERM]) == (
        f"stopped by SIGTERM twice after 3 trained step(s): continue from step-1 with --resume {rec.path}"
        " (steps after step-1 are trained again)"
    )
    assert stopped(rec, [signal.SIGINT, signal.SIGTERM]).startswith("stopped by SIGINT then SIGTERM after 3")


def test_no_checkpoint_says_start_again(tmp_path):
    rec = run_dir(tmp_path, 0, [])
    assert stopped(rec, [signal.SIGINT]) == "stopped by SIGINT after 0 trained step(s), with no checkpoint: start again"
