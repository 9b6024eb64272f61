"""Tool calls in and out of the policy's text: the tools rendered into the prompt by the model's own
chat template, and the calls read back from what it generated.

Formats read (checked against the shipped models' templates):

- Hermes / Qwen2.5: ``<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>``, one block
  per call. Qwen2.5's template renders the tools itself and ``<tool_call>`` is one token there.
  A closed block is always a call (a body that is no call is the policy's error). A block left
  open (generation stopped at ``</tool_call>``, which the engine cuts off; it runs to the next
  ``<tool_call>`` or the end) is a call only when its body starts as JSON (``{``, ``[`` or a
  ```json fence): prose that merely names the tag ("I will not use <tool_call> here") is text.
- A plain JSON object ``{"name": ..., "arguments": ...}`` (``parameters`` for ``arguments`` too) or
  an array of them as the whole message (optionally in a ```json fence): what models without a
  tool format write. Both keys make it a call: JSON without them (``{"name": "Alice", "age": 30}``)
  is an answer given as JSON, not a call.

The work is linear in the text: one pass over the tags, stopping once more than ``max_calls``
blocks are seen (``<tool_call>`` * 200,000 took 54 s when each block searched the rest of the text
for its ``</tool_call>``; the turn loop parses on its event loop, so that stalled every episode).
Accepted arguments are nested at most ``MAX_ARGUMENT_DEPTH`` levels: writers of the trajectory
(``json_safe``, ``json.dumps``) recurse per level, so a deeper call is refused here, with a reason.

SmolLM2-135M-Instruct's template (in its GGUF metadata and tokenizer_config.json) has no tools and
renders every role as ``<|im_start|>ROLE\\n...<|im_end|>``: ``chat_prompt`` then writes the same
Hermes instructions Qwen2.5 uses into the system message, so one parser reads both.

A malformed call is a ``ToolCallError`` value, never an exception: the runner turns it into an
observation or ends the episode (``bad_tool_call``), and counts it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from grm.data.trajectory import ToolCall
from grm.jsonl import DuplicateKey, unique_keys

OPEN, CLOSE = "<tool_call>", "</tool_call>"
_TAG = re.compile(re.escape(OPEN) + "|" + re.escape(CLOSE))
_STARTS_AS_JSON = re.compile(r"\s*(?:[{\[]|```)")

MAX_ARGUMENT_DEPTH = 32
"""Deepest nesting of a call's arguments (the arguments object is level 1): far past any real tool's,
far below what a recursive writer of the trajectory can take (Python's ~1,000 frames)."""

ToolCallErrorKind = Literal["bad_json", "not_a_call", "unknown_tool", "bad_arguments", "too_many_calls"]


@dataclass(frozen=True)
class ToolCallError:
    """Why the policy's tool call cannot be run; ``message`` is short and meant for the policy."""

    kind: ToolCallErrorKind
    message: str

    def __str__(self) -> str:
        return self.message


def tool_name(tool: Mapping[str, Any]) -> str:
    """The name of a tool given in OpenAI function format (or as the bare ``function`` object)."""
    fn = tool.get("function", tool)
    return str(fn.get("name", "")) if isinstance(fn, Mapping) else ""


def parse_tool_calls(
    text: str,
    tools: Sequence[Mapping[str, Any]] | None = None,
    *,
    max_calls: int = 4,
    turn: int = 0,
    plain_json: bool = True,
) -> list[ToolCall] | ToolCallError:
    """The tool calls in ``text`` ([] when it makes none), or why they cannot be run.

    ``tools`` (OpenAI function format) checks each call's name and its arguments against the
    tool's ``parameters`` schema; None accepts any. Call ids are ``call_<turn>_<k>``.
    """
    try:
        blocks = _tagged_blocks(text, max_calls)
        if not blocks:
            if not plain_json:
                return []
            found = _plain_json(text, _argumentless(tools))
            if found is None or isinstance(found, ToolCallError):
                return [] if found is None else found
            values = [found]
        else:
            if len(blocks) > max_calls:
                return ToolCallError("too_many_calls", f"{max_calls + 1} or more tool calls in one turn; at most {max_calls}")
            values = []
            for body in blocks:
                value = _loads(body)
                if isinstance(value, ToolCallError):
                    return value
                values.append(value)
        raw: list[Any] = []
        for v in values:
            raw.extend(v if isinstance(v, list) else [v])
        if len(raw) > max_calls:
            return ToolCallError("too_many_calls", f"{len(raw)} tool calls in one turn; at most {max_calls}")
        by_name = {tool_name(t): t for t in tools} if tools is not None else None
        calls = []
        for k, item in enumerate(raw):
            call = _call(item, by_name, f"call_{turn}_{k}")
            if isinstance(call, ToolCallError):
                return call
            calls.append(call)
        return calls
    except (RecursionError, MemoryError):
        return ToolCallError("bad_json", "the tool call is nested too deeply")


def _tagged_blocks(text: str, max_calls: int) -> list[str]:
    """Bodies of the ``<tool_call>`` blocks that are calls (see the module docstring), in one pass
    over the tags: at most ``max_calls + 1`` of them (one more says there are too many)."""
    out: list[str] = []
    body_start = None  # where the open block's body starts
    for tag in _TAG.finditer(text):
        if body_start is not None:  # this tag ends the open block: closed by CLOSE, else left open
            if tag.group() == CLOSE or _STARTS_AS_JSON.match(text, body_start):
                out.append(text[body_start : tag.start()])
                if len(out) > max_calls:
                    return out
        body_start = tag.end() if tag.group() == OPEN else None  # a CLOSE outside a block is text
    if body_start is not None and _STARTS_AS_JSON.match(text, body_start):
        out.append(text[body_start:])
    return out


def _unfence(s: str) -> str:
    """``s`` without a surrounding ```json fence."""
    s = s.strip()
    if len(s) >= 6 and s.startswith("```") and s.endswith("```"):
        s = s[3:-3]
        s = (s[4:] if s[:4].lower() == "json" else s).strip()
    return s


def _loads(body: str) -> Any:
    s = _unfence(body)
    try:
        return json.loads(s, object_pairs_hook=unique_keys)
    except json.JSONDecodeError as e:
        return ToolCallError("bad_json", f"the tool call is not valid JSON ({e.msg} at character {e.pos}): {_clip(s)}")
    except DuplicateKey as e:  # the decoder alone would keep the last: which "name" ran would be a guess
        return ToolCallError("bad_json", f"the tool call names a key twice ({e}); give each key once")
    except ValueError as e:  # an integer too long to convert
        return ToolCallError("bad_json", f"the tool call is not valid JSON ({str(e)[:80]})")


def _argumentless(tools: Sequence[Mapping[str, Any]] | None) -> set[str]:
    """Names of the tools whose parameters require nothing (a ``{"name": N}`` call is whole)."""
    out = set()
    for t in tools or ():
        fn = t.get("function", t)
        params = fn.get("parameters") if isinstance(fn, Mapping) else None
        if not (isinstance(params, Mapping) and params.get("required")):
            out.add(tool_name(t))
    return out


def _plain_json(text: str, names: set[str] | None = None) -> Any:
    """The whole message as JSON, when it is a call or a list of them (or an attempt at one: both
    keys of the call form in JSON that does not parse); None when it is ordinary text, or JSON that
    is no call (an answer given as JSON). A call of a tool that needs no arguments may leave them
    out: ``{"name": N}`` alone is a call when N is such a tool of the turn's (``names``)."""
    s = _unfence(text)
    if not s or s[0] not in "[{":
        return None
    value = _loads(s)
    if isinstance(value, ToolCallError):
        head = s[:500]
        return value if '"name"' in head and ('"arguments"' in head or '"parameters"' in head) else None
    items = value if isinstance(value, list) else [value]
    if any(isinstance(i, dict) and "name" in i and ("arguments" in i or "parameters" in i) for i in items):
        return value
    if names and all(isinstance(i, dict) and set(i) == {"name"} and i["name"] in names for i in items):
        return value
    return None


def _call(item: Any, by_name: dict[str, Mapping[str, Any]] | None, call_id: str) -> ToolCall | ToolCallError:
    if not isinstance(item, dict) or not isinstance(item.get("name"), str):
        return ToolCallError("not_a_call", 'a tool call must be a JSON object {"name": ..., "arguments": {...}}')
    name = item["name"]
    args = item.get("arguments", item.get("parameters", {}))
    if isinstance(args, str):  # OpenAI's wire form: the arguments as a JSON string
        args = _loads(args) if args.strip() else {}
        if isinstance(args, ToolCallError):
            return ToolCallError("bad_json", f"arguments of {_clip(name, 40)}: {args.message}")
    if not isinstance(args, dict):
        return ToolCallError("bad_arguments", f"arguments of {_clip(name, 40)} must be a JSON object")
    if _deeper_than(args, MAX_ARGUMENT_DEPTH):
        return ToolCallError(
            "bad_arguments", f"arguments of {_clip(name, 40)} are nested more than {MAX_ARGUMENT_DEPTH} levels deep"
        )
    if by_name is not None:
        tool = by_name.get(name)
        if tool is None:
            known = ", ".join(sorted(by_name)) or "none"
            return ToolCallError("unknown_tool", f"no tool named {_clip(name, 40)!r} (tools: {known})")
        fn = tool.get("function", tool)
        problem = check_arguments(args, (fn.get("parameters") if isinstance(fn, Mapping) else None) or {"type": "object"})
        if problem is not None:
            return ToolCallError("bad_arguments", f"{name}: {problem}")
    return ToolCall(name, args, call_id)


def _deeper_than(value: Any, limit: int) -> bool:
    """Whether lists and dicts nest more than ``limit`` levels in ``value`` (itself level 1); no
    recursion, and it stops at the first level past the limit."""
    stack = [(value, 1)]
    while stack:
        v, depth = stack.pop()
        children = v.values() if isinstance(v, dict) else v if isinstance(v, list) else None
        if children is None:
            continue
        if depth > limit:
            return True
        stack.extend((c, depth + 1) for c in children)
    return False


def _clip(s: str, n: int = 80) -> str:
    return s if len(s) <= n else s[: n - 3] + "..."


# ----------------------------------------------------------------------------- JSON schema subset

_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "array": (list,),
    "object": (dict,),
    "null": (type(None),),
}


