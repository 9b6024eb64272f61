"""A tokenizer's chat template rendered under a bound on time and output, with its failures as one
``ChatTemplateError`` naming the model.

A model directory's chat template is a Jinja program from whoever made the directory, and
transformers renders it without any limit: ``{% for i in range(100000) %}{% for j in
range(100000) %}{% endfor %}{% endfor %}`` loops 10^10 times, and a loop that prints the
conversation 100,000 times asks ``str.join`` for gigabytes in one call. The render still goes
through ``tokenizer.apply_chat_template`` (the exact text every other part of grm, and the model's
own training, sees) but under a trace function on this thread (``sys.settrace``) that

- reads the clock at every Python call, and at every line of the compiled template's own code
  (Jinja compiles a template to Python whose code is named ``<template>``), so a loop that calls
  nothing is stopped too, past ``CHAT_TEMPLATE_TIMEOUT_S``;
- counts the characters the template's code yields (a compiled template is a generator of output
  pieces; a trace sees each piece as it is yielded), past ``max_chars`` before they are joined.

Measured on this project's CPU: a 50-message SmolLM2-style template renders in 0.05 ms plain and
0.2 ms traced, nothing next to the forward pass the prompt is for. The bound does not cover one
C-level operation a template asks for with a single expression (``'x' * 10**10``): Jinja's sandbox
leaves those to the caller, and no trace can interrupt them; the template file's size is bounded
(``grm.models.model_files``) and the template text is checked here.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

from grm.base import GrmError
from grm.models.model_files import TEMPLATE_MAX_BYTES

CHAT_TEMPLATE_TIMEOUT_S = 2.0
"""Wall time one render may take: a real chat template takes milliseconds even on a long chat."""
OUTPUT_SLACK_CHARS = 1_000_000
"""Characters a render may yield beyond four times its messages' own (role markers, system text,
pieces a macro yields and its caller yields again)."""
TEMPLATE_CODE = "<template>"
"""The file name Jinja gives the code it compiles a template to."""


class ChatTemplateError(GrmError):
    """A model's chat template that fails, loops past its bound or is not one grm can use."""


class _Exceeded(Exception):
    """Raised from the trace function into the render; turned into ``ChatTemplateError``."""


def render_chat(tokenizer: Any, messages: list[dict[str, Any]], **kw: Any) -> str:
    """``tokenizer.apply_chat_template(messages, tokenize=False, **kw)``, bounded (module doc);
    ``ChatTemplateError`` naming the tokenizer's directory for any failure of the template."""
    where = getattr(tokenizer, "name_or_path", "") or "the model"
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, dict):  # named templates: transformers picks "default" (or the tool one)
        template = "".join(t for t in template.values() if isinstance(t, str))
    if isinstance(template, str) and len(template) > TEMPLATE_MAX_BYTES:
        raise ChatTemplateError(f"{where}: a chat template of {len(template):,} characters; more than {TEMPLATE_MAX_BYTES:,}")
    given = sum(len(str(m.get("content", ""))) for m in messages)
    max_chars = 4 * given + OUTPUT_SLACK_CHARS
    try:
        text = _bounded(lambda: tokenizer.apply_chat_template(messages, tokenize=False, **kw), max_chars, CHAT_TEMPLATE_TIMEOUT_S)
    except _Exceeded as e:
        raise ChatTemplateError(f"{where}: the chat template {e}") from None
    except GrmError:
        raise
    except Exception as e:  # the template's own expressions may raise anything; raise_exception() too
        first = (str(e).strip().splitlines() or [""])[0][:300]
        raise ChatTemplateError(f"{where}: the chat template failed ({type(e).__name__}: {first})") from None
    if not isinstance(text, str):
        raise ChatTemplateError(f"{where}: the chat template rendered {type(text).__name__}, not text")
    return text


def _bounded(render: Callable[[], Any], max_chars: int, timeout_s: float) -> Any:
    """``render()`` on this thread under the trace described in the module doc."""
    deadline = time.monotonic() + timeout_s
    emitted = 0

    def in_template(frame: FrameType, event: str, arg: Any) -> Any:
        nonlocal emitted
        if time.monotonic() > deadline:
            raise _Exceeded(f"ran longer than {timeout_s:g} s")
        if event == "return" and isinstance(arg, str):  # a piece yielded (or a macro's text returned)
            emitted += len(arg)
            if emitted > max_chars:
                raise _Exceeded(f"produced more than {max_chars:,} characters")
        return in_template

    def on_call(frame: FrameType, event: str, arg: Any) -> Any:
        if time.monotonic() > deadline:
            raise _Exceeded(f"ran longer than {timeout_s:g} s")
        return in_template if frame.f_code.co_filename == TEMPLATE_CODE else None

    previous = sys.gettrace()
    sys.settrace(on_call)
    try:
        return render()
    finally:
        sys.settrace(previous)
