"""The actors that hold frozen models: a reference on a pool of its own, and judges (which host
the reference when the pipeline places it on their pool). Each lives in its pool's placement
group, with its pool's thread count."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import ray

from grm.orchestrator.cores import CoreLedger, CoreShare, NoLedger, ledger, set_threads
from grm.orchestrator.handles import Placement
from grm.orchestrator.role_actor import REFERENCE_DTYPE, actor_device, engine_dtype, where
from grm.orchestrator.types import Judged, Prepared

if TYPE_CHECKING:
    from torch import Tensor

    from grm.config.judge import JudgeSpec
    from grm.judges.types import JudgeResult, Sample


def same_frozen_weights(engine: Any, model: str) -> bool:
    """Whether a judge's hf engine holds exactly the weights a reference of ``model`` would load:
    the same checkpoint, in the reference's dtype, with no weight updates since loading (a judge's
    engine is never updated; its bf16/fp16 LM-head copy does not arise in fp32)."""
    from grm.engines.hf import HFEngine
    from grm.models import resolve_model

    if not isinstance(engine, HFEngine) or engine.dtype_name != REFERENCE_DTYPE or engine.version != 0:
        return False
    return Path(resolve_model(engine.model_id)).resolve() == Path(resolve_model(model)).resolve()


class _HostsReference:
    """A frozen reference model inside an actor: ``logprobs`` of a prepared batch."""

    ref: Any = None
    cores: CoreLedger | NoLedger = NoLedger()
    ref_shared = False
    """True when the reference runs on the judge engine's own module (same weights, same dtype)."""

    def _load_reference(self, model: str, micro_batch_size: int, engine: Any = None) -> None:
        from grm.training.models import ReferenceModel

        module: Any = model
        if engine is not None and same_frozen_weights(engine, model):
            module, self.ref_shared = engine.model, True  # one copy of the weights in this process, not two
        self.ref = ReferenceModel(module, dtype=REFERENCE_DTYPE, micro_batch_size=micro_batch_size, device=actor_device())
        self.cores.watch(self.ref.module)

    def logprobs(self, prepared: Prepared) -> tuple[Tensor, float]:
        """Reference log-probs ``[B, L-1]`` of the batch of ``PolicyActor.prepare`` (passed as its
        object ref, so the pass starts as soon as the batch exists), and the seconds they took."""
        t0 = time.perf_counter()
        with self.cores.busy():
            out = self.ref.logprobs(prepared.batch)
        return out, time.perf_counter() - t0


@ray.remote
class ReferenceActor(_HostsReference):
    """Frozen reference model on its own pool."""

    def __init__(self, model: str, micro_batch_size: int, threads: int, lend: CoreShare | None = None) -> None:
        set_threads(threads)
        self.cores = ledger(lend)
        self._load_reference(model, micro_batch_size)

    def where(self, role: str = "reference") -> Placement:
        return {**where(), "dtype": REFERENCE_DTYPE, "weights": "own"}


@ray.remote
class JudgeActor(_HostsReference):
    """One judge (spec + model) on its pool; Ray restarts it if it dies. Hosts the reference model
    too when the pipeline places the reference on this judge's pool (``reference`` = (model,
    micro-batch size)): Ray runs an actor's calls one at a time, so judging and reference passes
    take turns on the pool's cores."""

    def __init__(
        self,
        spec: JudgeSpec,
        base_dir: str,
        threads: int,
        reference: tuple[str, int] | None = None,
        lend: CoreShare | None = None,
    ) -> None:
        set_threads(threads)
        self.cores = ledger(lend)
        from grm.judges import build_judge
        from grm.judges.runtime import load_engine

        engine = None
        if spec.mode != "rule" and spec.engine.type == "hf":
            from grm.engines import build_engine

            engine = build_engine(spec.engine, spec.model, device=actor_device())
        self.judge = build_judge(spec, base_dir, engine)
        # load the model now, not inside the first timed call
        loaded = load_engine(self.judge)
        self.engine_info = engine_dtype(loaded) if loaded is not None else {}
        self.cores.watch(getattr(engine, "model", None))
        if reference is not None:
            self._load_reference(*reference, engine=engine)

    @ray.method(max_task_retries=0)
    def score_groups(self, groups: Sequence[Sequence[Sample]]) -> Judged:
        """Per group of one prompt's responses, one result per response (the judge's mode decides
        how: one call per response, one listwise call per group, ...), and what the call cost. Not
        retried by Ray when the actor dies: the scheduler re-issues the call at once, to another
        replica if one is up."""
        from grm.judges.cost import costed

        with self.cores.busy():
            return costed(self.judge, self.judge.score_groups, groups)

    @ray.method(max_task_retries=0)
    def score_batch(self, samples: Sequence[Sample]) -> list[JudgeResult]:
        """Each sample scored on its own (a pair as one pairwise call): the judge canary's calls."""
        with self.cores.busy():
            return self.judge.score_batch(samples)

    def pid(self) -> int:
        return os.getpid()

    def where(self, role: str = "judge") -> Placement:
        """Where this actor runs, and the dtype of ``role``'s model here (the judge's engine, or the
        reference's when this actor hosts it)."""
        if role == "reference":
            return {**where(), "dtype": REFERENCE_DTYPE, "weights": "the judge's" if self.ref_shared else "own"}
        return {**where(), **self.engine_info}
