"""SGLang's native HTTP API as grm speaks it: request bodies, the reply rows it accepts, control calls.

``/generate`` takes token ids with per-row sampling params and answers rows with output ids and
per-token log-probs (``return_logprob``); a row of any other shape, a generated token without a
log-prob, or ids and log-probs of different lengths is an error, not a sample (TIS reads every
behaviour log-prob). Control endpoints (pause, update, flush, ...) answer JSON or plain text.
Shapes follow SGLang's documented API and ``tests/serving/sglang_standin.py``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, StrictInt, StrictStr, ValidationError

from grm.engines.base import EngineError, SamplingParams, TokenCount
from grm.engines.credentials import glimpse, plain, shape_error
from grm.engines.http import HttpClient, Retryable

REPLY_BYTES = 256 * 1024 * 1024
"""Largest /generate reply read: a row costs ~45 bytes a token (id, log-prob row, text), so a batch
of 256 rows x 8k tokens is ~95 MB."""
CONTROL_REPLY_BYTES = 1 << 20
"""Control endpoints answer a status line or a small JSON object."""


# ---------------------------------------------------------------------- the rows we accept
# ``[logprob, token_id]`` or ``[logprob, token_id, text-or-None]``; fields not read are ignored.
_LogprobRow = tuple[float | None, int] | tuple[float | None, int, str | None]


class _Finish(BaseModel):
    type: str | None = None
    message: Any = None


class _Meta(BaseModel):
    prompt_tokens: TokenCount | None = None
    finish_reason: _Finish | str | None = None
    weight_version: StrictStr | StrictInt | None = None
    output_token_logprobs: list[_LogprobRow] | None = None
    input_token_logprobs: list[_LogprobRow] | None = None


class _Row(BaseModel):
    text: str = ""
    output_ids: list[int] | None = None
    meta_info: _Meta = _Meta()


def _row(item: Any, what: str) -> _Row:
    try:
        return _Row.model_validate(item)
    except ValidationError as e:
        raise EngineError(f"unexpected /generate reply for {what}: {shape_error(e, str)}") from None


def sampling_payload(sp: SamplingParams, seed: int | None) -> dict[str, Any]:
    """SGLang ``sampling_params`` for one row."""
    p: dict[str, Any] = {"temperature": sp.temperature, "top_p": sp.top_p, "max_new_tokens": sp.max_new_tokens}
    if sp.top_k:
        p["top_k"] = sp.top_k
    if sp.stop:
        p["stop"] = list(sp.stop)
    if seed is not None:
        p["sampling_seed"] = seed
    return p


def generate_payload(prompts: Sequence[Sequence[int]], sp: SamplingParams, seeds: Sequence[int | None]) -> dict[str, Any]:
    """One batched ``/generate`` body: row ``i * n + j`` is sample j of prompt i, seeded ``seed + j``."""
    ids, params = [], []
    for p, seed in zip(prompts, seeds, strict=False):
        for j in range(sp.n):
            ids.append(list(p))
            params.append(sampling_payload(sp, None if seed is None else seed + j))
    return {"input_ids": ids, "sampling_params": params, "return_logprob": True, "logprob_start_len": -1}


def resumed_payload(rows: Sequence[tuple[Sequence[int], int, int | None]], sp: SamplingParams) -> dict[str, Any]:
    """One batched ``/generate`` body going on with rows a weight update cut short: each row is
    (its prompt and the tokens it already has, the tokens it may still generate, its seed)."""
    params = [{**sampling_payload(sp, seed), "max_new_tokens": left} for _, left, seed in rows]
    ids = [list(ids) for ids, _, _ in rows]
    return {"input_ids": ids, "sampling_params": params, "return_logprob": True, "logprob_start_len": -1}


@dataclass
class Segment:
    """One ``/generate`` reply row as the server sent it (validated): the tokens of one stretch of
    a generation, which a weight update may have cut short (``finish == "abort"``)."""

    text: str
    token_ids: list[int]
    logprobs: list[float]
    finish: str
    """``stop``, ``length`` or ``abort``."""
    why: str
    """An abort's message, as one bounded line."""
    served: str
    """The server's ``weight_version`` ("default" until the first update names one; "None" when not reported)."""
    prompt_tokens: int


