"""``grm eval --policy`` without a model: the statistics, resume bookkeeping after a crash, the
refusal to mix evaluations, and the --against comparison, with scripted engines."""

import json
import re

import pytest

from grm.config import JudgeSpec
from grm.evaluation import metrics as M
from grm.evaluation import policy_eval, policy_source
from grm.evaluation.policy_eval import PolicyEvalConfig, run_policy_eval
from grm.evaluation.runner import EvalError
from grm.judges import build_judge
from grm.judges.runtime import load
from grm.models import checkpoints
from tests.unit.judges.fake_engine import ScriptedEngine

# ----------------------------------------------------------------------------- statistics


def test_win_rate_counts_a_tie_as_half_and_a_masked_comparison_apart():
    wr = M.win_rate(["1", "1", "2", "tie", None])
    # (1 + 1 + 0 + 0.5) / 4 decided comparisons; the masked one is neither a loss nor a tie
    assert wr["n"] == 4 and wr["win_rate"] == pytest.approx(0.625)
    assert (wr["wins"], wr["losses"], wr["ties"], wr["masked"]) == (2, 1, 1, 1)
    lo, hi = wr["ci95"]
    assert 0 <= lo < 0.625 < hi <= 1
    assert M.win_rate(["1"] * 5)["ci95"] == (1.0, 1.0)  # no spread to resample
    empty = M.win_rate([None, None])
    assert empty["n"] == 0 and empty["masked"] == 2 and empty["win_rate"] != empty["win_rate"]  # NaN, not 0


def test_paired_difference_uses_prompts_both_sides_scored_and_resamples_pairs():
    d = M.paired_difference([3.0, 2.0, None, 5.0], [1.0, 2.0, 4.0, None])
    assert d["n"] == 2 and d["masked"] == 2 and d["mean"] == pytest.approx(1.0)  # (3-1 + 2-2) / 2
    assert 0.0 <= d["ci95"][0] <= 1.0 <= d["ci95"][1] <= 2.0
    # a constant shift: every paired resample has the same mean, though each side alone varies a lot
    a = [float(x) for x in range(0, 100, 7)]
    shifted = M.paired_difference([x + 0.5 for x in a], a)
    assert shifted["ci95"] == pytest.approx((0.5, 0.5))
    assert M.mean_ci(a)["ci95"][1] - M.mean_ci(a)["ci95"][0] > 10


def test_mean_ci_leaves_failures_out_and_counts_them():
    m = M.mean_ci([1.0, None, 3.0, float("nan")])
    assert m["n"] == 2 and m["masked"] == 2 and m["mean"] == 2.0


# ----------------------------------------------------------------------------- the runner


class FakePolicy(ScriptedEngine):
    """Answers arithmetic prompts right (``right=True``) or with a fixed wrong number; ``crash_at``:
    the generate call that raises, as a kill between batches would stop the run."""

    def __init__(self, right: bool, crash_at: int | None = None):
        super().__init__(self._answer)
        self.right, self.crash_at = right, crash_at

    def _answer(self, text, j, call):
        a, op, b = re.search(r"(\d+) ([-+*]) (\d+)", text).groups()
        value = eval(f"{a}{op}{b}") if self.right else -1  # noqa: S307 (digits and an operator from the regex)
        return f"The answer is {value}."

    def generate(self, requests, sampling):
        if self.crash_at is not None and len(self.calls) == self.crash_at:
            raise RuntimeError("killed")
        return super().generate(requests, sampling)


@pytest.fixture
def engines(monkeypatch):
    """POLICY answers right, anything else wrong; records every engine it hands out."""
    made = []

    def load_engine(src, **kw):
        eng = FakePolicy(right=src.ref == "smollm2-135m-instruct", crash_at=engines.crash_at)
        made.append((src.ref, eng))
        return eng

    engines = type("E", (), {"crash_at": None, "made": made})
    monkeypatch.setattr(policy_source, "load_engine", load_engine)
    return engines


def _lines(path):
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def cfg(out, **kw):
    base = dict(
        policy="smollm2-135m-instruct",
        prompts="builtin:arith-prompts",
        out=out,
        judges=["builtin:numeric-answer"],
        limit=5,
        batch_size=2,
        max_new_tokens=24,
    )
    return PolicyEvalConfig(**{**base, **kw})


