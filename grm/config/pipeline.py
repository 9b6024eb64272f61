"""Pipeline config (``pipelines/*.yaml``): pools, roles, judges, data, algorithm, schedule."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, Field, ValidationInfo, field_validator, model_validator

from grm.config.algorithm import AlgorithmSpec, GRPOSpec
from grm.config.base import MAX_TOKENS, Seconds, Strict, Temperature, check_file
from grm.config.env import EnvSpec
from grm.config.judge_checks import CanarySpec, GateSpec, check_source
from grm.config.names import SafeName, check_out_dir
from grm.config.run_options import CheckpointSpec, FaultSpec, HeldoutSpec, LoggingSpec


class PoolSpec(Strict):
    """A named set of resources; becomes one Ray placement group."""

    cpus: int = Field(1, ge=0, le=4096)
    """CPU cores reserved for the pool (also the torch thread count of its actors)."""
    gpus: int = Field(0, ge=0, le=1024)
    """GPUs reserved for the pool."""
    nodes: int = Field(1, ge=1, le=4096)
    """Nodes the pool spans (resources above are per node)."""
    resources: dict[str, Annotated[float, Field(ge=0)]] = {}
    """Extra Ray custom resources per node."""
    place_wait_s: Seconds = Field(60.0, gt=0)
    """Seconds to wait for Ray to reserve the pool before the run stops naming what holds the
    resources (a cluster that adds nodes on demand may need minutes)."""


class RoleSpec(Strict):
    pool: str
    """Name of a pool in ``pools``; roles sharing a pool are colocated."""


class PolicyRole(RoleSpec):
    spec: str
    """Policy spec: path relative to this file, or builtin:NAME."""
    overrides: list[str] = []
    """``key.path=value`` overrides applied to the policy spec (e.g. ``engine.type=sglang``)."""

    @field_validator("spec")
    @classmethod
    def _exists(cls, v: str, info: ValidationInfo) -> str:
        return check_file(v, info, "policy")


class JudgeRole(Strict):
    spec: str
    """Judge spec: path relative to this file, or builtin:NAME."""
    pool: str | None = None
    """Pool for the judge's model; rule verifiers need none."""
    weight: float = 1.0
    """Weight of this judge's normalised score in the reward."""
    required: bool = True
    """A masked score from a required judge masks the sample; optional judges are skipped."""
    overrides: list[str] = []
    """``key.path=value`` overrides applied to the judge spec (e.g. ``sampling.n=1``)."""
    replicas: int = Field(1, ge=1, le=1024)
    """Judge actors started on the judge's pool, each one process with its share of the pool's
    CPUs/GPUs. Each call (one rollout chunk's groups) goes to the least-loaded live replica; the
    spec's ``limits.max_concurrent_calls`` applies per replica. Needs a pool."""
    gate: GateSpec | None = None
    """Evaluate the judge on labelled pairs before training and stop the run (before the policy is
    loaded) if its accuracy is below ``gate.min_accuracy``; None: no gate."""
    canary: CanarySpec | None = None
    """Re-score a fixed labelled set every ``canary.every`` steps during training (metrics
    ``canary/<judge>/...``); None: no canary."""
    cache: bool = True
    """(pointwise and checklist judges) Keep each judgment, keyed by the judge spec and the sample's
    content, and answer a sample judged before from it (``RUN/judge_cache/``, kept across
    ``--resume``; ``judge_cache/<judge>/...`` metrics); other modes are never cached."""

    @field_validator("spec")
    @classmethod
    def _exists(cls, v: str, info: ValidationInfo) -> str:
        return check_file(v, info, "judges")

    @model_validator(mode="after")
    def _replicas_need_pool(self) -> JudgeRole:
        if self.replicas > 1 and self.pool is None:
            raise ValueError(
                f"replicas: {self.replicas} needs a pool: a judge without one (a rule verifier) runs in the driver process"
            )
        return self


