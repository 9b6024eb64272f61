"""The OpenAI chat-completions wire format of the policy endpoint (``grm.envs.endpoint``): a request
body read and checked, its messages put in one comparable form, and an assistant turn written back
as a ``chat.completion`` with the exact token ids and log-probs. Pure functions: no server, no engine.

Messages are compared in their *wire form*: ``role``, ``content`` as one string (a list of text
parts joined, None as ""), for an assistant its ``tool_calls`` as name and parsed arguments (the
call ids and the arguments' JSON spelling are not compared), for a tool message its
``tool_call_id`` and ``name``. What the chat template renders is the *template form*
(``template_message``): the same message as ``grm.envs.episodes`` renders it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from grm.base import GrmError
from grm.data.trajectory import ToolCall
from grm.engines.base import Generation
from grm.envs.tool_calls import OPEN, tool_name

ROLES = ("system", "user", "assistant", "tool")
MAX_BODY = 32 << 20
"""Bytes of one request body; a larger one is refused (413)."""


class WireError(GrmError):
    """A request the endpoint answers with an error: ``status`` (400, 404, 409, 413, 500), the
    OpenAI error ``kind`` (``invalid_request_error``, ``not_found_error``, ...) and, for an episode
    that ended, ``code`` (its end reason)."""

    def __init__(self, status: int, message: str, kind: str = "invalid_request_error", code: str | None = None) -> None:
        super().__init__(message)
        self.status, self.kind, self.code = status, kind, code

    def body(self) -> dict[str, Any]:
        return {"error": {"message": str(self), "type": self.kind, "code": self.code, "param": None}}


@dataclass(frozen=True)
class ChatRequest:
    """One ``POST .../chat/completions``, checked; ``messages`` in wire form."""

    model: str | None
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    max_tokens: int | None
    """The smaller of ``max_tokens`` and ``max_completion_tokens`` when given."""


def read_request(body: bytes) -> ChatRequest:
    """The request in ``body``; ``WireError`` (400) naming the field that is wrong. Sampling fields
    (``temperature``, ``top_p``, ``seed``, ``stop``, penalties, ``tool_choice``) are read by no one:
    the pipeline's sampling is what the trainer assumes."""
    try:
        data = json.loads(body)
    except (ValueError, RecursionError) as e:
        raise WireError(400, f"the request body is not JSON ({str(e)[:120]})") from None
    if not isinstance(data, dict):
        raise WireError(400, f"the request body must be a JSON object, got {type(data).__name__}")
    if data.get("stream"):
        raise WireError(400, "stream: true is not supported by the policy endpoint")
    if data.get("n") not in (None, 1):
        raise WireError(400, f"n must be 1 (one continuation per episode turn), got {data.get('n')!r}")
    model = data.get("model")
    if model is not None and not isinstance(model, str):
        raise WireError(400, "model must be a string")
    messages = data.get("messages")
    if not isinstance(messages, list) or not messages:
        raise WireError(400, "messages must be a non-empty list")
    tools = data.get("tools") or []
    if not isinstance(tools, list) or not all(isinstance(t, dict) and tool_name(t) for t in tools):
        raise WireError(400, "tools must be a list of tools in OpenAI function format ({type: function, function: {name}})")
    limits = [data.get(k) for k in ("max_tokens", "max_completion_tokens") if data.get(k) is not None]
    for v in limits:
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise WireError(400, f"max_tokens must be a positive integer, got {v!r}")
    return ChatRequest(model, [wire_message(m, i) for i, m in enumerate(messages)], tools, min(limits) if limits else None)


def wire_message(m: Any, i: int) -> dict[str, Any]:
    """Message ``i`` of a request in wire form (see the module docstring)."""
    if not isinstance(m, dict) or m.get("role") not in ROLES:
        raise WireError(400, f"messages[{i}]: needs a role among {', '.join(ROLES)}")
    out: dict[str, Any] = {"role": m["role"], "content": _text(m.get("content"), i)}
    if m["role"] == "assistant":
        calls = m.get("tool_calls") or []
        if not isinstance(calls, list):
            raise WireError(400, f"messages[{i}].tool_calls must be a list")
        out["tool_calls"] = [_call(c, i, k) for k, c in enumerate(calls)]
    if m["role"] == "tool":
        for key in ("tool_call_id", "name"):
            if m.get(key) is not None and not isinstance(m[key], str):
                raise WireError(400, f"messages[{i}].{key} must be a string")
        out.update(tool_call_id=m.get("tool_call_id"), name=m.get("name"))
    return out


