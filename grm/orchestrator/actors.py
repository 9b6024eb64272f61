"""The policy actor (trainer + rollout engine + colocated reference/critic). Its worker group's
ranks, rendezvous and gathering are in ``grm.orchestrator.policy_group``; what every role actor
shares (device, where it runs) is in ``grm.orchestrator.role_actor``; the reference and judge
actors, which hold frozen models, are in ``grm.orchestrator.frozen_actors``. Each actor lives in
its pool's placement group, with its pool's thread count."""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from functools import partial
from typing import TYPE_CHECKING, Any

import ray

from grm.orchestrator.ckpt_transfer import Shipped, concat, pack, sees, together, unpack
from grm.orchestrator.cores import CoreShare, ledger, set_threads
from grm.orchestrator.handles import Placement
from grm.orchestrator.policy_group import RankOf, gather
from grm.orchestrator.policy_servers import ServerInfo
from grm.orchestrator.role_actor import REFERENCE_DTYPE, where
from grm.orchestrator.rollout_engine import RolloutEngine
from grm.orchestrator.types import AdvantagePlan, Group, Prepared, Rollout, Synced, Trained

if TYPE_CHECKING:
    from ray import ObjectRef
    from ray.actor import ActorHandle
    from torch import Tensor

    from grm.config.pipeline import PipelineSpec
    from grm.config.policy import PolicySpec
    from grm.data.prompts import Prompt
    from grm.orchestrator.episodes import EpisodeRollout
    from grm.training import TrainBatch
    from grm.training.distributed import RankFailure


def cancelled() -> bool:
    """The actor call under way was cancelled (``ray.cancel``): a stopping run abandons its rollouts."""
    return ray.get_runtime_context().is_canceled()


EPISODE_CALLS = 8
"""``episodes`` calls a policy actor runs at once: their episodes share one turn loop, so the next
chunk's or step's episodes take turns while the earlier ones wait on tools."""


