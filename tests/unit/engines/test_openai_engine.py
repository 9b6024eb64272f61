"""openai engine against a local HTTP server of our own that injects 429/5xx/4xx and checks the
request bodies (the real llama.cpp server tests are in tests/serving)."""

import html
import json
import re
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import quote, quote_plus

import pytest

from grm.engines.base import EngineError, SamplingParams
from grm.engines.base import GenerationRequest as Req
from grm.engines.openai_api import OpenAIEngine
from tests.unit.http_servers import (
    Answer,
    LocalServer,
    cut_short,
    endless_body,
    not_http,
    silence,
    trickle_body,
    trickle_headers,
)


class Tok:
    """A chat template of tags, and one token per character (the end of text: id 0)."""

    eos_token_id = 0

    def encode(self, text, add_special_tokens=False):
        return [ord(c) for c in text]

    def decode(self, ids):
        return "".join(chr(i) for i in ids)

    def apply_chat_template(self, messages, tokenize=False, **kw):
        body = "".join(f"<{m['role']}>{m['content']}" for m in messages)
        return body if kw.get("continue_final_message") else body + "<assistant>"


class Server:
    """Serves /v1/completions; ``script`` is a list of status codes to return before succeeding."""

    def __init__(self):
        self.script, self.bodies, self.headers = [], [], []
        self.token_logprob = -0.1
        self.tops = lambda prompt: {"A": -0.1, " B": -2.5, "C": -4.0}
        """The listed alternatives of the token after ``prompt``."""
        self.ends = lambda prompt, body: False
        """True: the greedy token after ``prompt`` is the end of text (llama.cpp: nothing generated, no log-probs)."""
        outer = self

        class H(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.bodies.append(body)
                outer.headers.append(dict(self.headers))
                code = outer.script.pop(0) if outer.script else 200
                if code != 200:
                    self.send_response(code)
                    self.end_headers()
                    self.wfile.write(b'{"error": "injected"}')
                    return
                choice = {"index": 0, "text": f"echo:{body['prompt'][-12:]}", "finish_reason": "stop"}
                if outer.ends(body["prompt"], body):
                    choice = {"index": 0, "text": "", "finish_reason": "stop"}
                    choice["logprobs"] = {"tokens": [], "token_logprobs": [], "top_logprobs": []}
                elif body.get("logprobs") or outer.token_logprob is None:
                    choice["logprobs"] = {
                        "tokens": ["A"],
                        "token_logprobs": [outer.token_logprob],
                        "top_logprobs": [outer.tops(body["prompt"])],
                    }
                out = {"choices": [choice], "usage": {"prompt_tokens": 7, "completion_tokens": 3}}
                data = json.dumps(out).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), H)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"


@pytest.fixture
def server():
    s = Server()
    yield s
    s.httpd.shutdown()


def _engine(server, **kw):
    return OpenAIEngine(server.url, "judge-model", tokenizer=Tok(), backoff_s=0.01, **kw)


def test_completions_body_renders_prefill_and_samples(server):
    eng = _engine(server, api_key="sk-secret")
    req = Req(messages=[{"role": "user", "content": "Q"}, {"role": "assistant", "content": "Critique:"}], continue_final=True)
    gens = eng.generate([req, Req(text="raw")], SamplingParams(n=2, temperature=0.7, max_new_tokens=9, stop=("\n",), seed=5))
    assert len(gens) == 4 and [(g.request_index, g.sample_index) for g in gens] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    prompts = sorted((b["prompt"], b["seed"]) for b in server.bodies)
    assert prompts == [("<user>Q<assistant>Critique:", 5), ("<user>Q<assistant>Critique:", 6), ("raw", 5), ("raw", 6)]
    b = server.bodies[0]
    assert b["n"] == 1 and b["max_tokens"] == 9 and b["stop"] == ["\n"] and b["model"] == "judge-model"
    assert all(h["Authorization"] == "Bearer sk-secret" for h in server.headers)
    assert gens[0].completion_tokens == 3 and gens[0].n_tokens == 3 and gens[0].text.startswith("echo:")
    assert "sk-secret" not in repr(eng)
    assert eng.usage["requests"] == 4 and eng.usage["completion_tokens"] == 12


