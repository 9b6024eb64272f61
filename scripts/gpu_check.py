"""`make gpu-check`: grm's GPU path on one CUDA GPU with no network, in minutes.

    python scripts/gpu_check.py [--dry-run] [--wheelhouse wheelhouse] [--timeout 300] [--only NAME,...]

Before the checks it builds a model store of its own (``GRM_HOME`` in a temporary directory):
``smollm2-135m-instruct`` as a randomly initialised model of SmolLM2's architecture, from the
config and tokenizer of ``WHEELHOUSE/tiny-smollm2`` (``make wheelhouse``) or of the local model
store; no weights travel and nothing is downloaded. Random weights test mechanics, not quality.

The checks, one process each, each bounded by ``--timeout`` seconds:

- ``cuda``: torch sees a GPU; the model's forward and a backward on it;
- ``placement-ppo``: a 1-step sync PPO ``grm run`` with policy (and its critic), reference and a
  judge on one GPU pool (DeepSpeed ZeRO-2): every role of placement.json is on ``cuda``, the
  critic trained;
- ``async-torch``: a 2-step async ``grm run`` with the torch trainer on the GPU;
- ``nccl-weight-group``: the weight-update group of ``engine: sglang, weight_sync: broadcast``
  formed over NCCL with one rank, a tensor broadcast through it;
- ``eval-hf``: ``grm eval --policy`` of the async run's trained policy (hf engine on CUDA), judged;
- ``sglang``: ``tests/integration/orchestrator/test_sglang_gpu.py`` when SGLang is installed (else
  reported as skipped).

Prints one line per check (PASS/FAIL/SKIP, seconds, and the tail of a failure's output), then a
summary; exits 1 when any check failed. ``--dry-run`` prints the checks and their commands and
runs nothing (CI runs it on the CPU: ``make gpu-check --dry-run``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODEL = "smollm2-135m-instruct"
GPU_POOL = "pools={train: {gpus: 1, cpus: 2}}"
COMMON = [
    "train.micro_batch_size=4",
    "algorithm.prompts_per_step=4",
    "rollout.max_new_tokens=16",
    "checkpoint.export=false",
    "--no-live",
]

CUDA_PROBE = """
import torch
from transformers import AutoModelForCausalLM
assert torch.cuda.is_available(), "torch sees no CUDA GPU"
model = AutoModelForCausalLM.from_pretrained(MODEL_DIR).cuda()
ids = torch.randint(0, model.config.vocab_size, (2, 16), device="cuda")
loss = model(ids, labels=ids).loss
loss.backward()
print(f"{torch.cuda.get_device_name(0)}: forward+backward ok, loss {loss.item():.3f}")
"""

NCCL_PROBE = """
import torch
from grm.process import free_port
from grm.training.weight_group import WeightGroup
group = WeightGroup("127.0.0.1", free_port(), 1, "gpu_check", "nccl", timeout_s=60)
sent = group.broadcast([torch.arange(1024, dtype=torch.float32)])
print(f"nccl weight group of one rank: {sent} bytes broadcast")
"""

PLACEMENT_ASSERT = """
import json, sys
from pathlib import Path
run = Path(sys.argv[1])
p = json.loads((run / "placement.json").read_text())
roles = {k: v.get("device") for k, v in p.items() if isinstance(v, dict) and "device" in v}
assert roles and all(str(d).startswith("cuda") for d in roles.values()), roles
# the reference is its own role only where it is not in the policy's actor (same pool: it is)
assert "policy" in roles and any(k.startswith("judge:") for k in roles), roles
# the critic is the value head in the policy's actor: its loss is in the step's metrics
m = json.loads((run / "metrics.jsonl").read_text().splitlines()[-1])
assert m.get("critic_loss", 0) > 0, sorted(m)
print(f"{roles}; critic_loss {m['critic_loss']:.4f}")
"""


def checks(work: Path) -> list[tuple[str, list[list[str]]]]:
    """(name, its commands in order) of every check; ``work`` holds the runs."""
    py, grm = sys.executable, [sys.executable, "-m", "grm"]
    ppo, run = work / "ppo", work / "async"
    judge_on_gpu = "judges=[{spec: builtin:helpfulness-pointwise-logprob, pool: train, weight: 1.0}]"
    sglang = ["-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/integration/orchestrator/test_sglang_gpu.py"]
    return [
        ("cuda", [[py, "-c", CUDA_PROBE.replace("MODEL_DIR", repr(str(work / "grm-home" / "models" / MODEL)))]]),
        (
            "placement-ppo",
            [
                [*grm, "run", "pipelines/ppo-critic.yaml", f"out_dir={ppo}", GPU_POOL, judge_on_gpu, "train.steps=1"]
                + ["algorithm.group_size=2", *COMMON],
                [py, "-c", PLACEMENT_ASSERT, str(ppo)],
            ],
        ),
        (
            "async-torch",
            [
                [*grm, "run", "pipelines/quickstart.yaml", f"out_dir={run}", GPU_POOL, "judges=[{spec: builtin:numeric-answer}]"]
                + ["data.prompts=builtin:arith-prompts", "train.steps=2", "schedule.mode=async", "train.backend.type=torch"]
                + COMMON
            ],
        ),
        ("nccl-weight-group", [[py, "-c", NCCL_PROBE]]),
        (
            "eval-hf",
            [
                [*grm, "eval", "builtin:numeric-answer", "--policy", str(run), "--prompts", "builtin:arith-prompts"]
                + ["--limit", "8", "--out", str(work / "eval"), "--max-new-tokens", "16"]
            ],
        ),
        ("sglang", [[py, *sglang]]),
    ]


def random_store(home: Path, wheelhouse: Path) -> str:
    """``home/models/MODEL``: a random SmolLM2 (config and tokenizer from the wheelhouse's
    ``tiny-smollm2`` or the local store); where they came from."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    sources = [wheelhouse / "tiny-smollm2", Path(os.environ.get("GRM_HOME", Path.home() / ".cache" / "grm")) / "models" / MODEL]
    src = next((s for s in sources if (s / "config.json").is_file()), None)
    if src is None:
        raise SystemExit(f"gpu-check: no SmolLM2 config: run `make wheelhouse` (tiny-smollm2/) or `grm models fetch {MODEL}`")
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(src))
    out = home / "models" / MODEL
    model.save_pretrained(out, safe_serialization=True)
    AutoTokenizer.from_pretrained(src).save_pretrained(out)
    return str(src)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dry-run", action="store_true", help="print the checks and their commands; run nothing")
    ap.add_argument("--wheelhouse", type=Path, default=ROOT / "wheelhouse", help="where tiny-smollm2/ is")
    ap.add_argument("--timeout", type=int, default=300, help="seconds each command may take")
    ap.add_argument("--only", help="comma-separated check names")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="grm-gpu-check-"))
    todo = checks(work)
    if args.only:
        names = set(args.only.split(","))
        unknown = names - {n for n, _ in todo}
        if unknown:
            ap.error(f"--only: unknown check(s) {sorted(unknown)}; the checks: {', '.join(n for n, _ in todo)}")
        todo = [c for c in todo if c[0] in names]
    if args.dry_run:
        print(f"# gpu-check would run {len(todo)} checks (random SmolLM2 in {work}/grm-home, HF_HUB_OFFLINE=1):")
        for name, cmds in todo:
            for cmd in cmds:
                shown = " ".join(c if "\n" not in c else "<inline python>" for c in cmd)
                print(f"{name}: {shown}")
        shutil.rmtree(work, ignore_errors=True)
        return 0
    home = work / "grm-home"
    print(f"# model: random {MODEL} from {random_store(home, args.wheelhouse)}", flush=True)
    env = {**os.environ, "GRM_HOME": str(home), "HF_HUB_OFFLINE": "1", "RAY_AUTH_MODE": "disabled"}
    results = []
    for name, cmds in todo:
        start, status, tail = time.perf_counter(), "PASS", ""
        if name == "sglang" and subprocess.run([sys.executable, "-c", "import sglang"], capture_output=True).returncode:
            status, tail = "SKIP", "sglang is not installed"
        for cmd in cmds if status == "PASS" else []:
            try:
                r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=args.timeout)
            except subprocess.TimeoutExpired:
                status, tail = "FAIL", f"timed out after {args.timeout} s: {cmd[:4]}"
                break
            if r.returncode != 0:
                status, tail = "FAIL", (r.stdout + r.stderr)[-1500:]
                break
            tail = (r.stdout.strip().splitlines() or [""])[-1][:200]
        secs = time.perf_counter() - start
        results.append({"check": name, "status": status, "seconds": round(secs, 1)})
        print(f"{status} {name} ({secs:.0f} s): {tail}", flush=True)
    print(json.dumps({"gpu_check": results}))
    shutil.rmtree(work, ignore_errors=True)
    return 1 if any(r["status"] == "FAIL" for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
