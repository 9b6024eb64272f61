"""SGLang engine: request bodies and response parsing against SGLang's documented /generate and
weight-update shapes (no server: SGLang needs CUDA). The live test is marked gpu."""

import json
import os
import re
import sys
import time

import pytest

from grm.engines.base import EngineError, SamplingParams
from grm.engines.base import GenerationRequest as Req
from grm.engines.sglang import SGLangEngine
from grm.engines.sglang_api import (
    continuation_payload,
    generate_payload,
    parse_continuation,
    parse_segment,
    post_control,
    served_version,
)
from grm.engines.sglang_launch import launch_command


class Tok:
    """A byte-level stand-in tokenizer: one id per character."""

    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": [ord(c) for c in text]}

    def apply_chat_template(self, messages, tokenize=False, **kw):
        body = "".join(f"<{m['role']}>{m['content']}" for m in messages)
        return body if kw.get("continue_final_message") else body + "<assistant>"


def test_generate_payload_rows_and_seeds():
    body = generate_payload(
        [[1, 2], [3]], SamplingParams(n=2, temperature=0.7, top_k=5, max_new_tokens=8, stop=("\n",)), [10, None]
    )
    assert body["input_ids"] == [[1, 2], [1, 2], [3], [3]]
    assert [p.get("sampling_seed") for p in body["sampling_params"]] == [10, 11, None, None]
    p = body["sampling_params"][0]
    assert p["temperature"] == 0.7 and p["top_k"] == 5 and p["max_new_tokens"] == 8 and p["stop"] == ["\n"]
    assert body["return_logprob"] is True and body["logprob_start_len"] == -1


def test_parse_segment_reads_ids_logprobs_and_finish():
    item = {
        "text": " hi",
        "output_ids": [5, 6],
        "meta_info": {
            "prompt_tokens": 3,
            "completion_tokens": 2,
            "finish_reason": {"type": "length", "length": 2},
            "output_token_logprobs": [[-0.5, 5, None], [-1.25, 6, None]],
        },
    }
    seg = parse_segment(item, request_index=1)
    assert seg.token_ids == [5, 6] and seg.logprobs == [-0.5, -1.25] and seg.finish == "length"
    assert seg.prompt_tokens == 3 and seg.text == " hi" and seg.served == "None"
    item["meta_info"]["finish_reason"] = {"type": "stop", "matched": 2}
    del item["output_ids"]  # older servers: ids only inside the log-prob rows
    seg = parse_segment(item, request_index=0)
    assert seg.finish == "stop" and seg.token_ids == [5, 6]
    item["meta_info"]["finish_reason"] = {"type": "abort", "message": "weights\nupdating"}
    seg = parse_segment(item, request_index=0)
    assert seg.finish == "abort" and "weights" in seg.why and "\n" not in seg.why


def test_a_row_from_other_weights_is_an_error_not_a_sample():
    item = {"output_ids": [5], "meta_info": {"finish_reason": {"type": "stop"}, "output_token_logprobs": [[-0.5, 5, None]]}}
    for served, version in (("default", 0), ("3", 3), (None, 2)):  # before any update, matching, not reported
        item["meta_info"]["weight_version"] = served
        assert served_version(parse_segment(item, 0), 0, version, version) == version
    item["meta_info"]["weight_version"] = "2"
    with pytest.raises(EngineError, match="weights version 2, but the policy is at version 3"):
        served_version(parse_segment(item, 1), 1, 3, 3)
    with pytest.raises(EngineError, match="versions 3-5"):  # a row sent at 3 and read at 5 came from 3, 4 or 5
        served_version(parse_segment(item, 1), 1, 3, 5)
    item["meta_info"]["weight_version"] = "4"
    assert served_version(parse_segment(item, 1), 1, 3, 5) == 4


def test_an_unnumbered_row_is_the_version_it_was_sent_at_unless_an_update_held_it():
    item = {"output_ids": [5], "meta_info": {"finish_reason": {"type": "stop"}, "output_token_logprobs": [[-0.5, 5, None]]}}
    seg = parse_segment(item, 0)  # weight_version not reported
    assert served_version(seg, 0, 2, 3) == 2
    assert served_version(seg, 0, 2, 3, held=True) == 3  # the servers held it until the new weights were in
    item["meta_info"]["finish_reason"] = {"type": "abort"}
    assert served_version(parse_segment(item, 0), 0, 2, 3, held=True) == 2  # a row the pause cut ran before it


