"""Policy spec (``policy/*.yaml``) and generation-engine settings."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, Tag, field_validator, model_validator

from grm.config.base import MAX_TOKENS, Seconds, Strict, Temperature, by_type
from grm.config.names import SafeName


def no_credentials(url: str) -> str:
    """``url`` when it carries no ``user:password@``: a spec is written into every run's and eval's
    ``config.resolved.yaml``, which ``grm view`` shows, so a secret in it would leak there."""
    host = url.partition("://")[2].partition("/")[0]
    if "@" in host:
        raise ValueError(
            "carries credentials (user:password@host); they would be written into config.resolved.yaml of every "
            "run and eval: name the environment variable holding the key in api_key_env instead"
        )
    return url


class HFEngineSpec(Strict):
    """Hugging Face transformers backend (CPU default)."""

    type: Literal["hf"] = "hf"
    """Selects the in-process transformers engine (the default when ``engine.type`` is absent)."""
    dtype: Literal["bf16", "fp32", "auto"] = "fp32"
    """Weights and activations dtype. CPUs differ: without AVX-512 BF16 fp32 matmuls measured ~1.9x
    the bf16 rate, with it a 1.5B prefill ran ~4x faster in bf16. ``auto`` times both once per
    machine and takes the faster (``grm.models.dtype``; GPUs: bf16); the choice is recorded in the
    run's ``placement.json``. fp32 is the default: the numbers a run produces do not depend on the
    machine."""
    threads: int | None = Field(None, ge=1, le=4096)
    """torch intra-op threads for the process; None: the pool's CPU count."""
    max_batch_size: int = Field(32, ge=1, le=65536)
    """Rows (requests x samples) decoded together; longer lists are chunked."""


class OpenAIEngineSpec(Strict):
    """A frozen model behind an OpenAI-compatible server (llama.cpp, vLLM, SGLang, a hosted API)."""

    type: Literal["openai"]
    """Selects an OpenAI-compatible HTTP server (frozen models only: judges, not a policy)."""
    base_url: str | None = None
    """Server root ending in ``/v1``. May contain ``{port}``; defaults to
    ``http://127.0.0.1:{port}/v1`` when ``launch`` is given."""
    served_model: str | None = None
    """Model name the server knows; None: the judge's ``model``."""
    api_key_env: str | None = None
    """Name of the environment variable holding the API key (never the key itself)."""
    endpoint: Literal["completions", "chat"] = "completions"
    """``completions`` renders the chat template locally (needs the model's tokenizer: a builtin
    alias or local directory) so prefills and prompts match the hf engine exactly; ``chat`` lets the
    server render messages (no prefill)."""
    concurrency: int = Field(8, ge=1, le=4096)
    """Requests in flight at once."""
    timeout_s: Seconds = Field(120.0, gt=0)
    """Per-request timeout; a timed-out request is retried."""
    max_retries: int = Field(4, ge=0, le=16)
    """Retries with exponential backoff on 429, 5xx, timeouts and refused connections (at most 16:
    the delay doubles each time, and ``time.sleep`` overflows near 2**33 s)."""
    backoff_s: float = Field(0.5, ge=0, le=60)
    """First retry delay; doubles each attempt."""
    top_logprobs: int = Field(20, ge=1, le=1000)
    """Alternatives requested per token for the logprob parser."""
    launch: list[str] | None = None
    """Start the server ourselves, on the pool that hosts the judge: a command whose ``{port}`` is
    replaced by a free port and ``{gguf}`` by the builtin model's GGUF path. Health-checked before
    use and stopped with the run."""
    launch_timeout_s: Seconds = Field(300.0, gt=0)
    """Seconds the launched server has to answer ``/models``."""
    urls: list[str] | None = Field(None, min_length=1)
    """Servers already running, each ending in ``/v1``: in ``grm run``, replica ``i`` of the judge
    sends its requests to ``urls[i % len(urls)]``; elsewhere (``grm eval``, ``grm judge``) the first
    is used. Instead of ``base_url`` and ``launch``."""

    @field_validator("base_url")
    @classmethod
    def _no_credentials(cls, v: str | None) -> str | None:
        return None if v is None else no_credentials(v)

    @field_validator("urls")
    @classmethod
    def _no_credentials_in_urls(cls, v: list[str] | None) -> list[str] | None:
        return None if v is None else [no_credentials(u) for u in v]

    @model_validator(mode="after")
    def _url_or_launch(self) -> OpenAIEngineSpec:
        given = [k for k in ("base_url", "urls", "launch") if getattr(self, k)]
        if not given:
            raise ValueError(
                "engine type openai needs base_url (a running server), urls (one per replica) or launch (a command to start one)"
            )
        if "urls" in given and len(given) > 1:
            raise ValueError(f"engine type openai: urls cannot be combined with {given[0] if given[0] != 'urls' else given[1]}")
        return self

    def for_replica(self, index: int) -> OpenAIEngineSpec:
        """This spec as replica ``index`` of a judge uses it: ``urls[index % len(urls)]`` as its server."""
        if not self.urls:
            return self
        return self.model_copy(update={"base_url": self.urls[index % len(self.urls)], "urls": None})