# train_progress answers while train runs; episodes, and rollouts over served engines, run beside training
@ray.remote(concurrency_groups={"progress": 1, "episodes": EPISODE_CALLS, "rollouts": 1})
class PolicyActor:
    """Trainer, rollout engine and (when colocated) reference and critic of the policy.

    Its calls run one at a time, except ``train_progress``/``failure`` (answered while a call waits),
    ``rollout_beside`` (a served engine's rollouts, which use no local model) and ``episodes``,
    which run beside the others: every use of the model (a rollout, a batch pass,
    training, a weight sync, save, load, export, each turn of an episode) holds the model lock, so
    an episode's turn is generated between them, never during one."""

    def __init__(
        self,
        cfg: PipelineSpec,
        policy: PolicySpec,
        threads: int,
        with_reference: bool,
        dist: RankOf | None = None,
        lend: CoreShare | None = None,
        env_workers: Sequence[ActorHandle] = (),
    ) -> None:
        """``dist``: where this rank stands in a multi-rank worker group;
        ``lend``: this process's place in the run's core ledger when idle cores are lent
        (``grm.orchestrator.cores``); ``env_workers``: the actors running an ``env:`` run's
        environments (``env.pool``), none when they run in this process."""
        self.env_workers = list(env_workers)
        self.lock = threading.RLock()
        """The model lock (see the class docstring)."""
        set_threads(threads)
        self.cores = ledger(lend)
        self.rank = dist[0] if dist else 0
        if dist is not None:
            # Ray gives each rank only its bundle's GPUs, so the rank's device is the first visible one
            rank, world, addr, port = dist
            os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK="0", MASTER_ADDR=addr, MASTER_PORT=str(port))
        import torch

        from grm.models.device import role_device
        from grm.models.dtype import resolve_dtype
        from grm.models.loading import load_model
        from grm.orchestrator.policy_models import build_models
        from grm.orchestrator.policy_update import algorithm_of

        self.cfg = cfg
        self.policy = policy
        self.algorithm = algorithm_of(cfg)  # built here: the driver holds no tensor code
        self.device = role_device(cfg.pools[cfg.policy.pool].gpus)  # DeepSpeed places its own module
        torch.manual_seed(cfg.seed)
        t = cfg.train
        train_model, self.tok = load_model(policy.model, "fp32")
        rollout_dtype = resolve_dtype(policy.engine.dtype, self.device) if policy.engine.type == "hf" else None
        # hf: generate with the trainer's module (with adapters the engine holds its own merged copy)
        self.shared = rollout_dtype == "fp32" and t.backend.type == "torch" and t.lora is None
        ranks = dist[1] if dist else 1
        self.rollout_engine = RolloutEngine(policy, self.rank, ranks, self.device, self.tok, train_model, self.shared)
        models = build_models(cfg, policy, self.algorithm, train_model, self.device, with_reference)
        self.trainer, self.reference, self.critic = models.trainer, models.reference, models.critic
        self.pad_id = self.tok.pad_token_id if self.tok.pad_token_id is not None else self.tok.eos_token_id
        self.episode_rollout: EpisodeRollout | None = None
        """Runs the episodes of an ``env:`` pipeline, made on the first rollout."""
        self.cores.watch(
            train_model,
            getattr(self.engine, "model", None),
            getattr(self.reference, "module", None),
            models.critic_module,
        )

    @property
    def engine(self) -> Any:
        """The rollout engine (``grm.orchestrator.rollout_engine``); None on an sglang policy's ranks but 0."""
        return self.rollout_engine.engine

    def launched_servers(self) -> list[ServerInfo]:
        """The SGLang servers this rank launched (``grm.orchestrator.policy_servers``)."""
        return self.rollout_engine.servers

    def connect_servers(self, servers: Sequence[ServerInfo]) -> None:
        """(rank 0) The rollout engine over every rank's launched servers, in replica order."""
        self.rollout_engine.connect(servers)

    @contextmanager
    def _model(self) -> Iterator[None]:
        """Holding the model: its lock, and the core ledger's busy mark (``grm.orchestrator.cores``)."""
        with self.lock, self.cores.busy():
            yield

    def where(self, role: str = "policy") -> Placement:
        """Where this actor runs, and the dtype of ``role``'s model here (the rollout engine's for
        the policy; the reference's when it is colocated)."""
        if role == "reference":
            weights = "policy's" if self.cfg.train.lora is not None else "own"  # LoRA: the base weights, adapters off
            return {**where(), "device": str(self.device), "dtype": REFERENCE_DTYPE, "weights": weights}
        return {**where(), "device": str(self.device), **self.rollout_engine.placement()}

    # ------------------------------------------------------------- rollout
    def rollout(
        self,
        prompts: Sequence[Prompt],
        keys: Sequence[str],
        n: int,
        seed: int,
        others: Sequence[ObjectRef[tuple[list[Group], float]]] = (),
    ) -> tuple[list[Group], float]:
        """``n`` responses per prompt with the current weights, as one group per prompt keyed by
        ``keys``; returns (groups, seconds). Rank 0 of a group appends the ``others`` ranks' parts."""
        from grm.orchestrator.policy_group import gather_rollouts

        t0 = time.perf_counter()
        if not prompts:
            return gather(([], 0.0), others, gather_rollouts)
        if self.cfg.env is not None:
            groups = self._episodes(prompts, keys, n, seed)  # each turn holds the model
        else:
            with self._model():
                groups = self._rollout(prompts, keys, n, seed)
        return gather((groups, time.perf_counter() - t0), others, gather_rollouts)

    @ray.method(concurrency_group="episodes")
    def episodes(
        self,
        prompts: Sequence[Prompt],
        keys: Sequence[str],
        n: int,
        seed: int,
        others: Sequence[ObjectRef[tuple[list[Group], float]]] = (),
    ) -> tuple[list[Group], float]:
        """``rollout`` of an ``env:`` pipeline, beside this actor's other calls: the episodes of
        every ``episodes`` call in flight share one turn loop (``grm.envs.turn_loop``)."""
        return self.rollout(prompts, keys, n, seed, others)

    @ray.method(concurrency_group="rollouts")
    def rollout_beside(
        self,
        prompts: Sequence[Prompt],
        keys: Sequence[str],
        n: int,
        seed: int,
        others: Sequence[ObjectRef[tuple[list[Group], float]]] = (),
    ) -> tuple[list[Group], float]:
        """``rollout`` over a served engine (``schedule.interruptible``), beside this actor's other
        calls and without the model lock, which guards only this process's models: the servers
        generate while the trainer trains, and a sync meanwhile pauses the generations in flight,
        which go on with the new weights (``grm.engines.sglang``)."""
        from grm.orchestrator.policy_group import gather_rollouts

        t0 = time.perf_counter()
        groups = self._rollout(prompts, keys, n, seed) if prompts else []
        return gather((groups, time.perf_counter() - t0), others, gather_rollouts)

    def _episodes(self, prompts: Sequence[Prompt], keys: Sequence[str], n: int, seed: int) -> list[Group]:
        """``n`` episodes per prompt (``env:``), every turn on this engine: one group per prompt."""
        from grm.orchestrator.episodes import run_groups

        with self.lock:  # two first calls at once make one
            if self.episode_rollout is None:
                from grm.orchestrator.episodes import EpisodeRollout

                self.episode_rollout = EpisodeRollout(
                    self.cfg, self.engine, self.tok, self.policy.generation.stop, self.env_workers, hold=self._model
                )
        return run_groups(self.episode_rollout, prompts, keys, n, seed, cancelled)

    def _rollout(self, prompts: Sequence[Prompt], keys: Sequence[str], n: int, seed: int) -> list[Group]:
        from grm.orchestrator.single_turn import sample_groups

        return sample_groups(self.engine, self.cfg, self.policy, prompts, keys, n, seed, cancelled)

    def answers(self, prompts: Sequence[Prompt], max_new_tokens: int) -> list[str]:
        """Greedy answers of the current weights to ``prompts``, one each, in order: the held-out
        check's (``grm.orchestrator.heldout``), never trained on."""
        from grm.orchestrator.single_turn import greedy_answers

        with self._model():
            return greedy_answers(self.engine, self.policy, prompts, max_new_tokens, cancelled)

    # ------------------------------------------------------------- reference, values
    def prepare(
        self, rollouts: Sequence[Rollout], positions: Sequence[int] | None = None, others: Sequence[ObjectRef[Prepared]] = ()
    ) -> Prepared:
        """Token batch with old (trainer) log-probs, behaviour (rollout) log-probs, reference log-probs
        when the reference is colocated, and critic values for PPO, and the seconds they took. A rank
        of a group gets its shard of the rollouts and their ``positions``; rank 0 puts the shards'
        batches back together in the rollouts' order."""
        from grm.orchestrator.policy_group import gather_prepared

        with self._model():
            batch, secs = self._prepare(rollouts)
        if positions is None:
            return Prepared(batch, secs)
        if self.rank:
            return Prepared(batch, secs, list(positions))
        return gather(Prepared(batch, secs, list(positions)), others, partial(gather_prepared, pad_id=self.pad_id))

    def _prepare(self, rollouts: Sequence[Rollout]) -> tuple[TrainBatch, float]:
        import torch

        from grm.training import TrainBatch

        t0 = time.perf_counter()
        # an empty completion is one pad token; an episode's (one that ended before its first turn,
        # its prompt empty too) is masked out of the loss
        batch = TrainBatch.from_sequences(
            [r.prompt_ids or [self.pad_id] for r in rollouts],
            [r.token_ids or [self.pad_id] for r in rollouts],
            pad_id=self.pad_id,
            ids=[r.id for r in rollouts],
            completion_masks=[r.mask if r.token_ids else [0] if r.mask is not None else None for r in rollouts],
            behaviour_logprobs=[r.logprobs or [0.0] for r in rollouts],
        )
        if self.cfg.train.share_prompts:  # each distinct prompt runs once in the passes below and in training
            batch = batch.with_fields(prompt_len=torch.tensor([len(r.prompt_ids) or 1 for r in rollouts], dtype=torch.long))
        # With one optimizer step per batch the policy that scores the batch in training is the one
        # that would compute old log-probs here: the loss uses its detached log-probs instead (one
        # forward saved). Several steps per batch, or KL in the reward, need them now.
        fields = {"old_logprobs": self.trainer.logprobs(batch)} if self.algorithm.needs_old_logprobs else {}
        if self.reference is not None:
            fields["ref_logprobs"] = self.reference.logprobs(batch)
        if self.critic is not None:
            fields["old_values"] = self.critic.logprobs(batch)
        return batch.with_fields(**fields), time.perf_counter() - t0

    # ------------------------------------------------------------- train, sync
    def train(
        self,
        prepared: Prepared,
        reference: tuple[Tensor, float] | None,
        plan: AdvantagePlan,
        others: Sequence[ObjectRef[Trained]] = (),
    ) -> Trained:
        """Every optimizer step of one batch (policy, then critic); the engine's version advances by
        one. ``prepared`` and ``reference`` arrive as the refs of the batch pass and of the remote
        reference's pass (None when colocated): the batch gets its reference log-probs and, from
        ``plan``, its advantages here, so the tensors never pass through the driver. Each rank of a
        group gets the whole batch and trains its shard of it (the trainer picks it)."""
        from grm.orchestrator.policy_group import gather_first
        from grm.orchestrator.policy_update import row_advantages, train_on_batch, with_advantages
        from grm.training.core import MICRO_BATCHES

        batch, seconds = prepared.batch, prepared.seconds
        if reference is not None:
            batch, seconds = batch.with_fields(ref_logprobs=reference[0]), seconds + reference[1]
        batch, stats, per_turn = with_advantages(self.algorithm, batch, plan)
        t0 = time.perf_counter()
        MICRO_BATCHES.reset()
        self.cores.take_peak()
        with self._model():
            metrics = train_on_batch(self.trainer, self.critic, self.algorithm, batch)
            if self.shared:
                self.engine.version = self.version_of_trainer()  # the engine already holds the new weights
        self.last_micro_batches = MICRO_BATCHES.done
        metrics["train_seconds"] = time.perf_counter() - t0
        # what this call ran with: sync, the node's cores; async, its share plus any cores lent while it ran
        metrics["threads_training"] = self.cores.take_peak()
        trained = Trained(metrics, row_advantages(batch), stats, per_turn, seconds)
        return gather(trained, others, gather_first)

    @ray.method(concurrency_group="progress")
    def train_progress(self) -> tuple[int, int | None]:
        """(micro-batches this rank has run in the ``train`` call under way, how many the previous
        call ran, None before the first): what the live display shows while a step trains."""
        from grm.training.core import MICRO_BATCHES

        return MICRO_BATCHES.done, getattr(self, "last_micro_batches", None)

    def version_of_trainer(self) -> int:
        """Policy version = batches trained (a batch may take several optimizer steps)."""
        return self.trainer.step_count // self.algorithm.steps_per_batch

    def sync(self, others: Sequence[ObjectRef[Synced]] = ()) -> Synced:
        """Push trainer weights into the rollout engine (in process); the engine's version advances
        to the trainer's, which is returned with the seconds of the push. Every rank of a group
        takes part (ZeRO-3 gathers the weights from all of them)."""
        from grm.orchestrator.policy_group import gather_synced

        with self.lock:
            version = self.version_of_trainer()
            secs, by_disk = self.rollout_engine.push(self.trainer, version)
        return gather(Synced(version, secs, by_disk), others, gather_synced)

    @ray.method(concurrency_group="progress")  # answers while a call waits in a collective
    def failure(self) -> RankFailure | None:
        """What this rank's trainers saw fail first (``grm.training.distributed.RankFailure``), or None:
        how the driver tells which rank a group's failure started on."""
        from grm.training.distributed import first_failure

        return first_failure()

    def save(self, path: str, token: str | None = None, others: Sequence[ObjectRef[Shipped]] = ()) -> Shipped:
        """Collective: each rank writes its ZeRO shard under ``path``. A rank that does not see the
        driver's marker there (``token``: no shared filesystem) wrote it to its own node's disk and
        sends the files back instead (``grm.orchestrator.ckpt_transfer``); the ranks' shipments."""
        with self.lock:
            self.trainer.save(os.path.join(path, "policy"))
            if self.critic is not None:
                self.critic.save(os.path.join(path, "critic"))
        own = [] if sees(path, token) else pack(path)
        together()  # ranks on one such node share its copy: every one has packed before any deletes it
        if own:
            shutil.rmtree(path, ignore_errors=True)
        return gather(own, others, concat)

    def sees(self, path: str, token: str, others: Sequence[ObjectRef[bool]] = ()) -> bool:
        """Collective: every rank sees the driver's checkpoint ``path`` (its marker ``token``)."""
        return gather(sees(path, token), others, all)

    def load(
        self, path: str, shipped: Shipped | None = None, token: str | None = None, others: Sequence[ObjectRef[int]] = ()
    ) -> int:
        """Collective: the checkpoint at ``path`` into trainer, critic and engine; a rank that does
        not see it (``token``) first writes the driver's ``shipped`` files there, and deletes them after."""
        from grm.orchestrator.policy_group import gather_first

        local = tempfile.mkdtemp(prefix="grm-checkpoint-") if shipped is not None and not sees(path, token) else None
        with self.lock:
            try:
                if local is not None:  # this rank's own copy (ranks on one node must not share a half-deleted one)
                    unpack(shipped or [], local)
                    path = local
                self.trainer.load(os.path.join(path, "policy"))
                if self.critic is not None:
                    self.critic.load(os.path.join(path, "critic"))
            finally:
                if local is not None:
                    shutil.rmtree(local, ignore_errors=True)
            self.sync()
        return gather(self.version_of_trainer(), others, gather_first)

    def export(self, path: str, others: Sequence[ObjectRef[float]] = ()) -> float:
        """Full weights as safetensors (rank 0 writes; every rank takes part in the ZeRO-3 gather)."""
        from grm.models.weights import save_weights
        from grm.orchestrator.policy_group import gather_max

        with self.lock:
            state = self.trainer.state_dict()
            secs = save_weights(state, path, self.version_of_trainer()) if self.rank == 0 else 0.0
        return gather(secs, others, gather_max)