class DataSpec(Strict):
    prompts: str
    """Prompt source: a .json/.jsonl/.csv/.parquet file, a saved datasets dir, or builtin:NAME."""
    prompt_field: str = "prompt"
    """Column holding the prompt text."""
    reference_field: str | None = "reference"
    """Column holding a reference answer (for reference-guided judges and verifiers), if any."""
    checklist_field: str | None = None
    """Column holding each prompt's checklist, for checklist judges reading theirs from the data
    (``checklist.source: data``): a list of yes/no questions, or of ``{question, weight}`` objects
    (JSON text in a CSV cell). Every row must have one; a missing or malformed cell is an error
    naming its row when the data loads. None: no checklist is read."""
    constraints_field: str | None = None
    """Column holding each prompt's verifiable constraints, for the ``constraints`` rule verifier:
    a list of ``{type, ...args}`` (``grm.data.constraints``; JSON text in a CSV cell). Every row must
    have one; a missing or malformed cell is an error naming its row when the data loads. None: none
    is read."""
    judge_prompts: str | None = None
    """Train a judge (``pipelines/judge-grpo.yaml``): the prompts are labelled pairs (``prompt``,
    ``response_a``, ``response_b``, ``label`` 1 or 2; LLMBar's and the builtin pair sets' columns are
    mapped as ``grm eval`` maps them) rendered through this pairwise judge spec's prompt (path or
    ``builtin:NAME``) in both orders. Each order is one prompt (the judge's system prompt and prefill
    included) whose reference is the verdict that order should get (``A`` or ``B``), for the
    ``verdict`` rule verifier; the two orders of a pair are kept next to each other and in one step
    (``prompts_per_step`` must be even). ``prompt_field``, ``reference_field`` and the checklist and
    constraint columns are then not read."""
    judge_baseline: Literal["pair", "order"] = "pair"
    """With ``judge_prompts``: which responses share a group-relative baseline (GRPO's mean and
    std, RLOO's leave-one-out). ``pair``: the critiques of both orders of a pair, so a judge that
    names the same position whatever the order gets a positive advantage in one order and a
    negative one in the other (with ``order``, each order's critiques agree, and such a judge sees
    no advantage at all). ``order``: each order's critiques alone, like any prompt's group."""
    shuffle: bool = True
    """Shuffle prompts every epoch with the pipeline seed (a judge's pairs: the pairs, each pair's two
    orders staying together)."""
    limit: int | None = Field(None, ge=1, le=10**9)
    """Use only the first N prompts of the source (before shuffling)."""


class RolloutSpec(Strict):
    max_new_tokens: int = Field(64, ge=1, le=MAX_TOKENS)
    """Tokens per response at most."""
    temperature: Temperature = 1.0
    """Sampling temperature of the policy's rollouts; 0 is greedy (every sample of a group alike)."""
    top_p: float = Field(1.0, gt=0, le=1)
    """Nucleus sampling mass of the policy's rollouts, in (0, 1]; 1 keeps every token."""
    greedy_anchor: bool = False
    """Also sample one greedy response per prompt, never trained on, for pairwise judges that
    compare a group with it (``groups.anchor: greedy``); turned on when such a judge is used."""


class BackendSpec(Strict):
    type: Literal["deepspeed", "torch"] = "deepspeed"
    """The policy's trainer: ``deepspeed`` (ZeRO data parallel over ``ranks``) or ``torch`` (plain
    AdamW in one process, for tiny runs)."""
    zero_stage: Literal[0, 1, 2, 3] = 2
    """(deepspeed) ZeRO stage."""
    dtype: Literal["bf16", "fp32"] = "bf16"
    """(deepspeed) Training precision: ``bf16`` turns on DeepSpeed's bf16 mode, ``fp32`` keeps full
    precision. The torch backend always trains in fp32."""
    ranks: int = Field(1, ge=1, le=4096)
    """Data-parallel trainer ranks (processes) in the training pool."""
    deepspeed_config: dict | None = None
    """Raw DeepSpeed config block merged over the generated one."""
    collective_timeout_s: float = Field(1800.0, gt=0, le=7 * 86400)
    """(deepspeed) Seconds a rank waits for the others in one collective (and at the start) before it
    fails. A rank that raises stops the others at once; this bounds a rank that hangs or dies
    silently (NCCL). Leave room for rank 0 writing a checkpoint while the others wait."""