class SGLangEngineSpec(Strict):
    """SGLang servers on a GPU pool, driven over SGLang's native HTTP API."""

    type: Literal["sglang"]
    """Selects SGLang servers on a GPU pool (a policy's weights are pushed to them after each step)."""
    urls: list[str] = []
    """Running servers to use (``http://host:port``, the server root: SGLang's native API, not
    ``/v1``); empty: launch one per replica. Each must hold the policy's initial weights and stay
    reachable from the policy pool (with ``weight_sync: disk`` it must also read the policy actor's
    temp dir: the same machine or a shared filesystem)."""
    replicas: int = Field(1, ge=1, le=1024)
    """Servers launched on the pool when ``urls`` is empty."""
    tp: int = Field(1, ge=1, le=1024)
    """Tensor-parallel GPUs per launched server."""
    dtype: Literal["bfloat16", "float16", "auto"] = "bfloat16"
    """``--dtype`` of each launched server (weights and activations); unused with ``urls``."""
    mem_fraction_static: float = Field(0.8, gt=0, le=1)
    """GPU memory share SGLang reserves for weights and KV cache."""
    extra_args: list[str] = []
    """More ``sglang.launch_server`` flags, passed through."""
    launcher: list[str] | None = Field(None, min_length=1)
    """The command that starts one server, before the flags grm adds (``--model-path``, ``--host``,
    ``--port``, ``--tp-size``, ``--dtype``, ``--mem-fraction-static``, then ``extra_args``). None:
    this Python's ``-m sglang.launch_server``; e.g. another environment's Python, or a wrapper."""
    weight_sync: Literal["broadcast", "disk"] = "broadcast"
    """How the policy's new weights reach the servers after each step: ``broadcast``, over a
    process group the servers join (SGLang's ``/init_weights_update_group``; NCCL when the trainer
    is on a GPU, gloo on the CPU), in buckets of at most 256 MiB, no file written; ``disk``:
    safetensors in the policy actor's temp dir that each server loads (``/update_weights_from_disk``),
    so the servers must see that directory. placement.json records which."""
    concurrency: int = Field(64, ge=1, le=65536)
    """Requests in flight per server."""
    timeout_s: Seconds = Field(600.0, gt=0)
    """Seconds one HTTP request to a server may take (generation and weight-update calls alike);
    a timed-out generation request is retried."""
    launch_timeout_s: Seconds = Field(900.0, gt=0)
    """Seconds a launched server has to answer ``/health``; past them the engine fails to start
    (``EngineError`` naming the command)."""

    @field_validator("urls")
    @classmethod
    def _server_roots(cls, urls: list[str]) -> list[str]:
        for u in urls:
            no_credentials(u)
            scheme, _, rest = u.partition("://")
            host, _, path = rest.partition("/")
            if scheme not in ("http", "https") or not host or path.strip("/"):
                raise ValueError(f"{u!r} is not a server root like http://127.0.0.1:30000 (no path, no /v1)")
        if len(set(urls)) != len(urls):
            raise ValueError("a server is listed twice")
        return urls


EngineSpec = Annotated[
    Annotated[HFEngineSpec, Tag("hf")] | Annotated[OpenAIEngineSpec, Tag("openai")] | Annotated[SGLangEngineSpec, Tag("sglang")],
    by_type(["hf", "openai", "sglang"], default="hf"),
]
"""The engine variants, chosen by ``type:`` (default ``hf``)."""


class GenerationDefaults(Strict):
    max_new_tokens: int = Field(64, ge=1, le=MAX_TOKENS)
    """Tokens generated per response at most."""
    temperature: Temperature = 1.0
    """Sampling temperature; 0 is greedy."""
    top_p: float = Field(1.0, gt=0, le=1)
    """Nucleus sampling mass."""
    top_k: int = Field(0, ge=0, le=MAX_TOKENS)
    """Top-k sampling; 0 disables it."""
    stop: list[str] = []
    """Stop strings; the response is cut before the first one."""


class PolicySpec(Strict):
    """A policy model and how it is prompted."""

    name: SafeName
    """Name used in run directories and logs: letters, digits, '.', '_', '-'."""
    model: str
    """Builtin alias (``grm models list``), a local Hugging Face model directory, or a hub id."""
    system_prompt: str | None = None
    """System message prepended to every prompt; None uses the chat template's default."""
    engine: EngineSpec = HFEngineSpec()
    """Rollout engine settings."""
    generation: GenerationDefaults = GenerationDefaults()
    """Defaults for rollout sampling; the pipeline's ``rollout:`` overrides them."""

    @model_validator(mode="after")
    def _trainable_engine(self) -> PolicySpec:
        if self.engine.type == "openai":
            raise ValueError(
                "engine type openai serves frozen models (judges); a policy needs hf or sglang, which take the trainer's weights"
            )
        return self
