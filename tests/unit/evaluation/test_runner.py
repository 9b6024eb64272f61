"""Evaluation runner pieces that need no model."""

import json

from grm.config import JudgeSpec
from grm.evaluation import report
from grm.evaluation.judge_metrics import compute
from grm.evaluation.runner import EvalConfig, both_orders, run
from grm.judges import build_judge
from grm.judges.limits import past_deadline


def test_both_orders_forces_swap_on_pairwise_judges_only():
    pair = JudgeSpec(name="p", mode="pairwise", model="m", template="p.j2", parser={"type": "verdict"})
    swapped = both_orders(pair)
    assert swapped.position.swap is True and pair.position.swap is False  # a copy; the loaded spec is untouched
    assert both_orders(swapped) is swapped
    point = JudgeSpec(name="s", mode="pointwise", model="m", template="t.j2", parser={"range": [1, 10]})
    assert both_orders(point) is point


def test_a_batch_past_the_judges_deadline_is_reported_not_cut(tmp_path, monkeypatch):
    spec = JudgeSpec(name="r", mode="rule", rule={"type": "numeric-answer"}, limits={"deadline_s": 5})
    judge = build_judge(spec)
    assert past_deadline(judge.spec, 10, 4.9) is None
    assert "past its 5 s deadline" in past_deadline(judge.spec, 10, 6.0)
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


