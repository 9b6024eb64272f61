"""A model directory's chat template runs under a time and output bound, and its failures are one
``ChatTemplateError`` naming the model (the template comes with the directory, from anyone)."""

import time

import pytest
from jinja2.sandbox import ImmutableSandboxedEnvironment

from grm.engines.base import GenerationRequest, render_prompt
from grm.models import chat_template
from grm.models.chat_template import ChatTemplateError, render_chat


class JinjaTokenizer:
    """What ``render_chat`` uses of a tokenizer, rendering as transformers does (a sandboxed Jinja
    template compiled to Python named ``<template>``), without loading any model."""

    def __init__(self, template: str, name: str = "/models/fake"):
        self.chat_template, self.name_or_path = template, name

    def apply_chat_template(self, messages, tokenize=False, add_generation_prompt=False, continue_final_message=False):
        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        text = env.from_string(self.chat_template).render(messages=messages, add_generation_prompt=add_generation_prompt)
        if continue_final_message and messages[-1]["content"] not in text:
            raise ValueError("continue_final_message is set but the final message does not appear in the chat")
        return text


CHAT = [{"role": "user", "content": "hi"}]
PLAIN = "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}"


def test_a_plain_template_renders_as_the_tokenizer_renders_it():
    tok = JinjaTokenizer(PLAIN)
    assert render_chat(tok, CHAT, add_generation_prompt=True) == "<user>hi<assistant>"
    assert render_prompt(tok, GenerationRequest(messages=CHAT)) == "<user>hi<assistant>"


@pytest.mark.timeout(30)
def test_a_template_that_loops_without_end_is_stopped_at_its_deadline(monkeypatch):
    monkeypatch.setattr(chat_template, "CHAT_TEMPLATE_TIMEOUT_S", 0.3)
    looping = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}" + PLAIN
    start = time.monotonic()
    with pytest.raises(ChatTemplateError, match="/models/fake: the chat template ran longer than 0.3 s"):
        render_prompt(JinjaTokenizer(looping), GenerationRequest(messages=CHAT))
    assert time.monotonic() - start < 2


@pytest.mark.timeout(30)
def test_a_template_that_prints_without_end_is_stopped_before_its_output_is_joined():
    many = "{% for i in range(100000) %}{% for m in messages %}{{ m.content }}{% endfor %}{% endfor %}"
    chat = [{"role": "user", "content": "y" * 100_000}]  # 10^10 characters if it ran to the end
    start = time.monotonic()
    with pytest.raises(ChatTemplateError, match="produced more than 1,400,000 characters"):
        render_chat(JinjaTokenizer(many), chat)
    assert time.monotonic() - start < 2


@pytest.mark.parametrize(
    ("template", "says"),
    [
        ("{{ raise_undefined() }}", "failed"),
        ("{{ 1 / 0 }}", "ZeroDivisionError"),
        ("{% for %}", "TemplateSyntaxError"),
        ("{{ messages.__class__.__mro__ }}", "failed"),
    ],
)
def test_a_template_that_fails_is_one_error_naming_the_model(template, says):
    with pytest.raises(ChatTemplateError, match=says) as e:
        render_chat(JinjaTokenizer(template), CHAT)
    assert str(e.value).startswith("/models/fake: the chat template") and "\n" not in str(e.value)


def test_a_template_that_drops_the_message_to_continue_is_one_error():
    request = GenerationRequest(messages=[*CHAT, {"role": "assistant", "content": "Score:"}], continue_final=True)
    with pytest.raises(ChatTemplateError, match="final message does not appear"):
        render_prompt(JinjaTokenizer("{{ 'nothing of the chat' }}"), request)


def test_a_template_longer_than_any_real_one_is_refused_before_it_is_compiled():
    with pytest.raises(ChatTemplateError, match="a chat template of 2,000,000 characters"):
        render_chat(JinjaTokenizer("x" * 2_000_000), CHAT)


def test_the_trace_in_place_before_a_render_is_put_back():
    import sys

    def mine(frame, event, arg):
        return None

    before = sys.gettrace()  # a coverage tool's, say
    sys.settrace(mine)
    try:
        render_chat(JinjaTokenizer(PLAIN), CHAT)
        assert sys.gettrace() is mine
    finally:
        sys.settrace(before)
