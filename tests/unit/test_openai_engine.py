"""openai engine against a local HTTP server of our own that injects 429/5xx/4xx and checks the
request bodies (the real llama.cpp server tests are in tests/serving)."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from grm.engines.base import EngineError, SamplingParams
from grm.engines.base import GenerationRequest as Req
from grm.engines.openai_api import OpenAIEngine


class Tok:
    def apply_chat_template(self, messages, tokenize=False, **kw):
        body = "".join(f"<{m['role']}>{m['content']}" for m in messages)
        return body if kw.get("continue_final_message") else body + "<assistant>"


class Server:
    """Serves /v1/completions; ``script`` is a list of status codes to return before succeeding."""

    def __init__(self):
        self.script, self.bodies, self.headers = [], [], []
        self.token_logprob = -0.1
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
                if body.get("logprobs") or outer.token_logprob is None:
                    choice["logprobs"] = {
                        "tokens": ["A"],
                        "token_logprobs": [outer.token_logprob],
                        "top_logprobs": [{"A": -0.1, " B": -2.5, "C": -4.0}],
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
            "parser": {"type": "regex"},
            "engine": {"type": "openai", "base_url": "http://x/v1", "endpoint": "chat", "api_key_env": "GRM_TEST_KEY"},
        }
    )
    monkeypatch.delenv("GRM_TEST_KEY", raising=False)
    with pytest.raises(EngineError, match="GRM_TEST_KEY, which is not set"):
        build_engine(spec.engine, "m")
    monkeypatch.setenv("GRM_TEST_KEY", "k")
    eng = build_engine(spec.engine, "m")
    assert eng._headers["Authorization"] == "Bearer k" and "GRM_TEST_KEY" in spec.model_dump_json()


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
        parser={"type": "regex"},
        sampling={"n": 2},
        on_failure={"retries": 0},
        engine={"type": "openai", "base_url": server.url},
    )
    server.script = [503, 503]
    judge = build_judge(spec, tmp_path, _engine(server))
    _, cost = costed(judge, judge.score_batch, [Sample(prompt="q", response=f"r{i}") for i in range(3)])
    assert cost.calls == 6 and cost.generated_tokens == 6 * 3 and cost.prompt_tokens == 6 * 7
    assert cost.usage == {"requests": 6, "retries": 2, "prompt_tokens": 42, "completion_tokens": 18}
    m = cost.metrics("remote")
    assert m["judge_cost/remote/usage_prompt_tokens"] == 42 and m["judge_cost/remote/usage_retries"] == 2
