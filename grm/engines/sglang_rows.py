"""A generated row over the stretches weight updates cut it into (``SGLangEngine.generate`` with
``schedule.interruptible``): its tokens, their log-probs and the version that sampled each, where
it goes on from, and where it ends when no server saw all of its tokens as output."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from grm.engines.base import Generation, SamplingParams
from grm.engines.sglang_api import Segment


def row_end(tokenizer: Any, sp: SamplingParams) -> Callable[[list[int]], int | None]:
    """For a row that spans stretches: how many of its tokens stand once an end-of-sequence
    token or a stop string ends it (None: neither does). No server saw all of its tokens as
    output, so a stop string across a cut went unseen, and a pause can land in the step that
    sampled the end."""
    eos = {getattr(tokenizer, "eos_token_id", None)} - {None}
    stops = [x for x in sp.stop if x]

    def stopped(tokens: list[int]) -> bool:
        text = tokenizer.decode(tokens, skip_special_tokens=True)
        return any(x in text for x in stops)

    def ends(tokens: list[int]) -> int | None:
        end = next((k + 1 for k, t in enumerate(tokens) if t in eos), None)
        if not stops or not stopped(tokens[:end]):
            return end
        lo, hi = 1, len(tokens) if end is None else end  # the shortest prefix holding a stop string
        while lo < hi:
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if stopped(tokens[:mid]) else (mid + 1, hi)
        return lo

    return ends


class CutRow:
    """One generated row as it comes in, over the stretches a weight update cut it into: its tokens,
    their log-probs and the version that sampled each."""

    def __init__(self, prompt: list[int], request: int, sample: int, seed: int | None) -> None:
        self.prompt, self.request, self.sample, self.seed = prompt, request, sample, seed
        self.tokens: list[int] = []
        self.logprobs: list[float] = []
        self.versions: list[int] = []
        self.finish = "abort"
        """The last stretch's (``stop``, ``length``, or ``abort``: cut, to go on)."""
        self.text = ""
        self.stretches = 0
        self.first_version = 0
        self.prompt_tokens = 0
        self.ended = False
        """Cut at an end the servers did not see (``_ends``): the text is decoded here."""

    def add(self, seg: Segment, version: int, ends: Callable[[list[int]], int | None]) -> None:
        if not self.stretches:
            self.first_version, self.prompt_tokens = version, seg.prompt_tokens
        self.stretches += 1
        self.tokens += seg.token_ids
        self.logprobs += seg.logprobs
        self.versions += [version] * len(seg.token_ids)
        self.finish, self.text = seg.finish, seg.text
        if self.stretches > 1 or seg.finish == "abort":
            end = ends(self.tokens)
            if end is not None:
                del self.tokens[end:], self.logprobs[end:], self.versions[end:]
                self.finish, self.ended = "stop", True

    def ids(self) -> list[int]:
        """What the row goes on from: its prompt and every token it has."""
        return self.prompt + self.tokens

    def left(self, sp: SamplingParams) -> int:
        return sp.max_new_tokens - len(self.tokens)

    def next_seed(self) -> int | None:
        """A stretch's own seed, from the row's and how many stretches came before: the same row
        cut at the same token goes on the same way."""
        return None if self.seed is None else (self.seed * 1_000_003 + self.stretches) % (1 << 63)

    def generation(self, tokenizer: Any, sp: SamplingParams) -> Generation:
        """The whole row. One stretch that ended on the server: the server's text; otherwise the
        tokens decoded, cut before the first stop string."""
        text = self.text
        if self.stretches > 1 or self.ended:
            text = tokenizer.decode(self.tokens, skip_special_tokens=True)
            cuts = [text.find(x) for x in sp.stop if x and x in text]
            text = text[: min(cuts)] if cuts else text
        return Generation(
            text=text,
            token_ids=self.tokens,
            logprobs=self.logprobs,
            finish_reason="stop" if self.finish == "stop" else "length",  # abort: cut with no token left
            version=self.versions[0] if self.versions else self.first_version,
            prompt_tokens=self.prompt_tokens,
            request_index=self.request,
            sample_index=self.sample,
            token_versions=self.versions if len(set(self.versions)) > 1 else None,
        )
