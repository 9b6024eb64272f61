"""The machine a benchmark ran on, printed first by every benchmark here: the CPU model and every
lscpu flag (CPUs differ between machines and sessions: AVX-512 BF16 or none, AMX or not), the
cores, torch's build and threads. Compare numbers only within one invocation.

    python benchmarks/machine.py        # the line alone
"""

from __future__ import annotations

import json
import os
import platform
import subprocess

SIMD = ("avx", "amx", "fma", "f16c", "sse4")


def machine() -> dict:
    """``cpu`` (model name), ``simd`` (the vector flags, for reading), ``flags`` (all of them),
    ``cores``, ``torch`` and its ``torch_threads`` in this process (absent without torch)."""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    except OSError:
        out = ""
    info = {k.strip(): v.strip() for k, v in (ln.split(":", 1) for ln in out.splitlines() if ":" in ln)}
    flags = info.get("Flags", "").split()
    facts: dict = {
        "cpu": info.get("Model name") or platform.processor(),
        "cores": os.cpu_count(),
        "simd": sorted(f for f in flags if f.startswith(SIMD)),
        "flags": " ".join(flags),
    }
    try:
        import torch
    except ImportError:
        return facts
    return {**facts, "torch": torch.__version__, "torch_threads": torch.get_num_threads()}


def describe(facts: dict) -> str:
    """One line for a human: the model and the flags that decide the fast dtype."""
    wanted = ["avx2", "avx512f", "avx512_bf16", "amx_bf16", "fma"]
    have = ", ".join(f for f in wanted if f in facts["simd"]) or "none of " + "/".join(wanted)
    return f"{facts['cpu']} ({facts['cores']} cores; flags: {have})"


if __name__ == "__main__":
    print(json.dumps(machine()))
