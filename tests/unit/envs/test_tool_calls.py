"""Tool-call parsing: the Hermes/Qwen block and the plain JSON forms read back; every malformed class
is a ToolCallError value with a short reason; no text makes the parser raise."""

import json
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grm.data.trajectory import ToolCall
from grm.envs.tool_calls import (
    CLOSE,
    MAX_ARGUMENT_DEPTH,
    OPEN,
    ToolCallError,
    _tagged_blocks,
    check_arguments,
    hermes_messages,
    parse_tool_calls,
)
from grm.envs.tools import CalculatorTool, PythonTool
from grm.jsonl import append_jsonl, read_jsonl

TOOLS = [
    CalculatorTool.schema,
    PythonTool.schema,
    {
        "type": "function",
        "function": {
            "name": "search",
            "parameters": {
                "type": "object",
                "properties": {
                    "query": {"type": "string"},
                    "k": {"type": "integer", "minimum": 1, "maximum": 10},
                    "mode": {"enum": ["fast", "deep"]},
                    "tags": {"type": "array", "items": {"type": "string"}},
                },
                "required": ["query"],
            },
        },
    },
]

CALC = '{"name": "calculator", "arguments": {"expression": "2+3"}}'


@pytest.mark.parametrize(
    "text",
    [
        f"<tool_call>\n{CALC}\n</tool_call>",  # what Qwen2.5's template asks for
        f"Let me compute.\n<tool_call>\n{CALC}\n</tool_call>",
        f"<tool_call>\n{CALC}\n",  # generation stopped at </tool_call>, which the engine cut off
        f"<tool_call>```json\n{CALC}\n```</tool_call>",
        CALC,  # plain JSON object as the whole message
        f"```json\n{CALC}\n```",
        f"[{CALC}]",
        '{"name": "calculator", "parameters": {"expression": "2+3"}}',  # Llama-style key
        '{"name": "calculator", "arguments": "{\\"expression\\": \\"2+3\\"}"}',  # OpenAI wire form
    ],
)
def test_a_good_call_is_read_in_every_supported_form(text):
    assert parse_tool_calls(text, TOOLS, turn=2) == [ToolCall("calculator", {"expression": "2+3"}, "call_2_0")]


def test_several_blocks_give_several_calls_with_their_own_ids():
    text = f"<tool_call>{CALC}</tool_call>\n<tool_call>" + '{"name": "python", "arguments": {"code": "print(1)"}}</tool_call>'
    calls = parse_tool_calls(text, TOOLS, turn=1)
    assert [(c.name, c.id) for c in calls] == [("calculator", "call_1_0"), ("python", "call_1_1")]


def test_an_unclosed_block_followed_by_another_reads_both():
    calls = parse_tool_calls(f"<tool_call>{CALC}\n<tool_call>{CALC}</tool_call>", TOOLS)
    assert len(calls) == 2


@pytest.mark.parametrize(
    "text",
    [
        "The answer is \\boxed{5}.",
        "",
        '{"answer": 5}',  # JSON, but no call: the answer written as JSON
        "{not json at all",  # text that merely starts with a brace
        "[1, 2, 3]",
        # an answer given as JSON: a "name" is no call without "arguments" (the documented form)
        '{"name": "Alice", "age": 30}',
        '[{"name": "Alice"}, {"name": "Bob"}]',
        '```json\n{"name": "calculator"}\n```',
        '{"name": "Alice", age: 30}',  # not even JSON, and no call's keys
        # prose that names the tag: a block left open is a call only when it starts as JSON
        "I will not use <tool_call> here.",
        "The format is <tool_call> followed by JSON; the answer is 5.",
        "<tool_call>" * 1000,
        '{"answer": "write <tool_call> to call a tool"}',
    ],
)
def test_text_without_a_call_gives_no_calls(text):
    assert parse_tool_calls(text, TOOLS) == []


