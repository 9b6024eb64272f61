"""How SGLang servers are started for a policy: the command line of one server, the plan that
splits a worker group's GPUs into servers (``server_plan``), starting a rank's share
(``launch_servers``), and the directory disk weight syncs go through (``weight_sync_dir``)."""

from __future__ import annotations

import atexit
import importlib.util
import os
import shutil
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grm.engines.base import EngineError
from grm.engines.server_process import ServerProcess
from grm.process import free_port

INSTALL_HINT = "pip install 'grm-rlaif[sglang]' (SGLang needs CUDA GPUs)"


def launch_command(model_path: str, port: int, spec: Any, host: str = "127.0.0.1") -> list[str]:
    """The command that starts one server: ``spec.launcher`` (default: this Python's
    ``-m sglang.launch_server``), then the flags grm sets, then ``spec.extra_args``."""
    base = list(getattr(spec, "launcher", None) or [sys.executable, "-m", "sglang.launch_server"])
    cmd = base + [
        "--model-path",
        model_path,
        "--host",
        host,
        "--port",
        str(port),
        "--tp-size",
        str(spec.tp),
        "--dtype",
        spec.dtype,
        "--mem-fraction-static",
        str(spec.mem_fraction_static),
    ]
    return cmd + list(spec.extra_args)


@dataclass(frozen=True)
class ServerSlot:
    """Where launched server ``replica`` runs: on policy rank ``rank`` (its bundle), on that rank's
    visible GPUs ``gpus`` (indices into them; empty on a CPU pool)."""

    replica: int
    rank: int
    gpus: tuple[int, ...]


def server_plan(replicas: int, tp: int, ranks: int, gpus_per_rank: int) -> list[ServerSlot]:
    """The launched servers of a policy on ``ranks`` bundles of ``gpus_per_rank`` GPUs each: server
    ``j`` on rank ``j % ranks`` (each rank launches its own, on the GPUs Ray gave it), the ``k``-th
    server of a rank on its GPUs ``[k*tp, (k+1)*tp)``, wrapping round when more servers than fit
    share them (colocated, by ``mem_fraction_static``). ``EngineError`` when one server's ``tp``
    exceeds a bundle's GPUs: a server cannot span bundles (they may be on different nodes)."""
    if gpus_per_rank and tp > gpus_per_rank:
        raise EngineError(
            f"engine.tp {tp} exceeds the {gpus_per_rank} GPU(s) of one bundle of the policy's pool: "
            "a server's GPUs must be in one bundle (raise the pool's gpus per bundle, or lower tp)"
        )
    slots = []
    for j in range(replicas):
        rank, k = j % ranks, j // ranks
        first = (k * tp) % gpus_per_rank if gpus_per_rank else 0
        slots.append(ServerSlot(j, rank, tuple(range(first, first + tp)) if gpus_per_rank else ()))
    return slots


def visible_gpus() -> list[str]:
    """This process's GPUs as CUDA names them (Ray sets ``CUDA_VISIBLE_DEVICES`` to the bundle's)."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        return [g for g in env.split(",") if g.strip()]
    try:
        import torch

        return [str(i) for i in range(torch.cuda.device_count())]
    except ImportError:
        return []


def launch_servers(spec: Any, model_path: str, slots: Sequence[ServerSlot], host: str = "127.0.0.1") -> list[ServerProcess]:
    """Start ``slots``' servers in this process (each on its GPUs of this process's visible ones),
    all at once, then wait until each answers ``/health``."""
    if not getattr(spec, "launcher", None) and importlib.util.find_spec("sglang") is None:
        raise EngineError(f"engine type sglang launches SGLang servers, but sglang is not installed: {INSTALL_HINT}")
    gpus = visible_gpus()
    servers = []
    for slot in slots:
        env = None
        if slot.gpus:
            if max(slot.gpus) >= len(gpus):
                raise EngineError(f"server {slot.replica} needs GPUs {list(slot.gpus)} of this bundle, which has {len(gpus)}")
            env = {**os.environ, "CUDA_VISIBLE_DEVICES": ",".join(gpus[g] for g in slot.gpus)}
        port = free_port()
        url = f"http://{host}:{port}"
        command = launch_command(model_path, port, spec, host)
        servers.append(ServerProcess(command, url, timeout_s=spec.launch_timeout_s, health_path="/health", env=env, wait=False))
    for server in servers:
        server.wait_healthy()
    return servers


SYNC_PREFIX = "grm-sglang-weights-"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def weight_sync_dir(root: str | None = None) -> Path:
    """A fresh directory for disk weight syncs, named after this process, removed at its exit.

    A process killed without running exit handlers (Ray ends actors with SIGKILL at shutdown)
    leaves its directory behind, hundreds of MB a run: the next one removes every directory whose
    owner process is gone."""
    base = Path(root or tempfile.gettempdir())
    for old in base.glob(f"{SYNC_PREFIX}*"):
        pid = old.name[len(SYNC_PREFIX) :].split("-", 1)[0]
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(old, ignore_errors=True)
    path = Path(tempfile.mkdtemp(prefix=f"{SYNC_PREFIX}{os.getpid()}-", dir=base))
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path