def test_429_and_5xx_are_retried_with_backoff(server):
    server.script = [429, 503, 500]
    eng = _engine(server, max_retries=4)
    g = eng.generate([Req(text="x")], SamplingParams(max_new_tokens=2))[0]
    assert g.text.startswith("echo:") and eng.usage["retries"] == 3 and len(server.bodies) == 4


def test_retries_exhausted_is_a_clear_error(server):
    server.script = [500] * 10
    eng = _engine(server, max_retries=2)
    with pytest.raises(EngineError, match="gave up after 3 attempts.*HTTP 500"):
        eng.generate([Req(text="x")], SamplingParams(max_new_tokens=2))
    assert len(server.bodies) == 3


def test_4xx_fails_at_once(server):
    server.script = [400]
    eng = _engine(server, max_retries=4)
    with pytest.raises(EngineError, match="HTTP 400 \\(not retried\\)"):
        eng.generate([Req(text="x")], SamplingParams(max_new_tokens=2))
    assert len(server.bodies) == 1


def test_refused_connection_is_retried_then_reported():
    eng = OpenAIEngine("http://127.0.0.1:9/v1", "m", tokenizer=Tok(), backoff_s=0.01, max_retries=1)
    with pytest.raises(EngineError, match="gave up after 2 attempts"):
        eng.generate([Req(text="x")], SamplingParams(max_new_tokens=2))


def test_score_continuations_from_top_logprobs(server):
    eng = _engine(server)
    (row,) = eng.score_continuations([Req(text="Verdict: [[")], [["A", "B", "Z"]])
    assert row[0] == pytest.approx(-0.1)  # exact token
    assert row[1] == pytest.approx(-2.5)  # " B" matched after stripping
    assert row[2] is None  # not listed: unknown, never a stand-in value (the judge masks it)
    assert server.bodies[-1]["logprobs"] == 20 and server.bodies[-1]["max_tokens"] == 1


def test_a_candidate_of_several_tokens_is_read_token_by_token(server):
    # after "Score: " the server lists 1 and 2; after "Score: 1", 0 and a newline; nothing else
    server.tops = lambda prompt: {"1": -1.0, "2": -2.0} if prompt.endswith(": ") else {"0": -0.5, "\n": -0.2}
    eng = _engine(server)
    rows = eng.score_continuations([Req(text="a Score: "), Req(text="b Score: ")], [["1", "2", "10", "3", "12"], ["10"]])
    assert rows[0][:3] == [pytest.approx(-1.0), pytest.approx(-2.0), pytest.approx(-1.5)]  # 10: log P(1) + log P(0 | 1)
    assert rows[0][3] is None and rows[0][4] is None  # 3 not listed; 12's second token not listed after "1"
    assert rows[1] == [pytest.approx(-1.5)]
    # one request per prompt, then one per distinct (prompt, prefix): "a Score: 1" and "b Score: 1"
    assert sorted(b["prompt"] for b in server.bodies) == ["a Score: ", "a Score: 1", "b Score: ", "b Score: 1"]


def test_where_the_end_of_text_is_greedy_the_reading_is_asked_again_with_it_banned(server):
    server.tops = lambda prompt: {"1": -1.0} if prompt.endswith(": ") else {"0": -0.9, "": -0.4}
    server.ends = lambda prompt, body: prompt.endswith("1") and "logit_bias" not in body
    eng = _engine(server)
    (row,) = eng.score_continuations([Req(text="Score: ")], [["1", "10"]])
    assert row == [pytest.approx(-1.0), pytest.approx(-1.9)]
    assert server.bodies[-1]["logit_bias"] == {"0": -100} and server.bodies[-1]["prompt"] == "Score: 1"
    # a server that ignores the ban: the token after "1" stays unknown, the candidate None (no error)
    server.ends = lambda prompt, body: prompt.endswith("1")
    (row,) = eng.score_continuations([Req(text="Score: ")], [["1", "10"]])
    assert row == [pytest.approx(-1.0), None]


def test_generated_token_without_logprob_is_an_error_not_zero(server):
    server.token_logprob = None  # used to become log-prob 0.0 (probability 1)
    with pytest.raises(EngineError, match="without a log-prob"):
        _engine(server).generate([Req(text="x")], SamplingParams(max_new_tokens=1))