def test_a_plain_call_of_a_tool_that_needs_no_arguments_may_leave_them_out():
    clock = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}}
    assert parse_tool_calls('{"name": "get_time"}', [*TOOLS, clock]) == [ToolCall("get_time", {}, "call_0_0")]
    assert parse_tool_calls('{"name": "calculator"}', [*TOOLS, clock]) == []  # it needs an expression: an answer
    assert parse_tool_calls('{"name": "Alice"}', [*TOOLS, clock]) == []  # no such tool: an answer


def test_prose_naming_the_tag_before_a_real_call_leaves_the_call_alone():
    text = f"I will use <tool_call> now.\n<tool_call>{CALC}</tool_call>"
    assert parse_tool_calls(text, TOOLS) == [ToolCall("calculator", {"expression": "2+3"}, "call_0_0")]
    text = '{"name": "python", "arguments": {"code": "print(\'<tool_call>\')"}}'  # the tag inside a plain call's string
    assert parse_tool_calls(text, TOOLS) == [ToolCall("python", {"code": "print('<tool_call>')"}, "call_0_0")]


@pytest.mark.parametrize(
    "text,kind,reason",
    [
        ("<tool_call>{'name': 'calculator'}</tool_call>", "bad_json", "not valid JSON"),
        ("<tool_call>\n</tool_call>", "bad_json", "not valid JSON"),
        ('{"name": "calculator", "arguments": {"expression": }', "bad_json", "not valid JSON"),  # plain form, an attempt
        ("<tool_call>" + "[" * 100_000 + "</tool_call>", "bad_json", "nested too deeply"),
        ("<tool_call>" + '{"name": "calculator", "arguments": {"expression": ' + "9" * 5000 + "}}</tool_call>", "bad_json", ""),
        ('<tool_call>{"name": "calculator", "arguments": "{bad"}</tool_call>', "bad_json", "arguments of calculator"),
        # the decoder alone keeps the last of a repeated key: which tool, or which argument, would be a guess
        ('<tool_call>{"name": "calculator", "name": "python", "arguments": {}}</tool_call>', "bad_json", "duplicate key 'name'"),
        ('<tool_call>{"name": "calculator", "arguments": {"a": 1, "a": 2}}</tool_call>', "bad_json", "names a key twice"),
        ('<tool_call>{"tool": "calculator"}</tool_call>', "not_a_call", '{"name": ..., "arguments": {...}}'),
        ("<tool_call>42</tool_call>", "not_a_call", ""),
        ('<tool_call>{"name": "rm", "arguments": {}}</tool_call>', "unknown_tool", "no tool named 'rm' (tools: calculator"),
        (
            '<tool_call>{"name": "calculator", "arguments": {"expression": 5}}</tool_call>',
            "bad_arguments",
            "calculator: arguments.expression: expected string, got integer",
        ),
        ('<tool_call>{"name": "calculator", "arguments": {}}</tool_call>', "bad_arguments", "missing 'expression'"),
        (
            '<tool_call>{"name": "calculator", "arguments": {"expression": "1", "x": 2}}</tool_call>',
            "bad_arguments",
            "unexpected argument 'x'",
        ),
        ('<tool_call>{"name": "calculator", "arguments": [1]}</tool_call>', "bad_arguments", "must be a JSON object"),
        (
            '<tool_call>{"name": "search", "arguments": {"query": "q", "k": true}}</tool_call>',
            "bad_arguments",
            "arguments.k: expected integer, got boolean",
        ),
        ('<tool_call>{"name": "search", "arguments": {"query": "q", "k": 11}}</tool_call>', "bad_arguments", "must be <= 10"),
        (
            '<tool_call>{"name": "search", "arguments": {"query": "q", "mode": "slow"}}</tool_call>',
            "bad_arguments",
            "expected one of",
        ),
        (
            '<tool_call>{"name": "search", "arguments": {"query": "q", "tags": ["a", 1]}}</tool_call>',
            "bad_arguments",
            r"arguments.tags[1]: expected string",
        ),
        (f"<tool_call>{CALC}</tool_call>" * 5, "too_many_calls", "5 or more tool calls in one turn; at most 4"),
        ("<tool_call>{'name': 'calculator'}", "bad_json", "not valid JSON"),  # left open, starts as JSON: an attempt
        ('{"name": "calculator", "parameters": {"expression": }', "bad_json", "not valid JSON"),
        (
            '<tool_call>{"name": "calculator", "arguments": {"expression": ' + "[" * 33 + "]" * 33 + "}}</tool_call>",
            "bad_arguments",
            "arguments of calculator are nested more than 32 levels deep",
        ),
        ("<tool_call>[" + ", ".join([CALC] * 5) + "]</tool_call>", "too_many_calls", "at most 4"),
    ],
)
def test_every_malformed_class_is_an_error_value_with_a_short_reason(text, kind, reason):
    got = parse_tool_calls(text, TOOLS)
    assert isinstance(got, ToolCallError), got
    assert got.kind == kind and reason in got.message
    assert len(got.message) < 200 and str(got) == got.message


