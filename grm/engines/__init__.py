"""Generation engines. ``build_engine`` imports a backend only when a spec selects it: importing
grm never imports torch, transformers or sglang."""

from __future__ import annotations

import os
from typing import Any


def build_engine(spec: Any, model: str, *, threads: int | None = None, **kw: Any) -> Any:
    """An engine for ``model`` from an engine spec (``grm.config.policy.EngineSpec``)."""
    if spec.type == "hf":
        from grm.engines.hf import HFEngine

        return HFEngine(model, dtype=spec.dtype, threads=spec.threads or threads, max_batch_size=spec.max_batch_size, **kw)
    if spec.type == "openai":
        return _openai(spec, model)
    if spec.type == "sglang":
        from grm.engines.sglang import SGLangEngine

        return SGLangEngine.from_spec(spec, model, **kw)
    raise ValueError(f"unknown engine type {spec.type!r}")


def _openai(spec: Any, model: str) -> Any:
    from grm.engines.base import EngineSetupError
    from grm.engines.openai_api import OpenAIEngine
    from grm.engines.server_process import ServerProcess
    from grm.process import free_port

    key = None
    if spec.api_key_env:
        key = os.environ.get(spec.api_key_env)
        if key is None:
            raise EngineSetupError(f"engine.api_key_env names {spec.api_key_env}, which is not set in the environment")
        if not key.strip():
            raise EngineSetupError(f"engine.api_key_env names {spec.api_key_env}, which is set but empty")
    tokenizer = None
    if spec.endpoint == "completions":  # it renders chat prompts itself, with the model's tokenizer
        from grm.models.loading import load_tokenizer

        tokenizer = load_tokenizer(model)
    server = None
    base_url = spec.base_url or (spec.urls[0] if spec.urls else "http://127.0.0.1:{port}/v1")
    if spec.launch:
        port = free_port()
        subs = {"port": str(port)}
        if any("{gguf}" in a for a in spec.launch):
            from grm.models import gguf_path

            subs["gguf"] = str(gguf_path(model))
        cmd = [a.format(**subs) if "{" in a else a for a in spec.launch]
        base_url = base_url.format(port=port)
        server = ServerProcess(cmd, base_url, timeout_s=spec.launch_timeout_s)
    eng = OpenAIEngine(
        base_url,
        spec.served_model or model,
        api_key=key,
        endpoint=spec.endpoint,
        tokenizer=tokenizer,
        concurrency=spec.concurrency,
        timeout_s=spec.timeout_s,
        max_retries=spec.max_retries,
        backoff_s=spec.backoff_s,
        top_logprobs=spec.top_logprobs,
    )
    eng.server = server
    return eng