def test_continuation_scoring_teacher_forces_the_candidate():
    body = continuation_payload([1, 2, 3], [7, 8])
    assert body["input_ids"] == [1, 2, 3, 7, 8] and body["logprob_start_len"] == 3
    assert body["sampling_params"]["max_new_tokens"] == 0
    item = {"meta_info": {"input_token_logprobs": [[-0.1, 7, None], [-0.2, 8, None]]}}
    assert parse_continuation(item, 2) == pytest.approx(-0.3)
    with pytest.raises(EngineError):
        parse_continuation({"meta_info": {"input_token_logprobs": [[None, 7, None]]}}, 1)


def test_engine_splits_requests_across_servers_and_restores_order():
    calls = []

    def post(url, body):
        calls.append((url, body))
        if url.endswith("/generate"):
            return [
                {
                    "text": f"{url[-5:]}:{ids[0]}",
                    "output_ids": [ids[0]],
                    "meta_info": {"finish_reason": {"type": "stop"}, "output_token_logprobs": [[-1.0, ids[0], None]]},
                }
                for ids in body["input_ids"]
            ]
        return {"success": True, "message": ""}

    eng = SGLangEngine(["http://a:1", "http://b:2"], "m", Tok(), post=post)
    reqs = [Req(text=c) for c in "wxyz"]
    gens = eng.generate(reqs, SamplingParams(n=2, temperature=1.0, seed=0, max_new_tokens=4))
    assert [g.token_ids[0] for g in gens] == [ord(c) for c in "wwxxyyzz"]
    assert [(g.request_index, g.sample_index) for g in gens][:4] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert {u for u, _ in calls} == {"http://a:1/generate", "http://b:2/generate"}
    assert eng.encode(Req(messages=[{"role": "user", "content": "q"}])) == [ord(c) for c in "<user>q<assistant>"]


def test_exact_token_ids_go_to_generate_as_input_ids_untouched():
    bodies = []

    def post(url, body):
        bodies.append(body)
        return [
            {
                "text": "a",
                "output_ids": [5],
                "meta_info": {"finish_reason": {"type": "stop"}, "output_token_logprobs": [[-0.5, 5, None]]},
            }
        ]

    eng = SGLangEngine(["http://a:1"], "m", Tok(), post=post)
    ids = [900001, 2, 900002]  # no tokenizer would give these: they are sent, not re-encoded
    gens = eng.generate([Req(token_ids=ids)], SamplingParams(max_new_tokens=4))
    assert bodies[0]["input_ids"] == [ids] and gens[0].token_ids == [5]
    assert eng.encode(Req(token_ids=ids)) == ids


def test_weight_update_pauses_loads_flushes_and_resumes_every_server(tmp_path):
    calls = []

    def post(url, body):
        calls.append(url.split("/", 3)[-1])
        return {"success": True, "message": ""}

    eng = SGLangEngine(["http://a:1", "http://b:2"], "m", Tok(), post=post)
    eng.update_weights_from_disk(str(tmp_path), 7)
    assert eng.version == 7
    order = [c for c in calls if c in ("pause_generation", "update_weights_from_disk", "flush_cache", "continue_generation")]
    assert (
        order == ["pause_generation"] * 2 + ["update_weights_from_disk"] * 2 + ["flush_cache"] * 2 + ["continue_generation"] * 2
    )


def test_disk_weight_updates_keep_only_the_live_copy(tmp_path, monkeypatch):
    import torch

    src = tmp_path / "model"
    src.mkdir()
    (src / "config.json").write_text("{}")
    monkeypatch.setattr("grm.models.resolve_model", lambda m: str(src))
    paths = []

    def post(url, body):
        paths.extend([body["model_path"]] if "model_path" in body else [])
        return {"success": True, "message": ""}

    eng = SGLangEngine(["http://a:1"], "m", Tok(), post=post)
    assert eng.sync_dir is None  # nothing on disk until a disk update
    for v in (1, 2):
        eng.update_weights({"w": torch.ones(2, 3)}, v)
    assert [p.rsplit("/", 1)[-1] for p in paths] == ["v1", "v2"]
    assert sorted(p.name for p in eng.sync_dir.iterdir()) == ["v2"]
    assert (eng.sync_dir / "v2" / "config.json").exists()
    sync_dir = eng.sync_dir
    eng.close()
    assert not sync_dir.exists()


