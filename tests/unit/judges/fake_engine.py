"""A scripted engine for unit tests of judge *logic* that does not depend on a model.

Never used by an end-to-end test: those run SmolLM2 for real.
"""

from __future__ import annotations

from grm.engines.base import Generation


class ScriptedEngine:
    """Answers each request with ``reply(prompt_text, sample_index, call_index)`` and records calls."""

    model_id = "scripted"
    version = 0

    def __init__(self, reply, continuation_logprobs=None):
        self.reply = reply
        self.continuation_logprobs = continuation_logprobs
        self.calls: list[tuple[int, int]] = []  # (requests, n) per generate call
        self.prompts: list[str] = []
        self.score_calls = 0

    @staticmethod
    def text_of(req) -> str:
        return req.text if req.text is not None else "\n".join(m["content"] for m in req.messages)

    def generate(self, requests, sampling):
        self.calls.append((len(requests), sampling.n))
        out = []
        for i, r in enumerate(requests):
            text = self.text_of(r)
            self.prompts.append(text)
            for j in range(sampling.n):
                t = self.reply(text, j, len(self.calls) - 1)
                out.append(
                    Generation(
                        text=t,
                        token_ids=[0] * max(1, len(t.split())),
                        logprobs=[0.0],
                        finish_reason="stop",
                        version=0,
                        request_index=i,
                        sample_index=j,
                    )
                )
        return out

    def score_continuations(self, requests, continuations):
        self.score_calls += 1
        return [self.continuation_logprobs(self.text_of(r), c) for r, c in zip(requests, continuations, strict=True)]

    def update_weights(self, state_dict, version):  # pragma: no cover
        self.version = version