def _text(content: Any, i: int) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    if isinstance(content, list) and all(isinstance(p, dict) and p.get("type") == "text" for p in content):
        parts = [p.get("text") for p in content]
        if all(isinstance(p, str) for p in parts):
            return "".join(parts)
    raise WireError(400, f"messages[{i}].content must be a string or a list of text parts")


def _call(c: Any, i: int, k: int) -> dict[str, Any]:
    fn = c.get("function") if isinstance(c, dict) else None
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
        raise WireError(400, f"messages[{i}].tool_calls[{k}] needs function.name")
    args = fn.get("arguments", {})
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except (ValueError, RecursionError):
            raise WireError(400, f"messages[{i}].tool_calls[{k}].function.arguments is not JSON") from None
    return {"name": fn["name"], "arguments": args}


def template_message(m: Mapping[str, Any]) -> dict[str, Any]:
    """A wire-form message as the chat template gets it (tool calls with dict arguments, as
    ``ToolCall.openai``; a tool message's id and name only when given)."""
    out: dict[str, Any] = {"role": m["role"], "content": m["content"]}
    if m.get("tool_calls"):
        out["tool_calls"] = [ToolCall(c["name"], c["arguments"], f"call_{k}").openai() for k, c in enumerate(m["tool_calls"])]
    out.update({k: m[k] for k in ("name", "tool_call_id") if m.get(k) is not None})
    return out


def first_difference(history: Sequence[Mapping[str, Any]], messages: Sequence[Mapping[str, Any]]) -> str | None:
    """Why ``messages`` do not extend ``history`` (naming the first differing message), or None."""
    for i, (was, now) in enumerate(zip(history, messages, strict=False)):
        if was != now:
            fields = [k for k in sorted(set(was) | set(now)) if was.get(k) != now.get(k)]
            return f"messages[{i}] ({was['role']}) differs from the episode's history in {', '.join(fields)}"
    if len(messages) < len(history):
        return f"messages[{len(messages)}] is missing: the episode's history has {len(history)} messages"
    return None


def reply_content(text: str, calls: Sequence[ToolCall]) -> str | None:
    """The assistant message's ``content``: the whole text without tool calls; with calls, the text
    before the first ``<tool_call>`` (None when empty), as vLLM's and SGLang's Hermes parsers do."""
    if not calls:
        return text
    head = text.split(OPEN, 1)[0].strip() if OPEN in text else ""
    return head or None


def reply_wire(text: str, calls: Sequence[ToolCall]) -> dict[str, Any]:
    """The wire form of the assistant message the endpoint answers with."""
    return {
        "role": "assistant",
        "content": reply_content(text, calls) or "",
        "tool_calls": [{"name": c.name, "arguments": c.arguments} for c in calls],
    }


def completion(
    rid: str, model: str, g: Generation, calls: Sequence[ToolCall], prompt_ids: Sequence[int], tokens: Sequence[str]
) -> dict[str, Any]:
    """The ``chat.completion`` object for one generated turn; ``tokens`` are the sampled tokens'
    texts. Beside the standard fields: ``prompt_token_ids`` (the context sent) and
    ``choices[0].token_ids`` (the sampled ids), as SGLang and vLLM return them."""
    message: dict[str, Any] = {"role": "assistant", "content": reply_content(g.text, calls)}
    if calls:
        message["tool_calls"] = [
            {
                "id": c.id,
                "type": "function",
                "function": {"name": c.name, "arguments": json.dumps(c.arguments, ensure_ascii=False)},
            }
            for c in calls
        ]
    finish = "length" if g.finish_reason == "length" else "tool_calls" if calls else "stop"
    logprobs = [
        {"token": t, "logprob": lp, "bytes": list(t.encode("utf-8", errors="replace")), "top_logprobs": []}
        for t, lp in zip(tokens, g.logprobs, strict=True)
    ]
    return {
        "id": rid,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": finish,
                "logprobs": {"content": logprobs},
                "token_ids": list(g.token_ids),
            }
        ],
        "usage": {
            "prompt_tokens": len(prompt_ids),
            "completion_tokens": len(g.token_ids),
            "total_tokens": len(prompt_ids) + len(g.token_ids),
        },
        "prompt_token_ids": list(prompt_ids),
        "system_fingerprint": f"policy-v{g.version}",
    }


def models(model: str) -> dict[str, Any]:
    """``GET .../models``: the one model the endpoint serves."""
    return {"object": "list", "data": [{"id": model, "object": "model", "created": 0, "owned_by": "grm"}]}