def test_failed_weight_update_still_resumes_generation():
    calls = []

    def post(url, body):
        calls.append(url.rsplit("/", 1)[-1])
        return {"success": not url.endswith("update_weights_from_disk"), "message": "bad path"}

    eng = SGLangEngine(["http://a:1"], "m", Tok(), post=post)
    with pytest.raises(EngineError, match="bad path"):
        eng.update_weights_from_disk("/nope", 1)
    assert calls[-1] == "continue_generation" and eng.version == 0


def test_distributed_update_bodies():
    bodies = {}

    def post(url, body):
        bodies[url] = body
        return {"success": True, "message": ""}

    eng = SGLangEngine(["http://a:1", "http://b:2"], "m", Tok(), tp=2, post=post)
    eng.init_weight_group("10.0.0.1", 29500, world_size=5)
    assert bodies["http://a:1/init_weights_update_group"]["rank_offset"] == 1
    assert bodies["http://b:2/init_weights_update_group"]["rank_offset"] == 3
    eng.announce_distributed_update(["w"], ["bfloat16"], [[2, 3]], version=4)
    b = bodies["http://b:2/update_weights_from_distributed"]
    assert b["names"] == ["w"] and b["shapes"] == [[2, 3]] and b["dtypes"] == ["bfloat16"] and eng.version == 4


def test_a_broadcast_update_announces_each_bucket_while_it_is_sent_then_resumes():
    import torch

    calls, sent = [], []

    def post(url, body):
        calls.append((url.rsplit("/", 1)[-1], body.get("names")))
        return {"success": True, "message": ""}

    eng = SGLangEngine(["http://a:1"], "m", Tok(), post=post)
    buckets = [[("a", torch.zeros(2, 3)), ("b", torch.zeros(4, dtype=torch.bfloat16))], [("c", torch.zeros(1))]]
    assert eng.update_weights_by_broadcast(iter(buckets), 5, lambda ts: sent.append([tuple(t.shape) for t in ts])) == 3
    assert sent == [[(2, 3), (4,)], [(1,)]] and eng.version == 5
    update = "update_weights_from_distributed"
    assert [c for c, _ in calls] == ["pause_generation", update, update, "flush_cache", "continue_generation"]
    assert [names for c, names in calls if names] == [["a", "b"], ["c"]]

    def broken(tensors):
        raise RuntimeError("group lost")

    calls.clear()
    with pytest.raises(RuntimeError, match="group lost"):
        eng.update_weights_by_broadcast(iter(buckets), 6, broken)
    assert calls[-1][0] == "continue_generation" and eng.version == 5


def test_launch_command_and_missing_sglang_message(monkeypatch):
    from grm.config.policy import SGLangEngineSpec

    spec = SGLangEngineSpec(type="sglang", tp=2, extra_args=["--disable-radix-cache"])
    cmd = launch_command("/models/x", 30000, spec)
    assert cmd[:3] == [sys.executable, "-m", "sglang.launch_server"]
    assert "--tp-size" in cmd and cmd[cmd.index("--tp-size") + 1] == "2" and cmd[-1] == "--disable-radix-cache"
    import importlib.util

    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    monkeypatch.setattr("grm.models.resolve_model", lambda m: "/models/x")
    with pytest.raises(EngineError, match=r"grm-rlaif\[sglang\]"):
        SGLangEngine.from_spec(spec, "x", tokenizer=Tok())


def test_importing_grm_engines_never_imports_sglang():
    import grm.engines.sglang  # noqa: F401

    assert "sglang" not in sys.modules


