"""What a model judge sends: its templates rendered over a sample into engine requests, one per
presentation of each item (a ``View``), every judged response guarded first (``grm.judges.guard``)
and every judged trajectory cut and fitted to the judge's context (``grm.judges.trajectory_view``).

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
from grm.judges.base import item_name
from grm.judges.errors import JudgeError
from grm.judges.guard import Guarded, InputGuard, Lengths
from grm.judges.neutralise import neutralise
from grm.judges.templates import Template, load_template, render_limits
from grm.judges.trajectory_view import Count, Episode, fit, get_text, observation_counter, set_text
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

    def variables(
        self, s: Sample, order: list[int] | None, principles: str | None, episodes: list[dict[str, Any]] | None = None
    ) -> dict[str, Any]:
        """What a template sees: the item, its responses in ``order``, the principles written for it,
        and its trajectories as ``episodes`` shows them (``trajectory``: a pointwise item's;
        ``trajectories``: the others', in ``order``; None without)."""
        responses = [s.responses[i] for i in order] if s.responses is not None and order is not None else s.responses
        trajectory = episodes[0] if episodes is not None and s.trajectories is None else None
        trajectories = None
        if episodes is not None and s.trajectories is not None:
            trajectories = [episodes[i] for i in order] if order is not None else episodes
        return {
            "trajectory": trajectory,
            "trajectories": trajectories,
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
        count, unit = observation_counter(engine)
        for i, (s, p) in enumerate(zip(samples, principles, strict=True)):
            key = s.id or hashlib.sha256(f"{s.prompt}\x00{s.response}\x00{s.responses}".encode()).hexdigest()[:12]
            if s.trajectory is not None or s.trajectories is not None:
                out += self._episode_views(i, s, key, p, orders, lengths, count, unit)
                continue

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

    def _episode_views(
        self, i: int, s: Sample, key: str, p: str | None, orders: Orders, lengths: Lengths, count: Count, unit: str
    ) -> list[View]:
        """The views of an item of trajectories: observations cut to their budget, final answers
        guarded (with at most half the room the template and tasks leave), then the episodes fitted
        so that every presentation order's prompt is within the judge's context."""
        trajectories = [s.trajectory] if s.trajectory is not None else list(s.trajectories or [])
        if s.id is None:  # final answers alone may repeat across items: the episodes' ids tell them apart
            key = hashlib.sha256("\x00".join([key, *(t.id for t in trajectories)]).encode()).hexdigest()[:12]
        episodes = [Episode.of(t, self.spec.trajectory, count, unit) for t in trajectories]
        directed = 0
        if self.spec.guard.neutralise:  # the turns are the policy's too (tool output included: its code ran)
            for e in episodes:
                for h, k in e.texts(task=False):
                    done = neutralise(get_text(h, k))
                    set_text(h, k, done.text)
                    directed += done.removed
        tokens = lengths.tokenizer is not None and lengths.context is not None
        limit = lengths.context - self.guard.reserve if tokens and lengths.context else self.spec.trajectory.max_prompt_chars

        def user(shown: Sample, note: str, order: list[int] | None, shows: list[dict[str, Any]]) -> str:
            return note + self.template.render(limits=self.limits, **self.variables(shown, order, p, shows))

        def size(text: str) -> int:
            return lengths.prompt(self.request(text)) if tokens else len(text) + len(self.spec.system or "")

        def prompt_tokens(bare: Sample, note: str) -> int:  # called by the guard only when counting tokens
            fixed = size(user(bare, note, None, [e.bare() for e in episodes]))
            return fixed + max(0, limit - fixed) // 2

        guard = self.guard
        if not tokens:  # characters: the answers share at most half of the prompt's characters
            cap = min(self.spec.guard.max_response_chars, max(1, limit // (2 * len(episodes))))
            guard = InputGuard(
                self.spec.model_copy(update={"guard": self.spec.guard.model_copy(update={"max_response_chars": cap})})
            )
        shown: Guarded = guard.apply(s, key, lengths, prompt_tokens)
        presented = orders(s, key)
        distinct = [o for k, (o, _) in enumerate(presented) if o not in [q for q, _ in presented[:k]]]

        def measure() -> int:
            shows = [e.variables() for e in episodes]
            return max(size(user(shown.sample, shown.note, order, shows)) for order in distinct)

        fit(episodes, measure, limit, lengths.count if tokens else len, item_name(s, i))
        shows = [e.variables() for e in episodes]
        truncated = shown.truncated + sum(e.shortened for e in episodes)
        cut = sum(e.view.cuts for e in episodes)
        return [
            View(
                item=i,
                view=v,
                order=order,
                n=n,
                request=self.request(user(shown.sample, shown.note, order, shows)),
                truncated=truncated,
                judge_directed=shown.judge_directed + directed,
                observations_cut=cut,
                turns=len(trajectories[0].turns) if s.trajectory is not None else None,
            )
            for v, (order, n) in enumerate(presented)
        ]

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