def test_chat_endpoint_refuses_prefill(server):
    eng = OpenAIEngine(server.url, "m", endpoint="chat")
    with pytest.raises(EngineError, match="prefilled"):
        eng.generate(
            [Req(messages=[{"role": "user", "content": "q"}, {"role": "assistant", "content": "C:"}], continue_final=True)],
            SamplingParams(),
        )


def test_exact_token_ids_are_refused_with_a_clear_error_and_nothing_is_sent(server):
    for endpoint in ("completions", "chat"):
        eng = OpenAIEngine(server.url, "m", tokenizer=Tok(), endpoint=endpoint, backoff_s=0.01)
        with pytest.raises(EngineError, match="exact prompt token ids"):
            eng.generate([Req(token_ids=[1, 2, 3])], SamplingParams())
    assert server.bodies == []


def test_update_weights_is_refused(server):
    with pytest.raises(EngineError, match="frozen"):
        _engine(server).update_weights({}, 1)


def test_spec_needs_url_or_launch_and_key_comes_from_env(monkeypatch):
    from grm.config.judge import JudgeSpec
    from grm.engines import build_engine

    with pytest.raises(Exception, match="base_url .* or launch"):
        JudgeSpec.model_validate(
            {"name": "j", "model": "m", "template": "t.j2", "engine": {"type": "openai"}, "parser": {"type": "regex"}}
        )
    spec = JudgeSpec.model_validate(
        {
            "name": "j",
            "model": "m",
            "template": "t.j2",
            "parser": {"type": "regex", "range": [1, 10]},
            "engine": {"type": "openai", "base_url": "http://x/v1", "endpoint": "chat", "api_key_env": "GRM_TEST_KEY"},
        }
    )
    monkeypatch.delenv("GRM_TEST_KEY", raising=False)
    with pytest.raises(EngineError, match="GRM_TEST_KEY, which is not set"):
        build_engine(spec.engine, "m")
    monkeypatch.setenv("GRM_TEST_KEY", "k")
    eng = build_engine(spec.engine, "m")
    assert eng._http.credentials.header_for("http://x/v1/chat/completions") == "Bearer k"
    assert "GRM_TEST_KEY" in spec.model_dump_json() and "k'" not in repr(eng._http)


def test_judge_cost_carries_the_servers_usage(server, tmp_path):
    # the server answers every request with usage {prompt 7, completion 3}; two 503s first
    from grm.config.judge import JudgeSpec
    from grm.judges import Sample, build_judge
    from grm.judges.cost import costed

    (tmp_path / "t.j2").write_text("{# expects: prompt, response #}Q: {{ prompt }} A: {{ response }}")
    spec = JudgeSpec(
        name="remote",
        mode="pointwise",
        model="m",
        template="t.j2",
        parser={"type": "regex", "range": [1, 10]},
        sampling={"n": 2},
        on_failure={"retries": 0},
        engine={"type": "openai", "base_url": server.url},
    )
    server.script = [503, 503]
    judge = build_judge(spec, tmp_path, _engine(server))
    _, cost = costed(judge, judge.score_batch, [Sample(prompt="q", response=f"r{i}") for i in range(3)])
    assert cost.calls == 6 and cost.generated_tokens == 6 * 3 and cost.prompt_tokens == 6 * 7
    assert cost.usage == {"requests": 6, "retries": 2, "prompt_tokens": 42, "completion_tokens": 18, "server_restarts": 0}
    m = cost.metrics("remote")
    assert m["judge_cost/remote/usage_prompt_tokens"] == 42 and m["judge_cost/remote/usage_retries"] == 2


# ------------------------------------------------------------------ trust boundary (issue #39)
# Real servers on two ports: ``a`` is the configured one, ``b`` another origin that must never
# hear from the engine. The key holds the characters encodings change, so each spelling differs.
KEY = 'sk-live/Te+st&k"y<1>=%9Z-0123456789'


def spellings(secret):
    """The key as a server may echo it, and the pieces a cut message could keep of it."""
    js = json.dumps(secret)[1:-1]
    return {secret, quote(secret, safe=""), quote_plus(secret), js, js.replace("/", "\\/"), html.escape(secret)} | {
        secret[:10],
        secret[-10:],
    }