class LoraSpec(Strict):
    """Low-rank adapters (LoRA, through ``peft``) on the policy: only the adapters' weights train and
    are checkpointed; engines get the merged weights on every sync; ``grm export`` writes the merged
    model (or, with ``--adapter``, the adapter alone). The reference is the base model, as without."""

    r: int = Field(16, ge=1, le=4096)
    """Rank of each adapter."""
    alpha: float = Field(32.0, gt=0)
    """Scale numerator: an adapter's update is ``B A alpha / r``."""
    dropout: float = Field(0.0, ge=0, lt=1)
    """Dropout on the adapters' input in training (0 keeps the training pass equal to the merged model's)."""
    target_modules: list[str] | Literal["all-linear"] = ["q_proj", "k_proj", "v_proj", "o_proj"]
    """Module names (the last part of a name, as ``peft`` matches them) that get adapters, or
    ``all-linear`` (every linear layer but the output head)."""

    @field_validator("target_modules")
    @classmethod
    def _some(cls, v: list[str] | str) -> list[str] | str:
        if isinstance(v, list) and (not v or any(not m or len(m) > 128 for m in v)):
            raise ValueError("name at least one module (1-128 characters each), or 'all-linear'")
        return v


class TrainSpec(Strict):
    steps: int = Field(20, ge=1, le=10**7)
    """Training steps (one step = one batch of prompts_per_step x group_size sequences)."""
    lr: float = Field(1e-6, gt=0, le=1)
    """Peak learning rate."""
    warmup_steps: int = Field(0, ge=0, le=10**7)
    """Training steps (batches, not optimizer steps) over which the LR rises linearly to ``lr``; 0: none."""
    lr_schedule: Literal["constant", "linear", "cosine"] = "constant"
    """LR after warmup: constant, or linear/cosine decay to 0 over ``steps``."""
    micro_batch_size: int = Field(4, ge=1, le=65536)
    """Sequences per forward/backward on one rank; gradients accumulate to the global batch."""
    max_grad_norm: float = Field(1.0, gt=0)
    """Gradients are clipped to this global L2 norm before each optimizer step (policy and critic)."""
    share_prompts: bool = True
    """Run each distinct prompt of a micro-batch once in the training, old-log-prob and reference
    passes, the group's samples going on from its keys/values (a GRPO group of n samples shares its
    prompt). The same numbers as a full forward per sample up to float rounding, and fewer FLOPs by
    (n-1)/n of the prompt tokens; false runs every row whole."""
    backend: BackendSpec = BackendSpec()
    """The policy's trainer: backend type, ranks, precision, ZeRO stage."""
    lora: LoraSpec | None = None
    """Train low-rank adapters instead of every weight (``LoraSpec``); None: full fine-tuning."""

    @model_validator(mode="after")
    def _lora_backend(self) -> TrainSpec:
        if self.lora is not None and self.backend.type == "deepspeed" and self.backend.zero_stage == 3:
            raise ValueError(
                "train.lora: ZeRO stage 3 is not supported with adapters (merging needs whole layers); use zero_stage 0-2"
            )
        return self


