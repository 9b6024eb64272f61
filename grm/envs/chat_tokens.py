"""The tokens an episode puts into the policy's context besides the policy's own: the first prompt,
and after each assistant turn the observations as the chat template renders them.

The context is never re-tokenised: it is the prompt's ids, then each turn's sampled ids as they
came, then each step's *delta*. The delta is what the template appends when the observations are
added: the conversation is rendered before (ending with the assistant turn) and after (with the
observations and the next assistant header), and only the new suffix is tokenised. In front of it
goes the *glue*: the text the template writes after an assistant message's content that the policy
did not sample. ChatML (SmolLM2, Qwen2.5) ends an assistant message with ``<|im_end|>\\n``; a turn
that stopped on ``<|im_end|>`` gets the ``\\n``, a turn cut at ``max_new_tokens`` the whole
``<|im_end|>\\n``.

Observation text is untrusted (a tool prints what the policy's code makes it print): it is
tokenised with special tokens split into plain text, so a printed ``<|im_start|>assistant`` is
text to the model, never a turn header. The template's own text around it keeps its special
tokens. For that, each observation is rendered as a unique placeholder and the delta cut there; a
template that changes the placeholder (escapes or reformats content) falls back to tokenising the
whole delta as one text, special tokens and all.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from grm.envs.tool_calls import chat_prompt
from grm.models.chat_template import ChatTemplateError, render_chat

_PROBE = "\ue000grm-assistant\ue001"


def _placeholder(i: int) -> str:
    return f"\ue000grm-observation-{i}\ue001"


class ChatTokens:
    """Token ids of an episode's context pieces for one tokenizer (its chat template applied with
    ``grm.envs.tool_calls.chat_prompt``, tools included)."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.special_ids = frozenset(getattr(tokenizer, "all_special_ids", ()) or ())
        probe = [{"role": "user", "content": "u"}, {"role": "assistant", "content": _PROBE}]
        text = render_chat(tokenizer, probe, add_generation_prompt=False)
        if _PROBE not in text:
            raise ChatTemplateError("the chat template does not write an assistant message's content as it is")
        self.end_marker = text[text.rindex(_PROBE) + len(_PROBE) :]
        """What the template writes after an assistant message's content (ChatML: ``<|im_end|>\\n``)."""

    def encode(self, text: str, *, literal: bool = False) -> list[int]:
        """``text``'s ids; ``literal`` splits special tokens into plain text (untrusted text)."""
        if not text:
            return []
        kw = {"split_special_tokens": True} if literal else {}
        return list(self.tokenizer(text, add_special_tokens=False, **kw)["input_ids"])

    def count(self, text: str) -> int:
        """Tokens of an observation's text (as ``encode(literal=True)`` writes them)."""
        return len(self.encode(text, literal=True))

    def prompt_ids(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]]) -> list[int]:
        """The task's first messages and tools, up to and including the first assistant header."""
        return self.encode(chat_prompt(self.tokenizer, messages, tools, add_generation_prompt=True))

    def glue(self, sampled: Sequence[int]) -> str:
        """The end of the assistant message the policy did not sample: the end marker past the
        special token it stopped on, or all of it (a turn cut short, or another stop)."""
        if sampled and sampled[-1] in self.special_ids:
            last = self.tokenizer.decode([sampled[-1]])
            if last and self.end_marker.startswith(last):
                return self.end_marker[len(last) :]
        return self.end_marker

    def observation_ids(
        self,
        history: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]],
        observations: Sequence[Mapping[str, Any]],
        sampled: Sequence[int],
    ) -> list[list[int]]:
        """The ids each observation message adds after an assistant turn: ``history`` ends with
        that turn (its text), ``sampled`` are its ids. Observation i holds the template text from
        the end of observation i - 1 through its own content (the first also the glue), the last
        also the template's closing text and the next assistant header. Concatenated they are the
        step's whole delta. ``ChatTemplateError`` when the template does not render by appending."""
        if not observations:
            raise ValueError("observation_ids needs at least one observation")
        before = chat_prompt(self.tokenizer, history, tools, add_generation_prompt=False)
        if not before.endswith(self.end_marker):
            raise ChatTemplateError(f"the chat template does not end an assistant message with {self.end_marker!r}")
        marks = [_placeholder(i) for i in range(len(observations))]
        shown = [{**o, "content": m} for o, m in zip(observations, marks, strict=True)]
        after = chat_prompt(self.tokenizer, [*history, *shown], tools, add_generation_prompt=True)
        if not after.startswith(before):
            raise ChatTemplateError(
                "the chat template renders a conversation with observations added as other than an extension of it"
            )
        glue, delta = self.glue(sampled), after[len(before) :]
        pieces, rest = [], delta
        for m in marks:
            head, found, rest = rest.partition(m)
            if not found or m in rest:
                return self._whole(history, tools, observations, before, glue)
            pieces.append(head)
        out = []
        for i, (head, o) in enumerate(zip(pieces, observations, strict=True)):
            out.append(self.encode((glue if i == 0 else "") + head) + self.encode(str(o["content"]), literal=True))
        out[-1] += self.encode(rest)
        return out

    def _whole(
        self,
        history: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]],
        observations: Sequence[Mapping[str, Any]],
        before: str,
        glue: str,
    ) -> list[list[int]]:
        """The fallback: the delta rendered with the real contents, one text, in the first observation."""
        after = chat_prompt(self.tokenizer, [*history, *observations], tools, add_generation_prompt=True)
        if not after.startswith(before):
            raise ChatTemplateError(
                "the chat template renders a conversation with observations added as other than an extension of it"
            )
        return [self.encode(glue + after[len(before) :])] + [[] for _ in observations[1:]]