def test_batched_generate_over_real_http_returns_a_list():
    """/generate answers a batch with a JSON list (no usage block); the shared HTTP client takes it."""
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class H(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            rows = [
                {
                    "text": "ok",
                    "output_ids": [ids[-1]],
                    "meta_info": {"finish_reason": {"type": "stop"}, "output_token_logprobs": [[-0.5, ids[-1], None]]},
                }
                for ids in body["input_ids"]
            ]
            data = json.dumps(rows).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        eng = SGLangEngine([f"http://127.0.0.1:{httpd.server_address[1]}"], "m", Tok())
        gens = eng.generate([Req(text="ab"), Req(text="cd")], SamplingParams(max_new_tokens=2))
        assert [g.token_ids for g in gens] == [[ord("b")], [ord("d")]] and gens[0].logprobs == [-0.5]
    finally:
        httpd.shutdown()


def test_control_calls_read_json_plain_text_and_refusals():
    """SGLang's /flush_cache answers plain text (HTTP 400 when it refuses); a failed
    /update_weights_from_disk answers HTTP 400 with JSON; a missing endpoint 404."""
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    answers = {
        "/flush_cache": (200, "text/plain", "Cache flushed.\nPlease check backend logs for more details.\n"),
        "/busy/flush_cache": (400, "text/plain", "Cache flushed.\n(When there are running or waiting requests...)\n"),
        "/update_weights_from_disk": (
            400,
            "application/json",
            json.dumps({"success": False, "message": "Failed to update weights: missing x", "num_paused_requests": 0}),
        ),
        "/pause_generation": (
            200,
            "application/json",
            json.dumps({"message": "Generation paused successfully.", "status": "ok"}),
        ),
    }

    class H(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_POST(self):
            self.rfile.read(int(self.headers["Content-Length"]))
            status, kind, text = answers.get(self.path, (404, "application/json", json.dumps({"detail": "Not Found"})))
            data = text.encode()
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{httpd.server_address[1]}"
    try:
        assert post_control(url + "/flush_cache", {}, 5)["message"].startswith("Cache flushed.")
        assert post_control(url + "/flush_cache", {}, 5).get("success") is not False
        assert post_control(url + "/busy/flush_cache", {}, 5)["success"] is False
        assert post_control(url + "/pause_generation", {}, 5)["status"] == "ok"
        assert post_control(url + "/nope", {}, 5)["success"] is False
        eng = SGLangEngine([url], "m", Tok())
        # the update's reason, not the resume's 404 that follows it
        with pytest.raises(EngineError, match="missing x"):
            eng.update_weights_from_disk("/w", 1)
        assert eng.version == 0
    finally:
        httpd.shutdown()
    with pytest.raises(EngineError, match="127.0.0.1"):
        post_control(url + "/flush_cache", {}, 2)  # nothing listens any more


def test_engine_urls_must_be_server_roots():
    from pydantic import ValidationError

    from grm.config.policy import SGLangEngineSpec

    assert SGLangEngineSpec(type="sglang", urls=["http://10.0.0.2:30000", "https://h/"]).urls[0] == "http://10.0.0.2:30000"
    for urls, why in (
        (["127.0.0.1:30000"], "not a server root"),
        (["http://h:30000/v1"], "no /v1"),
        (["http://h:1", "http://h:1"], "listed twice"),
    ):
        with pytest.raises(ValidationError, match=why):
            SGLangEngineSpec(type="sglang", urls=urls)


def test_weight_sync_dirs_of_dead_processes_are_swept(tmp_path):
    """A killed actor never runs close(): the next engine removes the directories whose owner is gone."""
    import subprocess

    from grm.engines.sglang_launch import SYNC_PREFIX, weight_sync_dir

    gone = subprocess.Popen(["true"])
    gone.wait()
    dead = tmp_path / f"{SYNC_PREFIX}{gone.pid}-abc"
    (dead / "v3").mkdir(parents=True)
    live = tmp_path / f"{SYNC_PREFIX}{os.getppid()}-def"
    live.mkdir()
    other = tmp_path / "unrelated"
    other.mkdir()
    fresh = weight_sync_dir(str(tmp_path))
    assert not dead.exists()
    assert live.exists() and other.exists() and fresh.is_dir()
    assert fresh.name.startswith(f"{SYNC_PREFIX}{os.getpid()}-")


# ------------------------------------------------------------------ trust boundary (issue #39)
def _row(ids, lps=None, **meta):
    lps = [[-0.5, t, None] for t in ids] if lps is None else lps
    return {
        "text": "t",
        "output_ids": ids,
        "meta_info": {"finish_reason": {"type": "stop"}, "output_token_logprobs": lps, **meta},
    }


@pytest.fixture
def servers():
    from tests.unit.http_servers import Answer, LocalServer

    a, b = LocalServer(), LocalServer(lambda arrival: Answer(200, json.dumps([_row([1])]).encode()))
    yield a, b
    a.close()
    b.close()


def _generate(eng):
    return eng.generate([Req(text="a")], SamplingParams(max_new_tokens=1))


@pytest.mark.parametrize("code", [301, 302, 303, 307, 308])
def test_generate_and_control_calls_never_follow_a_redirect_to_another_origin(servers, code):
    from tests.unit.http_servers import Answer

    a, b = servers
    a.answer = lambda arrival: Answer(code, b"", {"Location": f"{b.url}{arrival.path}"})
    eng = SGLangEngine([f"http://grm:pa55word@127.0.0.1:{a.port}"], "m", Tok(), max_retries=0)
    for call in (lambda: _generate(eng), lambda: eng.update_weights_from_disk("/w", 1)):
        with pytest.raises(EngineError, match="another origin") as e:
            call()
        assert "pa55word" not in str(e.value) and a.url in str(e.value)
    assert b.arrivals == [] and a.arrivals[0].headers["Authorization"].startswith("Basic ")
    assert "pa55word" not in repr(eng) and eng.urls == [a.url]


BAD_ROWS = {
    "not a list of rows": ({"error": "x"}, r"/generate returned 1 rows for 2|unexpected /generate reply"),
    "a row a string": (["oops", "oops"], r"request 0: the reply: Input should be a valid dictionary"),
    "logprob null": ([_row([1], [[None, 1, None]])] * 2, "without a log-prob"),
    "logprob NaN": ([_row([1], [["NaN", 1, None]])] * 2, "without a log-prob"),
    "ids and logprobs differ": ([_row([1, 2], [[-0.1, 1, None]])] * 2, "2 token ids but 1 log-probs"),
    "token id a word": ([_row([1], [[-0.1, "one", None]])] * 2, r"output_token_logprobs\.0"),
    "ids not a list": ([{"output_ids": 5}] * 2, r"output_ids: Input should be a valid list"),
    "meta a list": ([{"output_ids": [], "meta_info": []}] * 2, r"meta_info: Input should be"),
    "abort with an escape": (
        [_row([1], finish_reason={"type": "abort", "message": "\x1b[2Jgone\nnow"})] * 2,
        r'aborted request 0: "\\u001b\[2Jgone\\nnow"',  # JSON-escaped: no raw escape or newline
    ),
}


@pytest.mark.parametrize("kind", sorted(BAD_ROWS))
def test_a_bad_generate_reply_is_one_error_naming_the_server(servers, kind):
    from tests.unit.http_servers import Answer

    a, _ = servers
    rows, expected = BAD_ROWS[kind]
    a.answer = lambda arrival: Answer(200, json.dumps(rows).encode())
    eng = SGLangEngine([a.url], "m", Tok(), max_retries=0)
    with pytest.raises(EngineError) as e:
        eng.generate([Req(text="a")], SamplingParams(n=2, max_new_tokens=1))
    message = str(e.value)
    assert re.search(expected, message) and a.url in message and "\n" not in message and "\x1b" not in message, message


def test_odd_weight_versions_are_not_compared_and_never_crash():
    for served in ("²", "9" * 5000, "-1", "v3", 3.5, True):
        item = _row([1], weight_version=served)
        try:
            seg = parse_segment(item, 0)
        except EngineError as e:  # a wrong type is a clear error; a word that is not a number is ignored
            assert "weight_version" in str(e)
        else:
            assert seg.token_ids == [1]
            try:
                assert served_version(seg, 0, 0, 0) == 0
            except EngineError as e:  # a number no update made: the server holds other weights
                assert "other weights" in str(e)


def test_continuation_scoring_needs_a_number_for_every_candidate_token():
    rows = [[None, 1, None], [-0.5, 2, None], [None, 3, None], [-0.25, 4, None]]
    with pytest.raises(EngineError, match="1 usable input log-probs for a 2-token"):  # used to borrow the prompt's -0.5
        parse_continuation({"meta_info": {"input_token_logprobs": rows}}, 2)
    assert parse_continuation({"meta_info": {"input_token_logprobs": rows[:2]}}, 1) == -0.5
    for bad in ([], "x", {"meta_info": {"input_token_logprobs": [["a", 1]]}}):
        with pytest.raises(EngineError):
            parse_continuation(bad, 1)


def test_control_replies_are_shown_bounded_and_plain_and_slow_servers_time_out(servers):
    from tests.unit.http_servers import Answer, trickle_body

    a, _ = servers
    noisy = ("\x1b[31mno\x1b[0m\r\nway " * 100_000).encode() + b"\xff\xfe"
    a.answer = lambda arrival: Answer(400, noisy)
    out = post_control(a.url + "/flush_cache", {}, 5)
    assert out["success"] is False and out["message"].startswith("HTTP 400: \\x1b[31mno\\x1b[0m way")
    assert len(out["message"]) < 400 and "\x1b" not in out["message"]
    a.answer = lambda arrival: trickle_body
    eng = SGLangEngine([a.url], "m", Tok(), timeout_s=1.0, max_retries=0)
    t0 = time.monotonic()
    with pytest.raises(EngineError, match="no complete reply within 1 s"):
        _generate(eng)
    with pytest.raises(EngineError, match="no complete reply within 1 s"):
        post_control(a.url + "/flush_cache", {}, 1.0)
    assert time.monotonic() - t0 < 6.0


# ---------------------------------------------------------------- launched servers: where each runs
def test_the_server_plan_puts_server_j_on_rank_j_mod_ranks_on_its_own_gpus():
    from grm.engines.sglang_launch import ServerSlot, server_plan

    assert server_plan(3, 1, 2, 2) == [ServerSlot(0, 0, (0,)), ServerSlot(1, 1, (0,)), ServerSlot(2, 0, (1,))]
    assert server_plan(2, 2, 1, 4) == [ServerSlot(0, 0, (0, 1)), ServerSlot(1, 0, (2, 3))]
    assert server_plan(3, 2, 1, 4)[2] == ServerSlot(2, 0, (0, 1))  # more than fit: they share, round again
    assert server_plan(2, 1, 2, 0) == [ServerSlot(0, 0, ()), ServerSlot(1, 1, ())]  # a CPU pool: no GPUs to give
    with pytest.raises(EngineError, match="engine.tp 4 exceeds the 2 GPU"):
        server_plan(1, 4, 2, 2)


def test_launched_servers_start_on_their_gpus_of_this_process(monkeypatch):
    import json
    import sys
    import urllib.request
    from pathlib import Path
    from types import SimpleNamespace

    from grm.engines.sglang_launch import ServerSlot, launch_command, launch_servers

    launcher = [sys.executable, str(Path(__file__).with_name("tiny_sglang_launcher.py"))]
    spec = SimpleNamespace(launcher=launcher, tp=1, dtype="bfloat16", mem_fraction_static=0.5, extra_args=["--x"])
    spec.launch_timeout_s = 30
    cmd = launch_command("/m", 5, spec, "10.0.0.2")
    assert cmd[: len(launcher) + 6] == [*launcher, "--model-path", "/m", "--host", "10.0.0.2", "--port", "5"] and cmd[-1] == "--x"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")  # as Ray sets it for a bundle's two GPUs
    spec.extra_args = []
    servers = launch_servers(spec, "/m", [ServerSlot(0, 0, (1,)), ServerSlot(1, 0, ())])
    try:
        seen = [json.loads(urllib.request.urlopen(s.base_url + "/env").read())["cuda_visible_devices"] for s in servers]
        assert seen == ["5", "3,5"]  # the slot's GPU by CUDA's name; no slot GPUs: the process's own
    finally:
        for s in servers:
            s.stop()


def test_every_server_is_asked_to_join_the_weight_group_at_once():
    """A server answers /init_weights_update_group only once the whole group has formed (as
    torch.distributed's rendezvous does): two servers asked one after the other never form it."""
    import threading

    formed = threading.Barrier(2, timeout=5)
    bodies = []

    def post(url, body):
        bodies.append((url, body["rank_offset"]))
        formed.wait()  # BrokenBarrierError after 5 s if the other server is never asked
        return {"success": True}

    eng = SGLangEngine(["http://a:1", "http://b:2"], "m", Tok(), post=post, tp=2)
    eng.init_weight_group("10.0.0.1", 29500, world_size=5, backend="gloo")
    assert sorted(bodies) == [("http://a:1/init_weights_update_group", 1), ("http://b:2/init_weights_update_group", 3)]


class DecodingTok(Tok):
    def decode(self, ids, skip_special_tokens=False):
        return "".join(chr(i) for i in ids)


def test_rows_a_weight_update_cuts_short_go_on_with_the_new_weights_and_record_each_tokens_version(tmp_path):
    """A sync during a rollout (``schedule.interruptible``): the pause aborts the rows in flight
    after 2 tokens; the engine sends them again from their last token once the update is done, and
    the generation keeps the old tokens (version 0) and the new ones (version 1)."""
    import threading

    bodies, resumed, order = [], threading.Event(), []
    updating = {}

    def post(url, body):
        path = url.split("/", 3)[-1]
        order.append(path)
        if path == "pause_generation":
            updating["paused"].set()
        if path == "continue_generation":
            resumed.set()
        if path != "generate":
            return {"success": True, "message": ""}
        bodies.append(body)
        if len(bodies) == 1:  # the first call: a sync comes while the rows generate
            updating["paused"] = threading.Event()
            updating["thread"] = threading.Thread(target=eng.update_weights_from_disk, args=(str(tmp_path), 1))
            updating["thread"].start()
            updating["paused"].wait(5)
            return [
                {
                    "text": "ab",
                    "output_ids": [97, 98],
                    "meta_info": {
                        "finish_reason": {"type": "abort", "message": "generation paused"},
                        "weight_version": "default",
                        "prompt_tokens": len(ids),
                        "output_token_logprobs": [[-0.5, 97, None], [-0.25, 98, None]],
                    },
                }
                for ids in body["input_ids"]
            ]
        assert resumed.wait(5)  # a server holds the rows sent again until it resumes
        return [
            {
                "text": "cd",
                "output_ids": [99, 100],
                "meta_info": {
                    "finish_reason": {"type": "length"},
                    "weight_version": "1",
                    "output_token_logprobs": [[-1.0, 99, None], [-2.0, 100, None]],
                },
            }
            for _ in body["input_ids"]
        ]

    eng = SGLangEngine(["http://a:1"], "m", DecodingTok(), post=post)
    gens = eng.generate([Req(text="q")], SamplingParams(n=2, temperature=1.0, seed=5, max_new_tokens=4))
    updating["thread"].join(5)
    assert eng.version == 1
    assert [b["input_ids"] for b in bodies] == [[[113], [113]], [[113, 97, 98], [113, 97, 98]]]
    assert [p["max_new_tokens"] for p in bodies[1]["sampling_params"]] == [2, 2]
    seeds = [p["sampling_seed"] for p in bodies[1]["sampling_params"]]
    assert seeds[0] != seeds[1] and not {5, 6} & set(seeds)  # each row's own stream, not its first stretch's
    for g in gens:
        assert g.token_ids == [97, 98, 99, 100] and g.logprobs == [-0.5, -0.25, -1.0, -2.0]
        assert g.token_versions == [0, 0, 1, 1] and g.version == 0 and g.finish_reason == "length"
        assert g.text == "abcd" and g.prompt_tokens == 1
    # the engine's version moved before the servers resumed: a row sent again is never read as stale
    assert order.index("continue_generation") > order.index("update_weights_from_disk")


def test_an_abort_no_update_of_this_engine_caused_is_an_error_not_a_sample():
    def post(url, body):
        return [
            {
                "output_ids": [5],
                "meta_info": {
                    "finish_reason": {"type": "abort", "message": "[b]oom[/b]"},
                    "output_token_logprobs": [[-1.0, 5, None]],
                },
            }
        ]

    eng = SGLangEngine(["http://a:1"], "m", DecodingTok(), post=post)
    with pytest.raises(EngineError, match=r"aborted request 0: .\[b\]oom"):
        eng.generate([Req(text="q")], SamplingParams(max_new_tokens=4))


def test_a_generation_no_update_cut_has_no_token_versions():
    def post(url, body):
        return [
            {
                "text": "x",
                "output_ids": [5],
                "meta_info": {
                    "finish_reason": {"type": "stop"},
                    "weight_version": "3",
                    "output_token_logprobs": [[-1.0, 5, None]],
                },
            }
        ]

    eng = SGLangEngine(["http://a:1"], "m", DecodingTok(), post=post)
    eng.version = 3
    (g,) = eng.generate([Req(text="q")], SamplingParams(max_new_tokens=4))
    assert g.token_versions is None and g.version == 3 and g.text == "x"


def test_a_stopping_run_returns_at_once_and_sends_no_cut_row_again():
    """The stop is polled on the caller's thread (Ray's cancel flag is per thread): the call returns
    while a cut row's next stretch is held by the server, and that row is not sent a third time."""
    import threading

    from grm.engines.base import GenerationAborted

    calls, release = [], threading.Event()

    def post(url, body):
        calls.append(body)
        if len(calls) == 1:
            eng._begun += 1  # a sync of this engine's cuts the rows
            return [
                {"output_ids": [5], "meta_info": {"finish_reason": {"type": "abort"}, "output_token_logprobs": [[-1.0, 5, None]]}}
            ]
        release.wait(5)  # held while the servers update
        return [
            {"output_ids": [6], "meta_info": {"finish_reason": {"type": "abort"}, "output_token_logprobs": [[-1.0, 6, None]]}}
        ]

    eng = SGLangEngine(["http://a:1"], "m", DecodingTok(), post=post)
    sp = SamplingParams(max_new_tokens=8, abort=lambda: len(calls) > 1)  # the stop comes while the row is held
    t0 = time.perf_counter()
    with pytest.raises(GenerationAborted):
        eng.generate([Req(text="q")], sp)
    assert time.perf_counter() - t0 < 3
    release.set()
    time.sleep(0.3)
    assert len(calls) == 2


def _stretch(ids, finish, version="default"):
    return {
        "text": "".join(chr(i) for i in ids),
        "output_ids": ids,
        "meta_info": {
            "finish_reason": {"type": finish},
            "weight_version": version,
            "output_token_logprobs": [[-0.5, t, None] for t in ids],
        },
    }


def test_a_row_sent_as_an_update_begins_and_cut_by_its_pause_goes_on():
    """The update had begun (its pause not yet at the server) when the row was sent: the pause's
    abort is that update's, not the server's own, and the row goes on."""
    replies = [[_stretch([97], "abort")], [_stretch([98], "length", "1")]]
    eng = SGLangEngine(["http://a:1"], "m", DecodingTok(), post=lambda url, body: replies.pop(0))
    eng._begun = 1  # an update under way; it ends (version 1) before the reply is read
    orig = eng._post

    def post(url, path, body):
        out = orig(url, path, body)
        eng._done, eng.version = 1, 1
        return out

    eng._post = post
    (g,) = eng.generate([Req(text="q")], SamplingParams(max_new_tokens=2))
    assert g.token_ids == [97, 98] and g.token_versions == [0, 1]


class EosTok(DecodingTok):
    eos_token_id = 3


def test_a_row_that_sampled_its_end_as_the_pause_came_is_not_sent_again():
    calls = []

    def post(url, body):
        calls.append(body)
        eng._begun += 1
        return [_stretch([97, 3], "abort")]

    eng = SGLangEngine(["http://a:1"], "m", EosTok(), post=post)
    (g,) = eng.generate([Req(text="q")], SamplingParams(max_new_tokens=8))
    assert len(calls) == 1 and g.token_ids == [97, 3] and g.finish_reason == "stop" and g.text == "a\x03"


def test_a_stop_string_across_a_cut_ends_the_row_there():
    """No server saw "XY" as output (X before the cut, Y after): the row is cut after the token that
    completes it, its text before it, and it is a stop, not a length."""
    replies = [[_stretch([97, 88], "abort")], [_stretch([89, 98, 99], "length", "1")]]

    def post(url, body):
        if len(replies) == 2:
            eng._begun += 1
            eng._done, eng.version = 1, 1
        return replies.pop(0)

    eng = SGLangEngine(["http://a:1"], "m", DecodingTok(), post=post)
    (g,) = eng.generate([Req(text="q")], SamplingParams(max_new_tokens=5, stop=("XY",)))
    assert g.token_ids == [97, 88, 89] and g.logprobs == [-0.5] * 3 and g.token_versions == [0, 0, 1]
    assert g.finish_reason == "stop" and g.text == "a"