class ScheduleSpec(Strict):
    mode: Literal["sync", "async"] = "sync"
    """sync: strictly on-policy; async: rollout of step t+1 overlaps judging/training of step t."""
    max_staleness: int = Field(1, ge=0, le=1024)
    """(async) η: rollouts run at most this many steps ahead of training, so a sample lags the
    weights it is trained from by at most this many versions, counted from its first token.
    0: nothing runs ahead, exactly sync mode's schedule."""
    interruptible: bool = False
    """(async, a served policy engine: ``policy.engine.type: sglang``) rollouts run beside the
    policy's training, and a weight sync does not wait for the generations in flight: they pause,
    take the new weights and go on, so one response may span versions (each token's version is
    recorded; ``rollout/tokens_lag_K``: the share of a step's tokens sampled K versions behind).
    Off: a sync waits for the rollout call under way, which waits for its longest response."""
    stream_prompts: int | None = Field(None, ge=1, le=65536)
    """Prompts per rollout chunk: judges start on a chunk's groups as soon as it is generated.
    Default: the whole step in one chunk. Smaller chunks let judging start earlier but batch the
    rollout and the judges less; on CPU pools batching wins (peer benchmark, 8 prompts x 4: one
    chunk 54 s/step, chunks of 2 prompts 76 s/step, async)."""
    sync_threads: Literal["node", "pool"] = "node"
    """(sync mode) torch threads of each phase. ``node``: a phase that runs alone also takes the
    cores of the idle pools on its node (rollout and training use the judge pool's cores, judging
    the policy pool's; the judges of one node share them), and the policy's batch pass waits for the
    judges instead of running beside them. ``pool``: each process keeps its pool's share, as in
    async mode, where phases overlap by design. With ``stream_prompts`` rollout chunks overlap
    judging, so phases keep their pool's share there too."""

    overlap_threads: Literal["lend", "pool"] = "lend"
    """(when phases overlap: async mode, or ``stream_prompts``) torch threads of each process.
    ``lend``: a process keeps its pool's share while the run's other processes on its node are
    busy, and takes the cores of those that wait (a policy waiting for the judges lends its cores
    to them, and the other way round), read before each forward call (``grm.orchestrator.cores``).
    ``pool``: each process keeps its pool's share throughout."""

    @property
    def ahead(self) -> int:
        """Steps whose rollouts are queued before the step in flight is trained: async's η, sync's 0."""
        return self.max_staleness if self.mode == "async" else 0

    @property
    def lends_cores(self) -> bool:
        """True when processes whose phases overlap lend each other their idle cores."""
        return self.overlap_threads == "lend" and (self.ahead > 0 or self.stream_prompts is not None)

    @property
    def phases_alone(self) -> bool:
        """True when each phase of a step runs with nothing beside it and takes its node's cores
        (sync mode, or async with η = 0, which is the same schedule)."""
        return self.ahead == 0 and self.sync_threads == "node" and self.stream_prompts is None

    @model_validator(mode="after")
    def _interruptible_is_async(self) -> ScheduleSpec:
        if self.interruptible and self.mode != "async":
            raise ValueError("interruptible: rollouts run beside training only in mode: async")
        return self