def test_without_tools_any_name_is_accepted_and_plain_json_can_be_turned_off():
    assert parse_tool_calls('<tool_call>{"name": "anything", "arguments": {"a": 1}}</tool_call>')[0].name == "anything"
    assert parse_tool_calls(CALC, TOOLS, plain_json=False) == []


def test_an_integral_float_counts_as_an_integer_argument():
    assert check_arguments(3.0, {"type": "integer"}) is None
    assert check_arguments(3.5, {"type": "integer"}) == "arguments: expected integer, got number"
    assert check_arguments(None, {"type": ["string", "null"]}) is None


FRAGMENTS = st.sampled_from(
    [
        "<tool_call>",
        "</tool_call>",
        "{",
        "}",
        "[",
        "]",
        '"name"',
        '"arguments"',
        ":",
        ",",
        '"calculator"',
        "```json",
        "```",
        '"expression"',
        "1",
        "null",
        "\n",
        " ",
        '"',
        "\\",
        "9" * 50,
    ]
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(FRAGMENTS, st.text(max_size=20)), max_size=40))
def test_random_text_never_raises(parts):
    got = parse_tool_calls("".join(parts), TOOLS)
    assert isinstance(got, ToolCallError) or all(isinstance(c, ToolCall) for c in got)


def reference_blocks(text: str) -> list[str]:
    """The call blocks as the obvious scan finds them (each block searches the rest of the text for
    its end: quadratic), with the contract's rule for a block left open."""
    out = []
    start = text.find(OPEN)
    while start >= 0:
        body_start = start + len(OPEN)
        end, nxt = text.find(CLOSE, body_start), text.find(OPEN, body_start)
        if end < 0 or 0 <= nxt < end:  # left open: it runs to the next block or the end
            body = text[body_start : nxt if nxt >= 0 else len(text)]
            if body.lstrip().startswith(("{", "[", "```")):
                out.append(body)
            start = nxt
        else:
            out.append(text[body_start:end])
            start = text.find(OPEN, end + len(CLOSE))
    return out


PIECES = [OPEN, CLOSE, "{", "[", "```", " ", "\n", "x", "<tool_", "call>"]
TAGGED = st.lists(st.one_of(st.sampled_from(PIECES), st.text(max_size=8)))


@settings(max_examples=400, deadline=None)
@given(TAGGED, st.integers(0, 6))
def test_the_one_pass_scan_finds_the_blocks_the_obvious_scan_does_and_stops_one_past_max_calls(parts, max_calls):
    text = "".join(parts)
    want = reference_blocks(text)
    assert _tagged_blocks(text, 10**9) == want
    assert _tagged_blocks(text, max_calls) == want[: max_calls + 1]


def _best_of_3(fn, arg) -> float:
    times = []
    for _ in range(3):
        start = time.perf_counter()
        fn(arg)
        times.append(time.perf_counter() - start)
    return min(times)


