"""`grm eval` records the judged items beside results.jsonl, and `grm view` shows prompts and
responses from there: the data path config.resolved.yaml names is never opened again (issue #39)."""

from __future__ import annotations

import json

from grm.data.items_file import ITEMS_FILE, ItemRecord
from grm.evaluation import report
from grm.evaluation.runner import EvalConfig, run
from grm.view.eval_dir import EvalDir
from tests.unit.view.http_probe import SECRET

ROWS = [
    {
        "id": "q1",
        "prompt": "Give the answer line.",
        "response_a": "Answer: 4",
        "response_b": "four",
        "label": 1,
        "reference": "4",
    },
    {"id": "q2", "prompt": "Again, please.", "response_a": "no", "response_b": "Answer: yes", "label": 2, "reference": "yes"},
    {"id": "q3", "prompt": "Once more.", "response_a": "Answer: 1", "response_b": "Answer: 2", "label": 1},
]


def test_eval_records_items_and_the_viewer_shows_them_not_the_data_source(tmp_path, monkeypatch):
    monkeypatch.setattr(report, "write_outputs", lambda out, results, names, *, extra, console, **_: extra)  # no plots
    (tmp_path / "fmt.yaml").write_text("name: fmt\nmode: rule\nrule: {type: regex-format, pattern: '(?m)^Answer:'}\n")
    data, out = tmp_path / "pairs.jsonl", tmp_path / "out"
    data.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    run(EvalConfig(judges=[str(tmp_path / "fmt.yaml")], data=str(data), out=out, batch_size=2))

    records = [ItemRecord.model_validate_json(x) for x in (out / ITEMS_FILE).read_text().splitlines()]
    assert [(r.id, r.kind, r.prompt, r.responses, r.label, r.reference) for r in records] == [
        (r["id"], "pair", r["prompt"], [r["response_a"], r["response_b"]], r["label"], r.get("reference")) for r in ROWS
    ]
    assert not list(out.glob(".*.tmp"))  # written through a temp file and one rename

    # the source changes (or the config is edited to point elsewhere): the page shows what was judged
    data.write_text("".join(json.dumps({**r, "prompt": SECRET, "response_a": SECRET}) + "\n" for r in ROWS))
    page = EvalDir(out).pair_page("fmt")
    assert page["note"] == "" and [p["prompt"] for p in page["pairs"]] == [r["prompt"] for r in ROWS]
    assert page["pairs"][0]["responses"] == ["Answer: 4", "four"] and page["pairs"][0]["reference"] == "4"
    assert SECRET not in json.dumps(page)

    # a resumed eval with a smaller --limit keeps the items of the judgments already there
    data.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    run(EvalConfig(judges=[str(tmp_path / "fmt.yaml")], data=str(data), out=out, limit=1))
    assert [json.loads(x)["id"] for x in (out / ITEMS_FILE).read_text().splitlines()] == ["q1", "q2", "q3"]
    assert all(p["prompt"] for p in EvalDir(out).pair_page("fmt")["pairs"])


def test_items_kept_on_a_resume_survive_line_separators_inside_their_text(tmp_path):
    from grm.data.items import EvalItem
    from grm.data.items_file import write_items

    odd = "line\u2028separator\u2029paragraph\x85next"
    write_items(tmp_path, [EvalItem(id="a", kind="pair", prompt=odd, responses=[odd, "x"], label=1)])
    write_items(tmp_path, [EvalItem(id="b", kind="pair", prompt="p", responses=["y", "z"], label=2)])  # a smaller --limit
    rows = {r["id"]: r for r in map(json.loads, (tmp_path / ITEMS_FILE).read_bytes().decode().split("\n")[:-1])}
    assert sorted(rows) == ["a", "b"] and rows["a"]["prompt"] == odd and rows["a"]["responses"][0] == odd