def _served_judge(tmp_path, monkeypatch, reply, n_items):
    """A pointwise judge on a scripted engine whose ``reply`` may raise EngineError (what the openai
    engine raises once its own retries are spent), and ``n_items`` scored rows."""
    from tests.unit.judges.fake_engine import ScriptedEngine

    engine = ScriptedEngine(reply)
    monkeypatch.setattr("grm.judges.engine_slot.shared_engine", lambda model, spec: engine)
    (tmp_path / "t.j2").write_text("{# expects: prompt, response #}Q: {{ prompt }} A: {{ response }}")
    (tmp_path / "pw.yaml").write_text(
        "name: pw\nmode: pointwise\nmodel: m\ntemplate: t.j2\nparser: {type: regex, range: [0, 10]}\n"
    )
    rows = [{"prompt": f"q{i}", "response": f"r{i}", "human_score": i} for i in range(n_items)]
    (tmp_path / "d.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    monkeypatch.setattr(report, "write_outputs", lambda out, results, names, *, extra, console, **_: extra)  # no plots
    return EvalConfig(judges=[str(tmp_path / "pw.yaml")], data=str(tmp_path / "d.jsonl"), out=tmp_path / "out", batch_size=4)


def _results(tmp_path):
    return {(ln := json.loads(s))["item_id"]: ln for s in (tmp_path / "out" / "results.jsonl").read_text().splitlines()}


def test_an_item_the_judges_server_refuses_is_masked_and_counted_not_the_eval(tmp_path, monkeypatch):
    from grm.engines.base import EngineError

    def reply(text, *_):
        if "r2 " in text + " " or "r5 " in text + " ":  # two items the server refuses (400: too long, say)
            raise EngineError("openai engine: HTTP 400 from http://127.0.0.1:1/v1/completions: prompt too long")
        return "Score: 7"

    m = run(_served_judge(tmp_path, monkeypatch, reply, 8))
    lines = _results(tmp_path)
    assert len(lines) == 8 and m["engine_errors_masked_this_run"] == {"pw": 2}
    bad = {k for k, ln in lines.items() if ln["masked"]}
    assert bad == {"row-2", "row-5"}
    for k in bad:
        assert lines[k]["score"] is None and "HTTP 400" in lines[k]["engine_error"]  # never a default number
    assert all(ln["score"] == 7 and "engine_error" not in ln for k, ln in lines.items() if k not in bad)
    assert compute(list(lines.values()), ["pw"])["judges"]["pw"]["masked_rate"] == 0.25


def test_a_failing_judge_server_stops_the_eval_resumably_and_writes_none_of_its_failures(tmp_path, monkeypatch):
    import pytest

    from grm.engines.base import EngineError
    from grm.evaluation.runner import EvalError

    down = {"after": 5}  # the server answers 5 requests, then is down: the second batch's first one is spent

    def reply(text, *_):
        if down["after"] <= 0:
            raise EngineError("openai engine: cannot reach http://127.0.0.1:1: connection refused")
        down["after"] -= 1
        return "Score: 7"

    cfg = _served_judge(tmp_path, monkeypatch, reply, 12)
    with pytest.raises(EvalError, match="3 items in a row failed on the judge's engine even alone.*resume"):
        run(cfg)
    assert len(_results(tmp_path)) == 4 and not any(ln["masked"] for ln in _results(tmp_path).values())
    down["after"] = 10**6  # the server is back: the resume judges the rest, nothing masked
    m = run(cfg)
    assert len(_results(tmp_path)) == 12 and m["engine_errors_masked_this_run"] == {"pw": 0}
    assert all(ln["score"] == 7 for ln in _results(tmp_path).values())


def test_a_judge_whose_every_item_fails_stops_the_eval_rather_than_masking_all(tmp_path, monkeypatch):
    import pytest

    from grm.engines.base import EngineError
    from grm.evaluation.runner import EvalError

    def reply(*_):
        raise EngineError("openai engine: HTTP 401: unauthorised")

    with pytest.raises(EvalError, match="every item failed on the judge's engine"):
        run(_served_judge(tmp_path, monkeypatch, reply, 2))
    assert not (tmp_path / "out" / "results.jsonl").exists() or _results(tmp_path) == {}


def _rule_eval(tmp_path, monkeypatch, rows):
    (tmp_path / "r.yaml").write_text("name: r\nmode: rule\nrule: {type: numeric-answer}\n")
    (tmp_path / "d.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    monkeypatch.setattr(report, "write_outputs", lambda out, results, names, *, extra, console, **_: results)  # no plots
    return EvalConfig(judges=[str(tmp_path / "r.yaml")], data=str(tmp_path / "d.jsonl"), out=tmp_path / "out", batch_size=2)


ROWS = [{"prompt": f"{i}+{i}?", "response": f"Answer: {2 * i}", "reference": str(2 * i), "human_score": 1} for i in range(3)]


def test_a_resume_after_the_data_changed_under_the_same_ids_is_refused_or_judges_the_changed_items_again(tmp_path, monkeypatch):
    import pytest

    from grm.evaluation.runner import EvalError

    cfg = _rule_eval(tmp_path, monkeypatch, ROWS)
    assert [r["score"] for r in run(cfg)] == [1.0, 1.0, 1.0]
    changed = [dict(r) for r in ROWS]
    changed[1]["reference"] = "999"  # same row id (row-1), other content
    (tmp_path / "d.jsonl").write_text("".join(json.dumps(r) + "\n" for r in changed))
    with pytest.raises(EvalError, match=r"results.jsonl:2: item 'row-1' was judged on other content"):
        run(cfg)
    changed[1]["reference"], changed[2]["human_score"] = "2", 0.5  # a human score alone counts too
    (tmp_path / "d.jsonl").write_text("".join(json.dumps(r) + "\n" for r in changed))
    with pytest.raises(EvalError, match="item 'row-2'"):
        run(cfg)
    cfg.force = True
    final = run(cfg)  # the changed item judged again; the report holds the new judgment only
    assert [(r["item_id"], r["human_score"]) for r in final] == [("row-0", 1.0), ("row-1", 1.0), ("row-2", 0.5)]
    assert len((tmp_path / "out" / "results.jsonl").read_text().splitlines()) == 4


def test_a_results_line_edited_by_hand_is_refused_by_file_line_and_field(tmp_path, monkeypatch):
    import pytest

    from grm.evaluation.result_lines import check_result_line
    from grm.evaluation.runner import EvalError
    from grm.jsonl import JsonlError

    cfg = _rule_eval(tmp_path, monkeypatch, ROWS)
    run(cfg)
    path = tmp_path / "out" / "results.jsonl"
    good = path.read_text().splitlines()
    line = json.loads(good[1])
    check_result_line(dict(line))
    edits = {
        "cost": ("x", "field 'cost'"),
        "seconds": (float("nan"), "field 'seconds'"),
        "label": (7, "field 'label'"),
        "lengths": ([1], "field 'lengths'"),
        "score": ("x", "field 'score'"),
        "results": ([{"score": "x"}], "field 'results.0.score'"),
        "tokens": (-1, "field 'tokens'"),
    }
    for key, (value, named) in edits.items():
        path.write_text("\n".join([good[0], json.dumps({**line, key: value}), good[2]]) + "\n")
        with pytest.raises(JsonlError, match=f"results.jsonl:2: {named}"):
            run(cfg)
    path.write_text("\n".join([good[0], json.dumps({k: v for k, v in line.items() if k != "score"}), good[2]]) + "\n")
    with pytest.raises(JsonlError, match="results.jsonl:2: a scored item's line has no score"):
        run(cfg)
    path.write_text("\n".join([*good, good[1]]) + "\n")  # counted twice it would skew every metric
    with pytest.raises(EvalError, match=r"results.jsonl:4: a second line for judge 'r' and item 'row-1' \(the first is line 2\)"):
        run(cfg)


def test_an_engine_error_masked_item_is_judged_again_on_resume_and_replaces_its_line(tmp_path, monkeypatch):
    from grm.engines.base import EngineError

    flaky = {"on": True}

    def reply(text, *_):
        if flaky["on"] and "r2 " in text + " ":
            raise EngineError("openai engine: HTTP 500: overloaded")
        return "Score: 7"

    cfg = _served_judge(tmp_path, monkeypatch, reply, 4)
    assert run(cfg)["engine_errors_masked_this_run"] == {"pw": 1}
    flaky["on"] = False  # the server recovered: the masked item is judged, its old line superseded
    m = run(cfg)
    assert m["engine_errors_masked_this_run"] == {"pw": 0}
    assert len((tmp_path / "out" / "results.jsonl").read_text().splitlines()) == 5
    assert {k: ln["score"] for k, ln in _results(tmp_path).items()} == {f"row-{i}": 7.0 for i in range(4)}


def test_an_engine_that_cannot_be_built_stops_the_eval_at_once_with_its_own_reason(tmp_path, monkeypatch):
    import pytest

    from grm.engines.base import EngineSetupError
    from grm.evaluation.runner import EvalError

    cfg = _served_judge(tmp_path, monkeypatch, lambda *a: "Score: 7", 6)
    calls = []

    def unbuildable(model, spec):
        calls.append(model)
        raise EngineSetupError("engine.api_key_env names MYKEY, which is not set in the environment")

    monkeypatch.setattr("grm.judges.engine_slot.shared_engine", unbuildable)
    with pytest.raises(EvalError, match="judge 'pw': engine.api_key_env names MYKEY, which is not set") as e:
        run(cfg)
    assert "server" not in str(e.value) and len(calls) == 1  # not retried item by item, not blamed on a server


def test_a_map_naming_a_column_no_row_has_is_refused_not_a_silently_masked_eval(tmp_path, monkeypatch):
    import pytest

    from grm.evaluation.runner import EvalError

    cfg = _rule_eval(tmp_path, monkeypatch, ROWS)
    cfg.mapping = ["prompt=prompt", "response=response", "reference=refrence"]  # misspelt: every item would be masked
    with pytest.raises(EvalError, match=r"--map reference=refrence: no row of .*d.jsonl has such a column \(its columns: "):
        run(cfg)
    cfg.mapping = ["prompt=prompt", "response=response", "reference=reference"]
    assert [r["score"] for r in run(cfg)] == [1.0, 1.0, 1.0]


def _pair_eval(tmp_path, monkeypatch, reply, n):
    """A swapped pairwise judge on a scripted engine over ``n`` labelled pairs."""
    from tests.unit.judges.fake_engine import ScriptedEngine

    engine = ScriptedEngine(reply)
    monkeypatch.setattr("grm.judges.engine_slot.shared_engine", lambda model, spec: engine)
    (tmp_path / "p.j2").write_text("{# expects: prompt, responses #}Q: {{ prompt }} A: {{ responses[0] }} B: {{ responses[1] }}")
    (tmp_path / "pair.yaml").write_text("name: pair\nmode: pairwise\nmodel: m\ntemplate: p.j2\nparser: {type: verdict}\n")
    rows = [{"prompt": f"q{i}", "response_a": f"good{i}", "response_b": f"bad{i}", "label": 1} for i in range(n)]
    (tmp_path / "d.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    monkeypatch.setattr(report, "write_outputs", lambda out, results, names, *, extra, console, **_: extra)  # no plots
    return EvalConfig(judges=[str(tmp_path / "pair.yaml")], data=str(tmp_path / "d.jsonl"), out=tmp_path / "out", batch_size=4)


def _verdict_for_good(text, *_):
    return "[[A]]" if text.index("good") < text.index("bad") else "[[B]]"


def test_a_refused_pair_is_a_masked_line_grm_eval_reads_back_with_both_orders_unread(tmp_path, monkeypatch):
    from grm.engines.base import EngineRefused

    def reply(text, *a):
        if "q1 " in text:
            raise EngineRefused("openai engine: HTTP 400 (not retried): prompt too long")
        return _verdict_for_good(text, *a)

    cfg = _pair_eval(tmp_path, monkeypatch, reply, 4)
    assert run(cfg)["engine_errors_masked_this_run"] == {"pair": 1}
    lines = _results(tmp_path)
    assert lines["row-1"]["masked"] and lines["row-1"]["order_verdicts"] == [None, None] and lines["row-1"]["verdict"] is None
    assert all(lines[f"row-{i}"]["verdict"] == "1" for i in (0, 2, 3))
    assert run(cfg)["engine_errors_masked_this_run"] == {"pair": 1}  # read back by the resume; the refused item tried again


def test_items_a_working_server_refuses_are_masked_at_once_however_many_in_a_row(tmp_path, monkeypatch):
    import pytest

    from grm.engines.base import EngineRefused
    from grm.evaluation.runner import EvalError

    def reply(text, *_):  # every item but the first is too long for the server's context
        if "q0 " not in text:
            raise EngineRefused("openai engine: HTTP 400 (not retried): prompt too long")
        return "Score: 7"

    m = run(_served_judge(tmp_path, monkeypatch, reply, 6))
    assert m["engine_errors_masked_this_run"] == {"pw": 5} and len(_results(tmp_path)) == 6

    # refused from the first request on: the URL, model or key, not the items; nothing written
    (tmp_path / "out" / "results.jsonl").unlink()

    def refuse_all(*_):
        raise EngineRefused("openai engine: HTTP 404 (not retried): no such model")

    with pytest.raises(EvalError, match="3 items in a row failed"):
        run(_served_judge(tmp_path, monkeypatch, refuse_all, 6))
    assert not (tmp_path / "out" / "results.jsonl").exists() or _results(tmp_path) == {}