def check_arguments(value: Any, schema: Mapping[str, Any], path: str = "arguments") -> str | None:
    """What is wrong with ``value`` against the JSON Schema subset tool definitions use (``type``,
    ``enum``, ``properties``, ``required``, ``additionalProperties: false``, ``items``, ``minimum``,
    ``maximum``), or None. Other keywords are not checked, nor is a schema that is no object."""
    if not isinstance(schema, Mapping):
        return None
    want = schema.get("type")
    if want is not None:
        names = want if isinstance(want, list) else [want]
        if not any(_is_type(value, n) for n in names):
            return f"{path}: expected {' or '.join(map(str, names))}, got {_json_type(value)}"
    if isinstance(schema.get("enum"), list) and value not in schema["enum"]:
        return f"{path}: expected one of {schema['enum']!r}"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            return f"{path}: must be >= {schema['minimum']}"
        if "maximum" in schema and value > schema["maximum"]:
            return f"{path}: must be <= {schema['maximum']}"
    if isinstance(value, dict):
        props = schema.get("properties") if isinstance(schema.get("properties"), Mapping) else {}
        required = schema.get("required")
        missing = [k for k in required if k not in value] if isinstance(required, list) else []
        if missing:
            return f"{path}: missing {', '.join(map(repr, missing))}"
        for k, v in value.items():
            if k in props:
                problem = check_arguments(v, props[k], f"{path}.{k}")
                if problem:
                    return problem
            elif schema.get("additionalProperties") is False:
                return f"{path}: unexpected argument {_clip(str(k), 40)!r}"
    if isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        for i, v in enumerate(value):
            problem = check_arguments(v, schema["items"], f"{path}[{i}]")
            if problem:
                return problem
    return None