def test_a_crash_mid_generation_resumes_without_redoing_or_duplicating(tmp_path, engines):
    out = tmp_path / "ev"
    engines.crash_at = 1  # the second batch dies: the first is on disk
    with pytest.raises(RuntimeError, match="killed"):
        run_policy_eval(cfg(out))
    assert [x["prompt_id"] for x in _lines(out / "responses.jsonl")] == ["arith-prompt-0", "arith-prompt-1"]
    assert not (out / "results.jsonl").exists()

    engines.crash_at = None
    m = run_policy_eval(cfg(out))
    assert engines.made[-1][1].calls == [(2, 1), (1, 1)]  # only the 3 missing prompts were generated
    resp = _lines(out / "responses.jsonl")
    assert sorted(x["prompt_id"] for x in resp) == [f"arith-prompt-{i}" for i in range(5)]
    res = _lines(out / "results.jsonl")
    assert len(res) == 5 and len({(x["judge"], x["side"], x["prompt_id"]) for x in res}) == 5
    jm = m["sides"]["policy"]["judges"]["numeric-answer"]
    assert jm["mean"] == 1.0 and jm["n"] == 5 and jm["masked"] == 0
    assert m["sides"]["policy"]["tokens"]["mean"] == pytest.approx(sum(x["tokens"] for x in resp) / 5)
    assert m["comparison"] is None
    summary = json.loads((out / "summary.json").read_text())
    assert summary["sides"]["policy"]["judges"]["numeric-answer"]["mean"] == 1.0
    assert (out / "report.md").read_text().count("numeric-answer") >= 1 and (out / "lengths.png").exists()

    # everything done: a re-run loads no model and writes nothing new; a larger --limit adds prompts
    n_engines = len(engines.made)
    run_policy_eval(cfg(out))
    assert len(engines.made) == n_engines and len(_lines(out / "results.jsonl")) == 5
    run_policy_eval(cfg(out, limit=6))
    assert engines.made[-1][1].calls == [(1, 1)] and len(_lines(out / "results.jsonl")) == 6


def test_resuming_with_other_sampling_or_policy_is_refused_unless_forced(tmp_path, engines):
    out = tmp_path / "ev"
    run_policy_eval(cfg(out, limit=2))
    with pytest.raises(EvalError, match="sampling"):
        run_policy_eval(cfg(out, limit=2, temperature=0.7))
    with pytest.raises(EvalError, match="policy"):
        run_policy_eval(cfg(out, limit=2, policy="qwen2.5-coder-0.5b-instruct"))
    n = len(engines.made)
    run_policy_eval(cfg(out, limit=2, temperature=0.7, force=True))
    assert len(engines.made) == n  # forced: the recorded responses are reused as they are


@pytest.mark.parametrize("damaged", ["policy: [\n", "- a list\n- not a mapping\n", "\xff"])
def test_a_damaged_record_is_named_on_resume_and_force_writes_it_anew(tmp_path, engines, damaged):
    out = tmp_path / "ev"
    run_policy_eval(cfg(out, limit=2))
    record = out / "config.resolved.yaml"
    record.write_bytes(damaged.encode("latin-1"))
    with pytest.raises(EvalError, match=re.escape(str(record)) + r":\d+: .*--force writes it anew"):
        run_policy_eval(cfg(out, limit=2))
    run_policy_eval(cfg(out, limit=2, force=True))
    assert "policy" in record.read_text()