class PipelineSpec(Strict):
    """A full RLAIF run: ``grm run PIPELINE.yaml``."""

    name: SafeName
    """Names the run directory (runs/NAME-TIMESTAMP): letters, digits, '.', '_', '-'."""
    seed: int = Field(0, ge=0, lt=2**63)
    """Seed of the run (torch in every actor, prompt shuffling); torch takes at most 64 bits."""
    pools: dict[str, PoolSpec]
    """Named resource pools (each one Ray placement group); roles name the pool they run on."""
    policy: PolicyRole
    """The trained policy: its spec and its pool (trainer, rollout engine, colocated reference)."""
    reference: RoleSpec | None = None
    """Frozen reference model placement (needed when kl.coef > 0)."""
    judges: list[JudgeRole] = Field(min_length=1)
    """The judges whose weighted, normalised scores make the reward (at least one)."""
    data: DataSpec
    """The prompt set the rollouts draw from."""
    algorithm: AlgorithmSpec = GRPOSpec()
    """RL algorithm and the global batch sizes (``type`` picks the variant; default grpo)."""
    rollout: RolloutSpec = RolloutSpec()
    """How the policy samples its responses during the run (each turn's, in an episode)."""
    env: EnvSpec | None = None
    """Multi-turn, tool-using episodes instead of single answers: the environment each prompt row
    starts (``grm.envs``) and the limits of an episode. None: one answer per prompt."""
    train: TrainSpec = TrainSpec()
    """Steps, optimizer and trainer backend."""
    schedule: ScheduleSpec = ScheduleSpec()
    """Sync or async steps, rollout chunking and thread sharing between phases."""
    checkpoint: CheckpointSpec = CheckpointSpec()
    """How often checkpoints are written and how many are kept."""
    logging: LoggingSpec = LoggingSpec()
    """Metrics to Weights & Biases beside TensorBoard (``logging: {wandb: {project: ...}}``)."""
    faults: FaultSpec = FaultSpec()
    """Judge deadlines, judge restarts and the masked share that stops the run."""
    heldout: HeldoutSpec | None = None
    """A before/after check of the policy on held-out prompts, rule-scored; None: none."""
    out_dir: Annotated[str | None, AfterValidator(check_out_dir)] = None
    """Run directory; default runs/NAME-TIMESTAMP under the current directory
    (``grm.config.names.run_dir``)."""

    @field_validator("data")
    @classmethod
    def _data_exists(cls, v: DataSpec, info: ValidationInfo) -> DataSpec:
        check_source(v.prompts, info)
        return v

    @model_validator(mode="after")
    def _invariants(self) -> PipelineSpec:
        roles = {"policy": self.policy.pool}
        if self.reference:
            roles["reference"] = self.reference.pool
        for i, j in enumerate(self.judges):
            if j.pool:
                roles[f"judges[{i}]"] = j.pool
        if self.env is not None and self.env.pool is not None:
            roles["env"] = self.env.pool
        for role, pool in roles.items():
            if pool not in self.pools:
                raise ValueError(f"{role}.pool '{pool}' is not a declared pool (pools: {', '.join(self.pools)})")
        a = self.algorithm
        batch = a.prompts_per_step * a.group_size
        per_step = self.train.micro_batch_size * self.train.backend.ranks * a.mini_batches
        if batch % per_step:
            raise ValueError(
                f"batch of prompts_per_step x group_size = {batch} sequences is not divisible by "
                f"micro_batch_size x ranks x algorithm.mini_batches = {per_step}"
            )
        if self.algorithm.kl.coef > 0 and self.reference is None:
            raise ValueError("kl.coef > 0 needs a reference: {pool: ...}")
        if self.heldout is not None and self.env is not None:
            raise ValueError("heldout: checks single answers; an env: run's held-out check is `grm eval --policy RUN --env ...`")
        if self.env is not None and self.env.max_total_tokens <= self.rollout.max_new_tokens:
            raise ValueError(
                f"env.max_total_tokens ({self.env.max_total_tokens}) must exceed rollout.max_new_tokens "
                f"({self.rollout.max_new_tokens}): an episode's context holds its prompt and at least one whole turn"
            )
        if self.env is not None and self.env.observation_tokens >= self.env.max_total_tokens:
            raise ValueError(
                f"env.observation_tokens ({self.env.observation_tokens}) must be below env.max_total_tokens "
                f"({self.env.max_total_tokens}): one observation may not fill an episode's whole context"
            )
        if self.env is not None and self.rollout.greedy_anchor:
            raise ValueError("rollout.greedy_anchor compares single answers; an env: run's episodes have none to compare")
        if self.data.judge_prompts is not None:
            if a.prompts_per_step % 2:
                raise ValueError(
                    f"data.judge_prompts: algorithm.prompts_per_step ({a.prompts_per_step}) must be even "
                    "(a pair's two orders go in one step)"
                )
            if self.env is not None:
                raise ValueError("data.judge_prompts and env: do not go together (a judge is trained on single answers)")
            if self.data.judge_baseline == "pair" and a.dynamic_filtering:
                raise ValueError(
                    "algorithm.dynamic_filtering keeps or drops one prompt's group by its own rewards, but "
                    "data.judge_baseline: pair makes a pair's two orders one group; set data.judge_baseline: order"
                )
        elif self.data.judge_baseline != "pair":  # the default is in every resolved config, so only a change is refused
            raise ValueError(
                f"data.judge_baseline: {self.data.judge_baseline} applies to a judge's training prompts: set "
                "data.judge_prompts, or leave it out"
            )
        return self