def assert_clean(message, url, secret=KEY):
    for s in spellings(secret):
        assert s not in message, (s, message)
    assert url in message and "\n" not in message and "\x1b" not in message and len(message) < 1200, message


def completion(text="ok"):
    body = {"choices": [{"text": text, "finish_reason": "stop"}], "usage": {"prompt_tokens": 1, "completion_tokens": 1}}
    return Answer(200, json.dumps(body).encode(), {"Content-Type": "application/json"})


@pytest.fixture
def two():
    a, b = LocalServer(), LocalServer(lambda arrival: completion("from b"))
    yield a, b
    a.close()
    b.close()


def _remote(server, **kw):
    kw = {"tokenizer": Tok(), "backoff_s": 0.0, "max_retries": 0, "api_key": KEY, **kw}
    return OpenAIEngine(server.url + "/v1", "m", **kw)


def _fails(eng, *args):
    with pytest.raises(EngineError) as e:
        if args:
            eng.score_continuations(*args)
        else:
            eng.generate([Req(text="x")], SamplingParams(max_new_tokens=2))
    return str(e.value)


@pytest.mark.parametrize("code", [301, 302, 303, 307, 308])
@pytest.mark.parametrize("where", ["absolute", "scheme-relative", "by name", "with userinfo"])
def test_a_redirect_to_another_origin_is_never_followed_and_the_key_never_arrives_there(two, code, where):
    a, b = two
    target = {
        "absolute": f"{b.url}/v1/completions",
        "scheme-relative": f"//127.0.0.1:{b.port}/v1/completions",
        "by name": f"http://localhost:{b.port}/v1/completions",
        "with userinfo": f"http://alice:s3cret-pw@127.0.0.1:{b.port}/v1/completions",
    }[where]
    a.answer = lambda arrival: Answer(code, b"moved", {"Location": target})
    message = _fails(_remote(a))
    assert "another origin" in message and f":{b.port}" in message and "s3cret-pw" not in message
    assert_clean(message, a.url)
    assert b.arrivals == [] and len(a.arrivals) == 1  # b never contacted: no key, no prompt
    assert a.arrivals[0].headers["Authorization"] == f"Bearer {KEY}"


def test_a_same_origin_chain_that_leaves_the_origin_is_refused_at_the_hop_that_leaves(two):
    a, b = two
    hops = {"/v1/completions": (307, "/v1/hop1"), "/v1/hop1": (308, f"{a.url}/v1/hop2"), "/v1/hop2": (307, b.url + "/x")}
    a.answer = lambda arrival: Answer(hops[arrival.path][0], b"", {"Location": hops[arrival.path][1]})
    message = _fails(_remote(a))
    assert "another origin" in message and b.arrivals == []
    assert [x.path for x in a.arrivals] == ["/v1/completions", "/v1/hop1", "/v1/hop2"]
    # 307/308 within the origin replay the same POST: method, body and key unchanged
    assert {(x.method, x.body, x.headers["Authorization"]) for x in a.arrivals} == {("POST", a.arrivals[0].body, f"Bearer {KEY}")}


def test_a_same_origin_307_is_followed_and_a_302_is_reported_not_turned_into_a_get(two):
    a, _ = two
    a.answer = lambda arrival: (
        completion() if arrival.path == "/v2/completions" else Answer(307, b"", {"Location": "/v2/completions"})
    )
    assert _remote(a).generate([Req(text="x")], SamplingParams(max_new_tokens=2))[0].text == "ok"
    assert [x.path for x in a.arrivals] == ["/v1/completions", "/v2/completions"]
    a.arrivals.clear()
    a.answer = lambda arrival: Answer(302, b"", {"Location": "/v2/completions"})
    message = _fails(_remote(a))
    assert "turn the POST into a GET" in message and "/v2/completions" in message and len(a.arrivals) == 1


def test_a_redirect_loop_ends(two):
    a, _ = two
    a.answer = lambda arrival: Answer(307, b"", {"Location": arrival.path})
    assert "more than 5 redirects" in _fails(_remote(a)) and len(a.arrivals) == 6