def test_against_gives_win_rate_with_swap_and_paired_differences(tmp_path, engines, monkeypatch):
    (tmp_path / "p.j2").write_text("{# expects: prompt, responses #}A: {{ responses[0] }}\nB: {{ responses[1] }}")
    # a judge that prefers the response printing the right answer, whichever position it is shown in
    judge_eng = ScriptedEngine(lambda text, j, c: "[[A]]" if "A: The answer is -1." not in text else "[[B]]")
    pair = build_judge(
        JudgeSpec(name="pair", mode="pairwise", model="m", template="p.j2", parser={"type": "verdict"}, position={"swap": True}),
        tmp_path,
        judge_eng,
    )
    monkeypatch.setattr(policy_eval, "load_judges", lambda refs, ov: [load("builtin:numeric-answer"), pair])
    m = run_policy_eval(cfg(tmp_path / "ev", against="other-model/x", limit=4))
    assert [ref for ref, _ in engines.made] == ["smollm2-135m-instruct", "other-model/x"]
    assert judge_eng.calls and sum(k for k, _ in judge_eng.calls) == 8  # 4 pairs, both orders
    wr = m["comparison"]["judges"]["pair"]
    assert wr["kind"] == "win_rate" and wr["win_rate"] == 1.0 and wr["n"] == 4 and wr["positional_agreement"] == 1.0
    diff = m["comparison"]["judges"]["numeric-answer"]
    assert diff["kind"] == "difference" and diff["mean"] == 1.0 and diff["n"] == 4
    assert m["sides"]["other"]["judges"]["numeric-answer"]["mean"] == 0.0
    res = _lines(tmp_path / "ev" / "results.jsonl")
    assert sorted({x["side"] for x in res}) == ["other", "pair", "policy"] and len(res) == 12
    assert (tmp_path / "ev" / "win-rate.png").exists() and "POLICY vs OTHER" in (tmp_path / "ev" / "report.md").read_text()


def test_a_pairwise_judge_without_against_is_a_clear_error(tmp_path, engines):
    with pytest.raises(EvalError, match="--against"):
        run_policy_eval(cfg(tmp_path / "ev", judges=["builtin:pairwise-logprob"]))
    assert engines.made == []


def test_details_of_a_judge_are_reported_per_key(tmp_path):
    from grm.data.prompts import Prompt
    from grm.evaluation.policy_report import side_metrics

    prompts = [Prompt(id=str(i), text="q", reference=None) for i in range(3)]
    responses = {("policy", str(i)): {"tokens": 3, "chars": 10, "finish_reason": "stop"} for i in range(3)}
    lines = [
        {"judge": "ifeval", "side": "policy", "prompt_id": "0", "score": 1.0, "samples_total": 0, "parse_failures": 0,
         "details": {"lowercase": 1.0, "max_words": 1.0}},
        {"judge": "ifeval", "side": "policy", "prompt_id": "1", "score": 0.0, "samples_total": 0, "parse_failures": 0,
         "details": {"lowercase": 0.0}},
        {"judge": "ifeval", "side": "policy", "prompt_id": "2", "score": None, "samples_total": 0, "parse_failures": 0,
         "details": None},
    ]  # fmt: skip
    jm = side_metrics("policy", prompts, responses, lines)["judges"]["ifeval"]
    assert jm["mean"] == 0.5 and jm["masked"] == 1
    assert jm["details"]["lowercase"]["mean"] == 0.5 and jm["details"]["lowercase"]["n"] == 2
    assert jm["details"]["max_words"]["n"] == 1  # a key a response leaves out did not apply to it


def test_policy_sources_resolve_runs_checkpoints_specs_and_models(tmp_path):
    with pytest.raises(policy_source.PolicySourceError, match="not a run directory"):
        policy_source.resolve_policy(str(tmp_path))
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "config.resolved.yaml").write_text("policy: {spec: 'builtin:smollm2-135m-instruct', pool: train, overrides: []}\n")
    with pytest.raises(policy_source.PolicySourceError, match="no complete checkpoint"):
        policy_source.resolve_policy(str(run))
    for step in (2, 10, 12):
        (run / "checkpoints" / f"step-{step}" / "policy").mkdir(parents=True)
    for step in (2, 10):  # step-12 is half written: never picked
        (run / "checkpoints" / f"step-{step}" / "COMPLETE").write_text("ok\n")
    src = policy_source.resolve_policy(str(run))
    assert src.checkpoint == (run / "checkpoints" / "step-10").resolve() and src.model == "smollm2-135m-instruct"
    assert policy_source.resolve_policy(str(run / "checkpoints" / "step-2")).checkpoint.name == "step-2"
    with pytest.raises(policy_source.PolicySourceError, match="incomplete checkpoint"):
        policy_source.resolve_policy(str(run / "checkpoints" / "step-12"))
    (tmp_path / "terse.yaml").write_text("name: terse\nmodel: smollm2-135m-instruct\nsystem_prompt: Be terse.\n")
    spec = policy_source.resolve_policy(str(tmp_path / "terse.yaml"))
    assert spec.system_prompt == "Be terse." and spec.checkpoint is None
    assert policy_source.resolve_policy("smollm2-135m-instruct").identity()["checkpoint"] is None
    for damaged in ("policy: [\n", "- a list\n", "policy: just text\n"):
        (run / "config.resolved.yaml").write_text(damaged)
        with pytest.raises(policy_source.PolicySourceError, match=re.escape(str(run / "config.resolved.yaml"))):
            policy_source.resolve_policy(str(run))


