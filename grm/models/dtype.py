"""A config dtype name as a torch dtype (``torch_dtype``), and ``dtype: auto``: fp32 or bf16,
whichever this machine multiplies faster, measured once per machine.

CPUs differ: on one with AVX-512 BF16 (oneDNN's bf16 GEMM kernels) a 300-token prefill of
Qwen2.5-Coder-1.5B ran ~4x faster in bf16 than in fp32 on one thread; on CPUs without it, fp32
measured ~1.9x faster than bf16. So an inference role's dtype is chosen by timing a matmul of a
1.5B model's shape in both dtypes; the result is kept under ``$GRM_HOME/dtype-auto.json``, keyed by
CPU model, flags and torch version, so later processes on the same machine read it instead of
timing again. GPUs take bf16; any other device (``meta`` in placement checks) takes fp32.
"""

from __future__ import annotations

import functools
import hashlib
import json
import platform
import time
from pathlib import Path
from typing import Any

SPEEDUP = 1.2
"""bf16 is chosen when its matmul rate is at least this multiple of fp32's."""
DTYPE_NAMES = ("bf16", "fp32", "bfloat16", "float32")


def torch_dtype(name: str) -> Any:
    """The torch dtype of a config name (``bf16``/``fp32`` or their long forms)."""
    import torch

    table = {"bf16": torch.bfloat16, "bfloat16": torch.bfloat16, "fp32": torch.float32, "float32": torch.float32}
    if name not in table:
        raise ValueError(f"dtype must be one of {', '.join(DTYPE_NAMES)}, got {name!r}")
    return table[name]


def resolve_dtype(name: str, device: Any = None) -> str:
    """``name`` itself, or for ``auto`` the dtype picked for ``device`` (None: the CPU)."""
    if name != "auto":
        return name
    kind = getattr(device, "type", device) or "cpu"
    if kind == "cuda":
        return "bf16"
    if kind != "cpu":
        return "fp32"
    return cpu_choice()["dtype"]


@functools.cache
def cpu_choice() -> dict[str, Any]:
    """The CPU's pick with the measured rates: ``{"dtype", "fp32_gflops", "bf16_gflops", "cpu"}``."""
    from grm.base import GrmError, atomic_write_text, regular_file_bytes
    from grm.models.store import grm_home

    key = machine_key()
    path = grm_home() / "dtype-auto.json"
    try:  # a FIFO put in its place would block a plain read; a huge file is no record grm wrote
        known = json.loads(regular_file_bytes(path, limit=1 << 20) or b"{}")
    except (GrmError, ValueError, RecursionError):
        known = {}
    if isinstance(known, dict) and isinstance(known.get(key), dict):
        return known[key]
    rates = {d: matmul_gflops(d) for d in ("fp32", "bf16")}
    choice = {
        "dtype": "bf16" if rates["bf16"] >= SPEEDUP * rates["fp32"] else "fp32",
        "fp32_gflops": round(rates["fp32"], 1),
        "bf16_gflops": round(rates["bf16"], 1),
        "cpu": cpu_name(),
    }
    known = known if isinstance(known, dict) else {}
    known[key] = choice
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, json.dumps(known, indent=1))
    except OSError:
        pass  # a read-only home: measured again by the next process
    return choice


def matmul_gflops(dtype: str, m: int = 256, k: int = 1536, n: int = 1536, repeats: int = 5) -> float:
    """GFLOP/s of an ``[m, k] @ [k, n]`` matmul in ``dtype`` on this process's torch threads (best
    of ``repeats`` after a warm-up): a prefill's GEMM shape for a 1.5B model."""
    import torch

    t = torch_dtype(dtype)
    a, b = torch.randn(m, k).to(t), torch.randn(k, n).to(t)
    with torch.inference_mode():
        for _ in range(2):
            a @ b
        best = float("inf")
        for _ in range(repeats):
            t0 = time.perf_counter()
            for _ in range(4):
                a @ b
            best = min(best, (time.perf_counter() - t0) / 4)
    return 2 * m * k * n / best / 1e9


def cpu_name() -> str:
    return _cpuinfo().get("model name", platform.processor() or platform.machine())


def machine_key() -> str:
    import torch

    info = _cpuinfo()
    raw = f"{info.get('model name', platform.machine())}|{info.get('flags', '')}|{torch.__version__}"
    return hashlib.sha256(raw.encode()).hexdigest()[:16]


def _cpuinfo() -> dict[str, str]:
    """The first processor's fields of /proc/cpuinfo (empty elsewhere)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return {}
    out: dict[str, str] = {}
    for line in text.split("\n\n")[0].splitlines():
        if ":" in line:
            k, v = line.split(":", 1)
            out.setdefault(k.strip(), v.strip())
    return out