@pytest.mark.parametrize("code", [400, 401, 403, 422, 500, 503])
def test_an_error_body_that_echoes_the_key_shows_it_nowhere(two, code):
    a, _ = two
    echo = json.dumps({"error": {"message": f"Incorrect API key provided: {KEY}", "header": f"Bearer {KEY}"}})
    body = (
        f"{echo}\n\x1b[31mred\x1b[0m ?key={quote(KEY, safe='')}&k={quote_plus(KEY)} {html.escape(KEY)} "
        + json.dumps(KEY).replace("/", "\\/")
        + "\u202e"
        + "pad " * 300_000
    )
    a.answer = lambda arrival: Answer(code, body.encode())
    message = _fails(_remote(a, max_retries=1))
    assert f"HTTP {code}" in message and "Incorrect API key provided: [redacted]" in message
    assert_clean(message, a.url)
    assert "\\u202e" in message or "\u202e" not in message  # a bidi override shown escaped, never raw


def test_a_key_straddling_the_cut_of_a_shown_body_leaves_no_prefix(two):
    a, _ = two
    for pad in range(280, 320, 3):
        a.answer = lambda arrival, pad=pad: Answer(400, ("x" * pad + KEY + "y" * 50).encode())
        assert_clean(_fails(_remote(a)), a.url)


@pytest.mark.parametrize("fill", [" ", "\n", "\t "])
def test_a_key_padded_to_the_cut_of_a_long_body_leaves_no_prefix(two, fill):
    # whitespace a one-line message collapses would bring the cut's last bytes into view
    from grm.engines.http import ERROR_BODY_BYTES

    a, _ = two
    for status in (400, 503):
        for keep in (1, 5, 12, len(KEY) - 1):
            pad = (fill * ERROR_BODY_BYTES)[: ERROR_BODY_BYTES - keep]
            a.answer = lambda arrival, pad=pad, status=status: Answer(status, (pad + KEY).encode())
            assert_clean(_fails(_remote(a)), a.url)


def test_a_reply_that_echoes_the_key_in_its_text_keeps_it_out_of_the_generation(two):
    a, _ = two
    a.answer = lambda arrival: completion(f"Score: 7 (you sent Authorization: {arrival.headers['Authorization']})")
    out = _remote(a).generate([Req(text="x")], SamplingParams(max_new_tokens=2))[0].text
    assert KEY not in out and out.startswith("Score: 7") and "[redacted]" in out


def test_a_lone_surrogate_in_a_reply_is_kept_as_the_replacement_character(two):
    a, _ = two
    body = b'{"choices": [{"text": "Score: 7 \\ud800 end", "finish_reason": "stop"}]}'
    a.answer = lambda arrival: Answer(200, body, {"Content-Type": "application/json"})
    out = _remote(a).generate([Req(text="x")], SamplingParams(max_new_tokens=2))[0].text
    assert out == "Score: 7 \ufffd end"
    out.encode("utf-8")


def test_user_and_password_in_the_url_are_http_basic_for_that_server_and_shown_nowhere(two):
    import base64

    a, b = two
    a.answer = lambda arrival: Answer(403, f"denied {arrival.headers.get('Authorization')} pa55:word".encode())
    eng = _remote(a, api_key=None)
    eng = OpenAIEngine(f"http://alice:pa55:word@127.0.0.1:{a.port}/v1", "m", tokenizer=Tok(), max_retries=0)
    message = _fails(eng)
    token = base64.b64encode(b"alice:pa55:word").decode()
    assert a.arrivals[0].headers["Authorization"] == f"Basic {token}"
    assert_clean(message, a.url, secret="pa55:word") and token not in message
    assert "pa55" not in repr(eng) + eng.base_url and eng.base_url == a.url + "/v1"
    with pytest.raises(EngineError, match="give one of them"):
        OpenAIEngine(f"http://alice:pw@127.0.0.1:{a.port}/v1", "m", endpoint="chat", api_key=KEY)


def test_the_key_goes_only_to_its_own_origin_whatever_url_a_caller_passes(two):
    a, b = two
    eng = _remote(a)
    eng._http.post_json(b.url + "/v1/completions", {"x": 1})
    assert b.arrivals and "Authorization" not in b.arrivals[0].headers
    for text in (repr(eng), repr(eng._http), repr(eng._http.credentials)):
        assert KEY not in text and "Bearer" not in text