def _is_type(value: Any, name: str) -> bool:
    if name in ("integer", "number") and isinstance(value, bool):
        return False
    if name == "integer" and isinstance(value, float):
        return value.is_integer()
    return isinstance(value, _TYPES.get(name, (object,)))


def _json_type(value: Any) -> str:
    for name in ("boolean", "integer", "number", "string", "array", "object", "null"):
        if _is_type(value, name):
            return name
    return type(value).__name__


# ----------------------------------------------------------------------------- prompts

HERMES_TOOLS = (
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>{tools}\n</tools>\n\n"
    "For each function call, return a json object with function name and arguments within "
    '<tool_call></tool_call> XML tags:\n<tool_call>\n{{"name": <function-name>, "arguments": <args-json-object>}}\n</tool_call>'
)


def chat_prompt(
    tokenizer: Any,
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]] | None = None,
    *,
    add_generation_prompt: bool = True,
) -> str:
    """``messages`` with ``tools`` rendered by the tokenizer's own chat template
    (``apply_chat_template(..., tools=...)``). A template that ignores tools (its output does not
    change) gets them as Hermes instructions in the system message instead, and assistant
    ``tool_calls`` written into the text as ``<tool_call>`` blocks."""
    msgs = [dict(m) for m in messages]
    from grm.models.chat_template import render_chat  # bounded: a model directory's template is its maker's code

    kw = {"add_generation_prompt": add_generation_prompt}
    if not tools:
        return render_chat(tokenizer, msgs, **kw)
    with_tools = render_chat(tokenizer, msgs, tools=list(tools), **kw)
    if with_tools != render_chat(tokenizer, msgs, **kw):
        return with_tools
    return render_chat(tokenizer, hermes_messages(msgs, tools), **kw)


def hermes_messages(messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` for a template without tools: the tool instructions joined to the system message
    (one is added when there is none), tool calls written as text."""
    block = HERMES_TOOLS.format(tools="".join("\n" + json.dumps(dict(t), ensure_ascii=False) for t in tools))
    out: list[dict[str, Any]] = []
    for m in messages:
        m = dict(m)
        if m.get("role") == "assistant" and m.get("tool_calls"):
            calls = []
            for c in m.pop("tool_calls"):
                fn = c.get("function", c)
                args = fn.get("arguments", {})
                if isinstance(args, str):
                    try:
                        args = json.loads(args)
                    except ValueError:
                        pass  # written as it came
                calls.append(f"{OPEN}\n{json.dumps({'name': fn.get('name'), 'arguments': args}, ensure_ascii=False)}\n{CLOSE}")
            text = m.get("content") or ""
            m["content"] = "\n".join(([text] if text else []) + calls)
        m["content"] = m.get("content") or ""
        out.append(m)
    if out and out[0].get("role") == "system":
        out[0]["content"] = f"{out[0]['content']}\n\n{block}" if out[0]["content"] else block
    else:
        out.insert(0, {"role": "system", "content": block})
    return out
