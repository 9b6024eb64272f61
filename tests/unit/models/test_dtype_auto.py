"""``dtype: auto``: the faster of fp32 and bf16 on this CPU, measured once and kept per machine."""

import json

import torch

from grm.models import dtype as auto


def test_explicit_dtypes_pass_through_and_devices_decide_before_any_timing(monkeypatch):
    monkeypatch.setattr(auto, "matmul_gflops", lambda d: (_ for _ in ()).throw(AssertionError("timed")))
    auto.cpu_choice.cache_clear()
    assert auto.resolve_dtype("fp32") == "fp32" and auto.resolve_dtype("bf16", torch.device("cpu")) == "bf16"
    assert auto.resolve_dtype("auto", torch.device("cuda", 0)) == "bf16"
    assert auto.resolve_dtype("auto", torch.device("meta")) == "fp32"  # placement checks: never timed


def test_the_faster_dtype_is_chosen_once_and_read_back_by_later_processes(monkeypatch, tmp_path):
    monkeypatch.setenv("GRM_HOME", str(tmp_path))
    calls = []

    def rate(d):
        calls.append(d)
        return {"fp32": 100.0, "bf16": 400.0}[d]

    monkeypatch.setattr(auto, "matmul_gflops", rate)
    auto.cpu_choice.cache_clear()
    assert auto.resolve_dtype("auto") == "bf16" and calls == ["fp32", "bf16"]
    kept = json.loads((tmp_path / "dtype-auto.json").read_text())
    assert kept[auto.machine_key()] == {"dtype": "bf16", "fp32_gflops": 100.0, "bf16_gflops": 400.0, "cpu": auto.cpu_name()}
    auto.cpu_choice.cache_clear()  # a new process: reads the file, times nothing
    assert auto.resolve_dtype("auto") == "bf16" and calls == ["fp32", "bf16"]

    # a bf16 rate under 1.2x fp32's is not worth bf16's rounding
    monkeypatch.setattr(auto, "matmul_gflops", lambda d: {"fp32": 100.0, "bf16": 110.0}[d])
    (tmp_path / "dtype-auto.json").unlink()
    auto.cpu_choice.cache_clear()
    assert auto.resolve_dtype("auto") == "fp32"
    auto.cpu_choice.cache_clear()


def test_the_measurement_is_a_positive_rate_in_both_dtypes():
    assert auto.matmul_gflops("fp32", m=32, k=64, n=64, repeats=1) > 0
    assert auto.matmul_gflops("bf16", m=32, k=64, n=64, repeats=1) > 0