def _deep(arrival):
    return Answer(200, b"[" * 100_000 + b"]" * 100_000)


BAD_REPLIES = {
    "html": (lambda a: Answer(200, b"<html><body>\x1b[2JHello</body></html>"), "not JSON"),
    "not UTF-8": (lambda a: Answer(200, b'{"choices": [{"text": "\xff\xfe"}]}'), r"not JSON \(not UTF-8\)"),
    "nested too deeply": (_deep, r"nested too deeply"),
    "no content": (lambda a: Answer(204, b""), "not JSON"),
    "a list": (lambda a: Answer(200, b"[1, 2]"), "unexpected reply: the reply: Input should be a valid dictionary"),
    "no choices": (lambda a: Answer(200, b"{}"), "choices: Field required"),
    "empty choices": (lambda a: Answer(200, b'{"choices": []}'), "choices: List should have at least 1 item"),
    "text a number": (lambda a: Answer(200, b'{"choices": [{"text": 5}]}'), r"choices\.0\.text: Input should be a valid string"),
    "choice a string": (lambda a: Answer(200, json.dumps({"choices": [f"key {KEY}"]}).encode()), r"choices\.0: .*\[redacted\]"),
    "usage a word": (
        lambda a: Answer(200, b'{"choices": [{"text": "a"}], "usage": {"prompt_tokens": "many"}}'),
        r"usage\.prompt_tokens",
    ),
    "negative usage": (
        lambda a: Answer(200, b'{"choices": [{"text": "a"}], "usage": {"completion_tokens": -3}}'),
        r"usage\.completion_tokens",
    ),
    "absurd usage": (  # summed into a run's cost it would swamp every other count
        lambda a: Answer(200, b'{"choices": [{"text": "a"}], "usage": {"prompt_tokens": 1' + b"0" * 300 + b"}}"),
        r"usage\.prompt_tokens",
    ),
    "logprobs a string": (
        lambda a: Answer(200, b'{"choices": [{"text": "a", "logprobs": {"token_logprobs": "x"}}]}'),
        r"choices\.0\.logprobs\.completions\.token_logprobs",
    ),
    "infinite logprob": (
        lambda a: Answer(200, b'{"choices": [{"text": "a", "logprobs": {"token_logprobs": [Infinity]}}]}'),
        "without a log-prob",
    ),
    "too large": (lambda a: Answer(200, b" " * (2 << 20)), r"larger than 1048576 bytes"),
    "endless": (lambda a: endless_body, r"larger than 1048576 bytes"),
    "trickled body": (lambda a: trickle_body, r"no complete reply within 1 s"),
    "trickled headers": (lambda a: trickle_headers, r"no complete reply within 1 s"),
    "silence": (lambda a: silence, r"no complete reply within 1 s"),
    "not HTTP": (lambda a: not_http, "not valid HTTP"),
    "cut short": (lambda a: cut_short, "closed after 10 bytes"),
}


@pytest.mark.parametrize("kind", sorted(BAD_REPLIES))
def test_a_bad_reply_of_any_kind_is_one_clear_error_naming_the_server_within_the_deadline(two, kind):
    a, _ = two
    a.answer, expected = BAD_REPLIES[kind]
    eng = _remote(a, timeout_s=1.0, max_reply_bytes=1 << 20)
    t0 = time.monotonic()
    message = _fails(eng)
    assert time.monotonic() - t0 < 4.0, "the deadline did not hold"
    assert re.search(expected, message), message
    assert_clean(message, a.url)


def test_score_continuations_refuses_bad_top_logprobs_with_one_error(two):
    a, _ = two
    bad = {"choices": [{"text": "A", "logprobs": {"top_logprobs": [{"A": "high"}]}}]}
    a.answer = lambda arrival: Answer(200, json.dumps(bad).encode())
    message = _fails(_remote(a), [Req(text="q")], [["A"]])
    assert "top_logprobs.0.A" in message
    assert_clean(message, a.url)


# ---------------------------------------------------------------- a launched server that dies
TINY = str(Path(__file__).with_name("tiny_openai_server.py"))