@pytest.mark.parametrize(
    "unit",
    [
        OPEN,  # one token in Qwen2.5: 200,000 of them took 54 s when each searched the rest for its end
        OPEN + "x",
        CLOSE,
        OPEN + " " * 3,
        OPEN + "{}",  # calls: the scan stops at the fifth
        f"<tool_call>{CALC}</tool_call>",
        "{" + OPEN,
    ],
)
def test_parsing_takes_time_linear_in_the_text(unit):
    """8x the text takes at most ~20x the time (linear: 8x; the quadratic scan: 64x), with a floor
    for timer noise; and 200,000 units take well under the 54 s the quadratic scan took."""
    small, big = unit * 25_000, unit * 200_000
    parse = lambda text: parse_tool_calls(text, TOOLS)  # noqa: E731
    t_small, t_big = _best_of_3(parse, small), _best_of_3(parse, big)
    assert t_big < 20 * t_small + 0.05, (t_small, t_big)
    assert t_big < 2.0
    got = parse(big)
    assert got == [] or got.kind in ("too_many_calls", "bad_json"), got


@pytest.mark.parametrize("depth", [1, MAX_ARGUMENT_DEPTH - 1, MAX_ARGUMENT_DEPTH, MAX_ARGUMENT_DEPTH + 1, 500, 980])
def test_arguments_nested_past_the_bound_are_a_bad_call_and_every_accepted_call_can_be_written(depth, tmp_path):
    """500 levels (1,075 characters) used to parse as a call and then crash the sample writer."""
    tools = [{"type": "function", "function": {"name": "search", "parameters": {"type": "object"}}}]
    inner = "[" * (depth - 1) + "]" * (depth - 1)  # the arguments object is level 1
    text = '<tool_call>{"name": "search", "arguments": {"q": ' + (inner or "1") + "}}</tool_call>"
    got = parse_tool_calls(text, tools)
    if depth > MAX_ARGUMENT_DEPTH:  # near Python's recursion limit json.loads itself refuses it (bad_json)
        assert isinstance(got, ToolCallError) and got.kind in ("bad_arguments", "bad_json") and "nested" in got.message
        assert depth > 500 or got.message == "arguments of search are nested more than 32 levels deep"
        return
    (c,) = got
    row = {"trajectory": {"turns": [{"tool_calls": [c.to_dict()]}]}}
    append_jsonl(tmp_path / "s.jsonl", [row])
    assert read_jsonl(tmp_path / "s.jsonl") == [json.loads(json.dumps(row))]


def test_hermes_messages_put_the_tools_in_the_system_message_and_calls_in_the_text():
    msgs = [
        {"role": "user", "content": "2+3?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"function": {"name": "calculator", "arguments": '{"expression": "2+3"}'}}],
        },
        {"role": "tool", "name": "calculator", "content": "5"},
    ]
    out = hermes_messages(msgs, [CalculatorTool.schema])
    assert out[0]["role"] == "system" and '"name": "calculator"' in out[0]["content"] and "<tool_call>" in out[0]["content"]
    assert parse_tool_calls(out[2]["content"], [CalculatorTool.schema]) == [
        ToolCall("calculator", {"expression": "2+3"}, "call_0_0")
    ]
    assert msgs[1]["content"] is None  # the caller's messages are left alone


def test_a_broken_tool_schema_is_not_the_policys_fault_and_never_raises():
    tools = [{"type": "function", "function": {"name": "odd", "parameters": {"type": "object", "required": 3, "enum": 5}}}]
    assert parse_tool_calls('{"name": "odd", "arguments": {"a": 1}}', tools)[0].arguments == {"a": 1}
    tools = [{"type": "function", "function": {"name": "odd", "parameters": "not a schema"}}]
    assert parse_tool_calls('{"name": "odd", "arguments": {}}', tools)[0].name == "odd"