def test_checkpoint_weights_of_either_trainer_load_into_the_base_model(tmp_path):
    import torch
    from safetensors.torch import save_file
    from transformers import LlamaConfig, LlamaForCausalLM

    from grm.models.weights import unique_tensors

    def tiny():
        torch.manual_seed(0)
        return LlamaForCausalLM(
            LlamaConfig(
                vocab_size=64,
                hidden_size=16,
                intermediate_size=32,
                num_hidden_layers=1,
                num_attention_heads=2,
                tie_word_embeddings=True,
            )
        )

    trained = tiny()
    with torch.no_grad():
        for p in trained.parameters():
            p.add_(1.0)
    # torch backend: model.safetensors with the tied LM head stored once under the embedding's name
    torch_ckpt = tmp_path / "torch" / "policy"
    torch_ckpt.mkdir(parents=True)
    save_file(unique_tensors(trained.state_dict()), str(torch_ckpt / "model.safetensors"))
    # DeepSpeed ZeRO-0: the whole module in the model-states file
    ds_state = tmp_path / "ds" / "policy" / "state"
    ds_state.mkdir(parents=True)
    torch.save({"module": trained.state_dict()}, ds_state / "mp_rank_00_model_states.pt")
    for ckpt in (tmp_path / "torch", tmp_path / "ds"):
        model = tiny()
        checkpoints.apply_state(model, checkpoints.checkpoint_state(ckpt), ckpt)
        for k, v in trained.state_dict().items():
            assert torch.equal(model.state_dict()[k], v), (ckpt.name, k)
        assert torch.equal(model.lm_head.weight, trained.model.embed_tokens.weight)  # still tied
    broken = {k: v for k, v in unique_tensors(trained.state_dict()).items() if "mlp" not in k}
    with pytest.raises(checkpoints.CheckpointError, match="missing"):
        checkpoints.apply_state(tiny(), broken, tmp_path)
    with pytest.raises(checkpoints.CheckpointError, match="no policy weights"):
        checkpoints.checkpoint_state(tmp_path / "empty")


def test_the_constraints_verifier_reads_each_prompts_own_constraints(tmp_path, monkeypatch):
    """A prompt set with a ``constraints`` column carries it to the verifier, as ``grm run`` does with
    ``data.constraints_field``: before, every response was masked ('no constraints')."""

    class Keyword(ScriptedEngine):  # writes every keyword it is asked for, and nothing else
        def __init__(self):
            super().__init__(lambda text, j, call: " ".join(re.findall(r'Include the word "(\w+)"', text)) or "ok")

    monkeypatch.setattr(policy_source, "load_engine", lambda src, **kw: Keyword())
    m = run_policy_eval(
        cfg(tmp_path / "ev", prompts="builtin:constraints-lexical-heldout", judges=["builtin:constraints"], limit=12)
    )
    jm = m["sides"]["policy"]["judges"]["constraints"]
    assert jm["masked"] == 0 and jm["n"] == 12
    assert jm["details"]["keyword"]["mean"] == 1.0  # the keyword constraints hold
    assert jm["details"]["start_phrase"]["mean"] == 0.0  # a start phrase was never written


def test_a_judgment_is_keyed_by_the_metadata_the_judge_saw():
    """A result made before a prompt's constraints reached the verifier (masked) is not taken as done
    once they do; results of prompts without metadata keep the key they always had."""
    from grm.data.prompts import Prompt
    from grm.evaluation.policy_eval import judged_sha, sha

    bare, with_meta = Prompt("p", "say hi", None), Prompt("p", "say hi", None, {"constraints": [{"type": "title"}]})
    assert judged_sha(bare, ["hi"]) == sha("hi")
    assert judged_sha(with_meta, ["hi"]) != judged_sha(bare, ["hi"])