def _launched(*extra, concurrency=4):
    import sys

    from grm.config.policy import OpenAIEngineSpec
    from grm.engines import build_engine

    spec = OpenAIEngineSpec(
        type="openai",
        endpoint="chat",
        launch=[sys.executable, TINY, "{port}", *extra],
        launch_timeout_s=30,
        backoff_s=0.05,
        concurrency=concurrency,
    )
    return build_engine(spec, "tiny")


def _ask(eng, n):
    requests = [Req(messages=[{"role": "user", "content": f"q{i}"}]) for i in range(n)]
    return eng.generate(requests, SamplingParams(max_new_tokens=2))


def test_a_launched_server_that_dies_is_started_again_and_the_requests_re_issued():
    import os
    import signal

    eng = _launched()
    try:
        first = eng.server.proc.pid
        assert {g.text for g in _ask(eng, 2)} == {f"pid {first}"}
        os.kill(first, signal.SIGKILL)
        eng.server.proc.wait()
        # eight requests from four threads find it dead: it is started once, every request answered
        gens = _ask(eng, 8)
        second = eng.server.proc.pid
        assert second != first and {g.text for g in gens} == {f"pid {second}"}
        assert eng.usage["server_restarts"] == 1 and eng.usage["requests"] == 10
        assert eng.usage["retries"] >= 1  # the failed attempts that found it dead
    finally:
        eng.close()
    assert eng.server.proc.poll() is not None  # stopped with the engine


def test_a_launched_server_that_cannot_come_back_fails_the_request_with_its_reason(tmp_path):
    import os
    import signal

    eng = _launched("--once", str(tmp_path / "started"))
    try:
        os.kill(eng.server.proc.pid, signal.SIGKILL)
        eng.server.proc.wait()
        with pytest.raises(EngineError, match=r"launched server died \(exit code -9\) and did not come back.*exited with code 3"):
            _ask(eng, 1)
    finally:
        eng.close()


@pytest.mark.skipif(sys.platform != "linux", reason="the parent-death signal is Linux's")
def test_a_launched_server_dies_with_the_process_that_launched_it():
    import os
    import signal
    import subprocess

    import psutil

    code = (
        "import sys; from grm.process import free_port; from grm.engines.openai_api import ServerProcess\n"
        "port = free_port()\n"
        f"s = ServerProcess([sys.executable, {TINY!r}, str(port)], f'http://127.0.0.1:{{port}}/v1', timeout_s=30)\n"
        "print(s.proc.pid, flush=True)\n"
        "import time; time.sleep(60)\n"
    )
    owner = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        server = psutil.Process(int(owner.stdout.readline()))
        assert server.is_running() and TINY in server.cmdline()  # the shim exec'd the command itself
        os.kill(owner.pid, signal.SIGKILL)  # as Ray ends a judge actor: no atexit runs
        owner.wait()
        server.wait(timeout=10)  # psutil.TimeoutExpired if the server outlived its owner
    finally:
        owner.kill()


def test_urls_give_each_replica_its_own_server_and_exclude_base_url_and_launch():
    from pydantic import ValidationError

    from grm.config.judge import JudgeSpec
    from grm.config.policy import OpenAIEngineSpec
    from grm.orchestrator.roles import replica_spec

    urls = ["http://10.0.0.1:8000/v1", "http://10.0.0.2:8000/v1"]
    spec = JudgeSpec.model_validate(
        {
            "name": "served",
            "mode": "pointwise",
            "model": "m",
            "template": "{{ prompt }}",
            "parser": {"type": "regex", "range": [1, 10]},
            "engine": {"type": "openai", "endpoint": "chat", "urls": urls},
        }
    )
    assert [replica_spec(spec, i).engine.base_url for i in range(3)] == [urls[0], urls[1], urls[0]]
    assert replica_spec(spec, 1).engine.urls is None and spec.engine.urls == urls  # the pipeline's spec is unchanged
    for other in ({"base_url": urls[0]}, {"launch": ["server", "{port}"]}):
        with pytest.raises(ValidationError, match="urls cannot be combined with"):
            OpenAIEngineSpec(type="openai", urls=urls, **other)
    with pytest.raises(ValidationError, match="credential"):
        OpenAIEngineSpec(type="openai", urls=["http://user:pw@10.0.0.1/v1"])
