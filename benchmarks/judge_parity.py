"""Every shipped judge's output on fixed items, as JSON: run before and after a refactor of the
judge code and compare (``--compare A B``), so "behaviour unchanged" is a diff, not a claim.

For each ``judges/*.yaml`` it scores the judge's fixture and a second item in one batch, scores
one pipeline-like group (``score_groups``), renders the fixture, rescores the stored results
(model judges) and records the normalised scores. Critiques are cut to ``--max-new-tokens`` to
keep the run short on CPU; every model judge ships on SmolLM2-135M, so one model is loaded.

    python benchmarks/judge_parity.py --out /tmp/parity-before.json
    python benchmarks/judge_parity.py --out /tmp/parity-after.json
    python benchmarks/judge_parity.py --compare /tmp/parity-before.json /tmp/parity-after.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

ROOT = Path(__file__).resolve().parent.parent
VOLATILE = {"seconds"}
"""Result fields that differ between two identical runs (wall time)."""


def _clean(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: _clean(v) for k, v in x.items() if k not in VOLATILE}
    if isinstance(x, list):
        return [_clean(v) for v in x]
    return x


def _items(fixture: dict[str, Any]) -> list[dict[str, Any]]:
    """The fixture and a variant with other responses (same prompt, reference and metadata)."""
    other = dict(fixture, id=f"{fixture.get('id', 'item')}-b")
    if "response" in fixture:
        other["response"] = "I am not sure. Maybe the answer is 7, or possibly something else entirely."
    if "responses" in fixture:
        other["responses"] = list(reversed(fixture["responses"]))
    return [fixture, other]


def _group(fixture: dict[str, Any]) -> list[dict[str, Any]]:
    """Three pointwise samples of one prompt, as a pipeline's group hands them to ``score_groups``."""
    texts = list(fixture.get("responses") or []) + [fixture.get("response") or "", "No idea."]
    texts = [t for t in texts if t][:3]
    while len(texts) < 3:
        texts.append(f"Answer number {len(texts)}.")
    base = {k: v for k, v in fixture.items() if k not in ("response", "responses", "id")}
    return [dict(base, response=t, id=f"g/{k}") for k, t in enumerate(texts)]


def run(max_new_tokens: int) -> dict[str, Any]:
    from grm.judges.runtime import load
    from grm.judges.types import Sample

    api = _api()
    out: dict[str, Any] = {}
    for path in sorted((ROOT / "judges").glob("*.yaml")):
        fixture = json.loads((ROOT / "judges" / "fixtures" / f"{path.stem}.json").read_text())
        judge = load(path)
        if judge.spec.mode != "rule":
            over = [f"sampling.max_new_tokens={max_new_tokens}"]
            if judge.spec.checklist is not None and judge.spec.checklist.source == "model":
                over.append(f"checklist.sampling.max_new_tokens={max(max_new_tokens, 48)}")
            if judge.spec.principles is not None:
                over.append(f"principles.sampling.max_new_tokens={max_new_tokens}")
            judge = load(path, overrides=over)
        samples = [Sample.from_dict(d) for d in _items(fixture)]
        batch = judge.score_batch(samples)
        entry: dict[str, Any] = {"batch": [r.to_dict() for r in batch]}
        group = [Sample.from_dict(d) for d in _group(fixture)]
        try:
            entry["groups"] = [[r.to_dict() if r else None for r in g] for g in judge.score_groups([group])]
        except Exception as e:  # a judge that cannot judge this group says so, the same before and after
            entry["groups"] = f"{type(e).__name__}: {e}"
        entry["render"] = json.loads(json.dumps(api.render(judge, samples[0]), default=lambda o: getattr(o, "__dict__", str(o))))
        if judge.spec.mode != "rule":
            n = len(samples[0].responses or [])
            entry["rescore"] = [api.rescore(judge, r.to_dict(), n).to_dict() for r in batch[:1]]
        entry["normalized"] = [api.normalize(judge, r.score) for r in batch]
        entry["range"] = api.score_range(judge)
        entry["provenance"] = api.provenance(judge)
        out[path.stem] = _clean(entry)
        print(f"{path.stem:36s} scores {[r.score for r in batch]}", flush=True)
    return out


class _api:
    """The judge members/functions a caller uses, whichever side of the refactor this runs on."""

    @staticmethod
    def render(judge: Any, sample: Any) -> Any:
        if hasattr(judge, "render"):
            return judge.render(sample)
        from grm.judges.render import render

        return render(judge, sample)

    @staticmethod
    def rescore(judge: Any, stored: dict[str, Any], n: int) -> Any:
        if hasattr(judge, "rescore"):
            return judge.rescore(stored, n)
        from grm.judges.rescore import rescore

        return rescore(judge, stored, n)

    @staticmethod
    def normalize(judge: Any, x: float | None) -> float | None:
        if hasattr(judge, "normalize"):
            return judge.normalize(x)
        from grm.judges.base import normalize

        return normalize(judge.spec, x)

    @staticmethod
    def score_range(judge: Any) -> Any:
        if hasattr(judge, "score_range"):
            return judge.score_range()
        from grm.judges.base import score_range

        return score_range(judge.spec)

    @staticmethod
    def provenance(judge: Any) -> Any:
        return judge.provenance()  # each judge class's own (not part of the Judge protocol)


def _without_added(old: Any, new: Any, added: set[str]) -> Any:
    """``new`` without the keys ``old`` lacks whose value is empty (a field added at its default),
    naming them in ``added``: a new field that changes nothing is not a difference."""
    if isinstance(old, dict) and isinstance(new, dict):
        out = {}
        for k, v in new.items():
            if k not in old and v in (None, 0, [], {}, False):
                added.add(k)
                continue
            out[k] = _without_added(old.get(k), v, added)
        return out
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        return [_without_added(o, n, added) for o, n in zip(old, new, strict=True)]
    return new


def compare(a: Path, b: Path) -> int:
    old, new = json.loads(a.read_text()), json.loads(b.read_text())
    added: set[str] = set()
    new = {k: _without_added(old.get(k), v, added) if k in old else v for k, v in new.items()}
    if added:
        print(f"fields added at their defaults (ignored): {', '.join(sorted(added))}")
    for name in sorted(set(new) - set(old)):
        print(f"{name:36s} new judge (not compared)")
    bad = 0
    for name in sorted(old):
        if old.get(name) == new.get(name):
            print(f"{name:36s} identical")
            continue
        bad += 1
        for part in sorted(set(old.get(name, {})) | set(new.get(name, {}))):
            if old.get(name, {}).get(part) != new.get(name, {}).get(part):
                print(f"{name:36s} DIFFERS in {part}")
    print(f"{len(old) - bad} judges identical, {bad} differ")
    return 1 if bad else 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path)
    p.add_argument("--max-new-tokens", type=int, default=24)
    p.add_argument("--compare", nargs=2, type=Path, metavar=("BEFORE", "AFTER"))
    args = p.parse_args()
    if args.compare:
        return compare(*args.compare)
    if args.out is None:
        p.error("--out or --compare")
    import torch

    torch.manual_seed(0)
    result = run(args.max_new_tokens)
    args.out.write_text(json.dumps(result, indent=1, sort_keys=True, default=str))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
