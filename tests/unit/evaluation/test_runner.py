"""Evaluation runner pieces that need no model."""

import json

from grm.config import JudgeSpec
from grm.evaluation import report
from grm.evaluation.judge_metrics import compute
from grm.evaluation.runner import EvalConfig, both_orders, past_deadline, run
from grm.judges import build_judge


def test_both_orders_forces_swap_on_pairwise_judges_only():
    pair = JudgeSpec(name="p", mode="pairwise", model="m", template="p.j2", parser={"type": "verdict"})
    swapped = both_orders(pair)
    assert swapped.position.swap is True and pair.position.swap is False  # a copy; the loaded spec is untouched
    assert both_orders(swapped) is swapped
    point = JudgeSpec(name="s", mode="pointwise", model="m", template="t.j2")
    assert both_orders(point) is point


def test_a_batch_past_the_judges_deadline_is_reported_not_cut(tmp_path, monkeypatch):
    spec = JudgeSpec(name="r", mode="rule", rule={"type": "numeric-answer"}, limits={"deadline_s": 5})
    judge = build_judge(spec)
    assert past_deadline(judge, 10, 4.9) is None
    assert "past its 5 s deadline" in past_deadline(judge, 10, 6.0)
    # through grm eval: every batch of a judge with a near-zero deadline overruns, and is still scored
    (tmp_path / "r.yaml").write_text("name: r\nmode: rule\nrule: {type: numeric-answer}\nlimits: {deadline_s: 1.0e-9}\n")
    rows = [{"prompt": f"{i}+{i}?", "response": f"Answer: {2 * i}", "reference": str(2 * i), "human_score": 1} for i in range(3)]
    (tmp_path / "d.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    monkeypatch.setattr(report, "write_outputs", lambda out, results, names, *, extra, console, **_: extra)  # no plots
    m = run(EvalConfig(judges=[str(tmp_path / "r.yaml")], data=str(tmp_path / "d.jsonl"), out=tmp_path / "out", batch_size=2))
    assert m["deadline_overruns_this_run"] == {"r": 2}
    assert len((tmp_path / "out" / "results.jsonl").read_text().splitlines()) == 3


def test_eval_records_each_batchs_cost_and_reports_it_per_judge(tmp_path, monkeypatch):
    # a pointwise judge on a scripted engine, n=2, over 3 items in batches of 2: 6 critiques of
    # 3 tokens each ("Score: 7 ok")
    from tests.unit.judges.fake_engine import ScriptedEngine

    engine = ScriptedEngine(lambda *a: "Score: 7 ok")
    monkeypatch.setattr("grm.judges.engine_slot.shared_engine", lambda model, spec: engine)
    (tmp_path / "t.j2").write_text("{# expects: prompt, response #}Q: {{ prompt }} A: {{ response }}")
    (tmp_path / "pw.yaml").write_text(
        "name: pw\nmode: pointwise\nmodel: m\ntemplate: t.j2\nparser: {type: regex, range: [0, 10]}\nsampling: {n: 2}\n"
    )
    rows = [{"prompt": f"q{i}", "response": f"r{i}", "human_score": i} for i in range(3)]
    (tmp_path / "d.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    monkeypatch.setattr(report, "write_outputs", lambda out, results, names, *, extra, console, **_: extra)  # no plots
    run(EvalConfig(judges=[str(tmp_path / "pw.yaml")], data=str(tmp_path / "d.jsonl"), out=tmp_path / "out", batch_size=2))
    lines = [json.loads(ln) for ln in (tmp_path / "out" / "results.jsonl").read_text().splitlines()]
    assert [ln["cost"]["calls"] for ln in lines] == [2, 2, 2]  # each batch's calls shared by its items
    m = compute(lines, ["pw"])
    cost = m["judges"]["pw"]["cost"]
    assert (cost["calls"], cost["retries"], cost["generated_tokens"], cost["items"]) == (6, 0, 18, 3)
    (row,) = report.cost_rows(m)
    assert (row["judge"], row["calls"], row["gen tok"]) == ("pw", "6", "18") and "server req" not in row
    # lines from before cost accounting count nothing, and no table is made of nothing
    old = [{k: v for k, v in ln.items() if k != "cost"} for ln in lines]
    assert "cost" not in compute(old, ["pw"])["judges"]["pw"] and report.cost_rows(compute(old, ["pw"])) == []


def test_a_pointwise_judge_with_adaptive_votes_compares_each_pairs_two_responses(tmp_path, monkeypatch):
    # grm eval on pairs: each pair's two responses are one group, so only the near-tied pair ("5"
    # and "5") gets the rest of its votes; the clear pair ("9" vs "1") keeps one critique each
    import re

    from tests.unit.judges.fake_engine import ScriptedEngine

    digit = re.compile(r"A: (\d)")
    engine = ScriptedEngine(lambda p, j, c: "Score: " + digit.search(p).group(1))
    monkeypatch.setattr("grm.judges.engine_slot.shared_engine", lambda model, spec: engine)
    (tmp_path / "t.j2").write_text("{# expects: prompt, response #}Q: {{ prompt }} A: {{ response }}")
    (tmp_path / "pw.yaml").write_text(
        "name: pw\nmode: pointwise\nmodel: m\ntemplate: t.j2\nparser: {type: regex, range: [0, 10]}\n"
        "sampling: {n: 3}\nvotes: {first: 1, margin: 0.05}\n"
    )
    rows = [
        {"prompt": "a", "response_a": "9", "response_b": "1", "label": "A"},
        {"prompt": "b", "response_a": "5", "response_b": "5", "label": "A"},
    ]
    (tmp_path / "d.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    monkeypatch.setattr(report, "write_outputs", lambda out, results, names, *, extra, console, **_: extra)  # no plots
    run(EvalConfig(judges=[str(tmp_path / "pw.yaml")], data=str(tmp_path / "d.jsonl"), out=tmp_path / "out", batch_size=2))
    lines = [json.loads(ln) for ln in (tmp_path / "out" / "results.jsonl").read_text().splitlines()]
    assert engine.calls == [(4, 1), (2, 2)]
    m = compute(lines, ["pw"])
    assert m["judges"]["pw"]["cost"]["votes_skipped"] == 2 * 2
    (row,) = report.cost_rows(m)
    assert row["votes skipped"] == "4"
