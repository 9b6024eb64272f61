"""A judge's training prompts (``data.judge_prompts``, ``pipelines/judge-grpo.yaml``): every labelled
pair of the data rendered through a pairwise judge spec's own prompt (its template, input guard,
system prompt and prefill), once in each order, so the model being trained as a judge is asked
exactly what it will be asked when it judges. Each order is one prompt; its reference is the verdict
that order should get and its metadata names the pair and the order (``grm.data.judge_pairs``), which
the ``verdict`` rule verifier reads. The two orders are consecutive: the prompt stream keeps them in
one step (``grm.data.prompts.PromptStream``, ``block=2``), where by default their critiques share one
advantage baseline (``Prompt.baseline``, ``data.judge_baseline``)."""

from __future__ import annotations

from pathlib import Path

from grm.config import ConfigError, load_judge
from grm.config.pipeline import DataSpec
from grm.data.items import labelled_pairs
from grm.data.judge_pairs import PAIR_KEY, pair_orders
from grm.data.prompts import Prompt
from grm.judges.errors import JudgeError
from grm.judges.prompts import JudgePrompts
from grm.judges.types import Sample


def judge_training_prompts(data: DataSpec) -> list[Prompt]:
    """Two prompts per labelled pair of ``data.prompts`` (``data.limit`` pairs at most), in the
    data's order; a ``ConfigError`` when the judge spec's prompt cannot be rendered."""
    assert data.judge_prompts is not None
    path = Path(data.judge_prompts)  # made absolute by grm.config.resolve
    spec = load_judge(path)
    try:
        prompts = JudgePrompts(spec, path.parent)
    except JudgeError as e:
        raise ConfigError(f"data.judge_prompts {path}: {e}") from None
    out = []
    for item in labelled_pairs(data.prompts, data.limit, "data.judge_prompts"):
        assert item.label is not None
        orders = pair_orders(item.label)
        sample = Sample(prompt=item.prompt, responses=list(item.responses), metadata=dict(item.extra), id=item.id)
        try:
            views = prompts.views([sample], [None], lambda s, key, o=orders: [(x.order, 1) for x in o], None)
        except JudgeError as e:
            raise ConfigError(f"data.judge_prompts: pair {item.id} of {data.prompts}: {e}") from None
        for o, v in zip(orders, views, strict=True):
            assert v.request is not None and v.request.messages is not None  # a chat judge (checked at load)
            users = [m["content"] for m in v.request.messages if m["role"] == "user"]
            out.append(
                Prompt(
                    id=f"{item.id}:{o.name}",
                    text=users[-1],
                    reference=o.verdict,
                    metadata={PAIR_KEY: {"pair": item.id, "order": o.name}},
                    where=f"{data.prompts} pair {item.id} ({o.name})",
                    messages=[dict(m) for m in v.request.messages],
                    baseline=f"pair:{item.id}" if data.judge_baseline == "pair" else None,
                )
            )
    return out
