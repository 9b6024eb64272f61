"""What a model judge sends: its templates rendered over a sample into engine requests, one per
presentation of each item (a ``View``), every judged response guarded first (``grm.judges.guard``).

``JudgePrompts`` only renders; ``grm.judges.sampler`` turns the requests into critique records.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from grm.config.judge import JudgeSpec
from grm.config.paths import resolve_path
from grm.engines.base import GenerationEngine, GenerationRequest
from grm.judges.errors import JudgeError
from grm.judges.guard import InputGuard, Lengths
from grm.judges.templates import Template, load_template, render_limits
from grm.judges.types import Sample
from grm.judges.views import View

Orders = Callable[[Sample, str], list[tuple[list[int], int]]]
"""A mode's ``orders``: (order, n) per view of a sample, given the item's key."""


def load_judge_template(ref: str, base_dir: Path) -> Template:
    """A template a judge spec names (a path relative to ``base_dir``, or ``builtin:``)."""
    try:
        return load_template(resolve_path(ref, base_dir, "prompts"))
    except FileNotFoundError as e:
        raise JudgeError(str(e)) from None


class JudgePrompts:
    """A model judge's templates (the judge's and its principles stage's) and how they become requests."""

    def __init__(self, spec: JudgeSpec, base_dir: Path) -> None:
        if spec.template is None:
            raise JudgeError(f"mode '{spec.mode}' needs template: a .j2 file")
        self.spec = spec
        self.limits = render_limits(spec.limits)
        self.template = load_judge_template(spec.template, base_dir)
        self.principles_template = load_judge_template(spec.principles.template, base_dir) if spec.principles else None
        self.guard = InputGuard(spec)

    def variables(self, s: Sample, order: list[int] | None, principles: str | None) -> dict[str, Any]:
        """What a template sees: the item, its responses in ``order``, the principles written for it."""
        responses = [s.responses[i] for i in order] if s.responses is not None and order is not None else s.responses
        return {
            "prompt": s.prompt,
            "messages": s.messages or [{"role": "user", "content": s.prompt}],
            "response": s.response,
            "responses": responses,
            "reference": s.reference,
            "principles": principles,
            "metadata": s.metadata,
            "critique": s.critique,
            "question": s.metadata.get("question"),  # a checklist judge's item (grm.judges.checklist)
        }

    def request(self, user: str) -> GenerationRequest:
        """The judge's request for a rendered user message: system prompt, chat or plain text, prefill."""
        prefill = self.spec.prefill or ""
        if not self.spec.chat:
            system = f"{self.spec.system}\n\n" if self.spec.system else ""
            return GenerationRequest(text=system + user + prefill)
        msgs = [{"role": "system", "content": self.spec.system}] if self.spec.system else []
        msgs.append({"role": "user", "content": user})
        if prefill:
            msgs.append({"role": "assistant", "content": prefill})
        return GenerationRequest(messages=msgs, continue_final=bool(prefill))

    def principles_request(self, s: Sample) -> GenerationRequest:
        """The principles stage's request for one item (``spec.principles``)."""
        assert self.principles_template is not None
        text = self.principles_template.render(limits=self.limits, **self.variables(s, None, None))
        msgs = [{"role": "system", "content": self.spec.system}] if self.spec.system else []
        return GenerationRequest(messages=msgs + [{"role": "user", "content": text}])

    def views(
        self, samples: Sequence[Sample], principles: Sequence[str | None], orders: Orders, engine: GenerationEngine | None
    ) -> list[View]:
        """Every presentation of every item, its responses guarded. Lengths are judge tokens when
        ``engine`` is loaded and can count them (rendering before any scoring counts characters)."""
        out = []
        lengths = Lengths(engine, self.spec.guard)
        for i, (s, p) in enumerate(zip(samples, principles, strict=True)):
            key = s.id or hashlib.sha256(f"{s.prompt}\x00{s.response}\x00{s.responses}".encode()).hexdigest()[:12]

            def prompt_tokens(bare: Sample, note: str, p: str | None = p) -> int:
                return lengths.prompt(
                    self.request(note + self.template.render(limits=self.limits, **self.variables(bare, None, p)))
                )

            shown = self.guard.apply(s, key, lengths, prompt_tokens)
            for v, (order, n) in enumerate(orders(s, key)):
                user = shown.note + self.template.render(limits=self.limits, **self.variables(shown.sample, order, p))
                out.append(
                    View(
                        item=i,
                        view=v,
                        order=order,
                        n=n,
                        request=self.request(user),
                        truncated=shown.truncated,
                        judge_directed=shown.judge_directed,
                    )
                )
        return out

    def stages(self, sample: Sample, orders: Orders, engine: GenerationEngine | None) -> list[dict[str, Any]]:
        """Every prompt the judge would send for ``sample`` (principles stage shown with a placeholder)."""
        sample.check_for(self.spec.mode, self.spec.reference)
        stages: list[dict[str, Any]] = []
        placeholder = None
        if self.principles_template is not None:
            stages.append({"stage": "principles", "request": self.principles_request(sample)})
            placeholder = "<principles generated by the principles stage>"
        for v in self.views([sample], [placeholder], orders, engine):
            stages.append({"stage": "judge", "view": v.view, "order": v.order, "n": v.n, "request": v.request})
        return stages

    def sha256(self) -> dict[str, str | None]:
        """The templates' hashes, for provenance."""
        principles = self.principles_template.sha256 if self.principles_template else None
        return {"template_sha256": self.template.sha256, "principles_template_sha256": principles}
