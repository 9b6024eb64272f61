"""Tools rendered by the real chat templates of the shipped models (tokenizers only, no weights):
Qwen2.5 renders them itself; SmolLM2's template ignores them, so the Hermes block goes into the
system message. Either way a call written as the prompt asks is read back by the parser."""

import pytest

from grm.envs.calc import CalcEnv
from grm.envs.tool_calls import chat_prompt, parse_tool_calls
from grm.models.store import grm_home


def tokenizer(name: str):
    path = grm_home() / "models" / name
    if not (path / "tokenizer_config.json").is_file():
        pytest.skip(f"{name} is not in the model store ({path}); grm models fetch {name}")
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path)


@pytest.fixture(scope="module")
def episode():
    reset = CalcEnv().reset({"seed": 7})
    return reset.messages, reset.tools


def test_qwen_renders_the_tools_with_its_own_template(episode):
    messages, tools = episode
    tok = tokenizer("qwen2.5-coder-1.5b-instruct")
    text = chat_prompt(tok, messages, tools)
    assert "<tools>" in text and '"name": "calculator"' in text and text.endswith("<|im_start|>assistant\n")
    assert text == tok.apply_chat_template(messages, tools=tools, tokenize=False, add_generation_prompt=True)
    # <tool_call> is one token in Qwen's vocabulary: the model emits it as one
    assert len(tok.encode("<tool_call>", add_special_tokens=False)) == 1
    call = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "3*4"}}\n</tool_call>'
    assert parse_tool_calls(call, tools)[0].arguments == {"expression": "3*4"}


def test_smollm_gets_the_hermes_instructions_in_its_system_message(episode):
    messages, tools = episode
    tok = tokenizer("smollm2-135m-instruct")
    plain = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert tok.apply_chat_template(messages, tools=tools, tokenize=False, add_generation_prompt=True) == plain  # ignored
    text = chat_prompt(tok, messages, tools)
    assert text != plain and text.startswith("<|im_start|>system\nSolve the math word problem.")
    assert "<tools>" in text and '"name": "calculator"' in text and "<tool_call></tool_call> XML tags" in text
    assert text.endswith("<|im_start|>assistant\n")
    # a tool turn renders with SmolLM's generic role header
    history = [*messages, {"role": "assistant", "content": "x"}, {"role": "tool", "name": "calculator", "content": "12"}]
    assert "<|im_start|>tool\n12<|im_end|>" in chat_prompt(tok, history, tools)