def parse_segment(item: Any, request_index: int) -> Segment:
    """A ``/generate`` response row -> Segment. ``output_token_logprobs`` rows are
    ``[logprob, token_id, text-or-None]``; every generated token needs its log-prob (TIS reads it)."""
    row = _row(item, f"request {request_index}")
    meta = row.meta_info
    lps = meta.output_token_logprobs or []
    ids = row.output_ids if row.output_ids is not None else [t[1] for t in lps]
    finish = meta.finish_reason
    kind = finish.type if isinstance(finish, _Finish) else finish
    logprobs = [math.nan if t[0] is None else t[0] for t in lps]
    if not all(math.isfinite(x) for x in logprobs):
        raise EngineError(f"a generated token of request {request_index} came back without a log-prob (null, NaN or infinite)")
    if len(ids) != len(logprobs):
        raise EngineError(f"request {request_index} came back with {len(ids)} token ids but {len(logprobs)} log-probs")
    why = glimpse(finish.message, str) if isinstance(finish, _Finish) and finish.message is not None else ""
    return Segment(
        text=row.text,
        token_ids=list(ids),
        logprobs=logprobs,
        finish="abort" if kind == "abort" else "length" if kind == "length" else "stop",
        why=why,
        served=str(meta.weight_version),
        prompt_tokens=meta.prompt_tokens or 0,
    )


def served_version(seg: Segment, request_index: int, since: int, now: int, held: bool = False) -> int:
    """The policy version that generated ``seg``: the server's numbered ``weight_version`` when it
    names one, which must lie between the engine's version when the row was sent (``since``) and
    its version now. Else (before the first update, or not reported): ``now`` for a row sent
    during an update that ran to its end (``held``: the servers held it until the new weights were
    in), ``since`` for any other (a row a pause cut ran before it). A number outside that range is
    an error, not a sample: the server holds other weights (an earlier run's, or an update that
    never arrived)."""
    s = seg.served
    if not (s.isascii() and s.isdecimal() and len(s) < 19):
        return now if held and seg.finish != "abort" else since
    if since <= int(s) <= now:
        return int(s)
    at = f"version {since}" if since == now else f"versions {since}-{now}"
    raise EngineError(
        f"sglang generated request {request_index} with weights version {s}, but the policy is at {at}: "
        "the server holds other weights (an earlier run's, or an update that never arrived)"
    )


def continuation_payload(prompt: Sequence[int], cont: Sequence[int]) -> dict[str, Any]:
    """Teacher-force ``cont`` after ``prompt``: log-probs of the input from the candidate's first token."""
    return {
        "input_ids": list(prompt) + list(cont),
        "sampling_params": {"max_new_tokens": 0, "temperature": 0.0},
        "return_logprob": True,
        "logprob_start_len": len(prompt),
    }


def parse_continuation(item: Any, n_cont: int) -> float:
    """The summed log-prob of the last ``n_cont`` input tokens (the candidate), each of them given."""
    rows = _row(item, "a continuation").meta_info.input_token_logprobs or []
    vals = [r[0] for r in rows[-n_cont:]]
    if len(vals) < n_cont or any(v is None or math.isnan(v) or v == math.inf for v in vals):
        given = sum(v is not None and math.isfinite(v) for v in vals)
        raise EngineError(f"sglang returned {given} usable input log-probs for a {n_cont}-token continuation")
    return sum(vals)  # type: ignore[arg-type]


def post_control(url: str, body: dict[str, Any], timeout_s: float, *, client: HttpClient | None = None) -> dict[str, Any]:
    """POST to a control endpoint (pause, update, flush, ...) -> ``{"success", "message", ...}``.
    Most answer JSON; ``/flush_cache`` answers plain text, and HTTP 400 with its reason when it
    refuses. Not retried: the caller decides what a failed update means. The message is the
    server's text as one bounded line, credentials redacted."""
    client = client or HttpClient(timeout_s=timeout_s, max_reply_bytes=CONTROL_REPLY_BYTES)
    try:
        reply = client.exchange("POST", url, json.dumps(body).encode())
    except Retryable as e:
        raise EngineError(str(e)) from None
    try:
        out = json.loads(reply.body)
    except (ValueError, RecursionError):
        out = None
    out = out if isinstance(out, dict) else {}
    if "message" in out or not out:
        message = out.get("message", reply.body.decode("utf-8", errors="replace"))
        out["message"] = plain(client.redact(message)) if isinstance(message, str) else glimpse(message, client.redact)
    if not 200 <= reply.status <= 299:
        out["success"] = False
        out["message"] = f"HTTP {reply.status}: {out.get('message') or client.shown(reply.body)}"
    return out
