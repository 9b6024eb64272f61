"""The OpenAI-compatible policy endpoint over a scripted engine and the real SmolLM2 tokenizer (no
weights): an agent loop through the real ``openai`` client gives exactly the tokens of the direct
episode runner, every request that breaks the episode's history or a limit is answered 400 with the
reason the episode ends with, and agents that raise or hang end only their own episode."""

import asyncio
import http.client
import json
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

import openai
import pytest

from grm.config.env import EnvSpec
from grm.engines.base import SamplingParams
from grm.envs.agent import load_agent, run_agent_episodes
from grm.envs.base import EnvError, Observation, Reset, Step
from grm.envs.endpoint import PolicyEndpoint
from grm.envs.episodes import EpisodeLimits, episode_counts, run_episodes
from grm.envs.tools import CalculatorTool
from grm.http_host import HostCheck
from tests.unit.envs.test_episodes import BAD_CALL, SMOL, TokenEngine, call, tokenizer

TOOLS = [CalculatorTool.schema]
TASK = [{"role": "system", "content": "Use the calculator."}, {"role": "user", "content": "What is 12*3-7?"}]
SP = SamplingParams(max_new_tokens=64)


def solve(key, k):
    return [call("12*3"), call("36-7"), "The answer is \\boxed{29}."][min(k, 2)]


class ToolEnv:
    """The direct path's environment: the calculator answers each call; done after the third turn."""

    def __init__(self):
        self.k = 0

    def reset(self, row):
        return Reset([dict(m) for m in TASK], list(TOOLS))

    def step(self, message):
        self.k += 1
        if self.k >= 3:
            return Step([], True, {"success": 1.0}, message.content)
        c = message.tool_calls[0]
        return Step([Observation("tool", CalculatorTool()(c.arguments).text, c.name, c.id)])


def openai_agent(row, base_url, model):
    """What ToolEnv does, as an agent loop through the OpenAI client."""
    client = openai.OpenAI(base_url=base_url, api_key="none", max_retries=0)
    assert [m.id for m in client.models.list().data] == [model]
    messages = [dict(m) for m in TASK]
    for _ in range(3):
        reply = client.chat.completions.create(model=model, messages=messages, tools=TOOLS, temperature=0.3)
        msg = reply.choices[0].message
        if not msg.tool_calls:
            return {"signals": {"success": 1.0}}
        messages.append(msg.model_dump(exclude_none=True))
        for c in msg.tool_calls:
            result = CalculatorTool()(json.loads(c.function.arguments))
            messages.append({"role": "tool", "tool_call_id": c.id, "content": result.text})
    return None


def post(url, body, method="POST"):
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data if method == "POST" else None, method=method)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_an_openai_client_agent_loop_gives_exactly_the_direct_runners_tokens(capfd):
    tok = tokenizer(SMOL)
    for seed, eid in ((5, "s1r0g0/0"), (6, "s1r0g0/1")):  # orchestrator ids carry a slash: quoted in the URL
        # one episode at a time: the scripted engine's log-probs count tokens across a call's batch
        direct, served = TokenEngine(tok, solve), TokenEngine(tok, solve)
        (w,) = run_episodes(direct, tok, ToolEnv, [{}], SP, seeds=[seed], ids=[eid])
        (g,) = run_agent_episodes(served, tok, openai_agent, [{}], SP, seeds=[seed], ids=[eid])
        assert (g.id, g.end_reason, g.signals) == (w.id, "done", {"success": 1.0})
        assert g.prompt_ids == w.prompt_ids and g.task.messages == w.task.messages
        assert [(t.role, t.token_ids, t.logprobs, t.content) for t in g.turns] == [
            (t.role, t.token_ids, t.logprobs, t.content) for t in w.turns
        ]
        assert g.training_view() == w.training_view()
        assert g.final_answer == w.final_answer == "The answer is \\boxed{29}."
        assert served.sent == direct.sent and len(served.sent[seed]) == 3  # every turn's context, id for id
    assert capfd.readouterr().err == ""


@pytest.fixture
def endpoint():
    tok = tokenizer(SMOL)
    engine = TokenEngine(tok, solve)
    with PolicyEndpoint(engine, tok, SP, EpisodeLimits(max_turns=3, max_bad_tool_calls=1)) as ep:
        yield ep


def first(url, messages=TASK, **kw):
    return post(f"{url}/chat/completions", {"model": "m", "messages": messages, "tools": TOOLS, **kw})


def test_the_response_carries_the_exact_ids_logprobs_and_tool_calls_in_openai_form(endpoint):
    url = endpoint.open("a", seed=1)
    status, r = first(url, max_tokens=1000)
    assert status == 200 and r["object"] == "chat.completion" and r["model"] == "m"
    choice = r["choices"][0]
    assert choice["finish_reason"] == "tool_calls" and choice["message"]["content"] == "Let me compute."
    (c,) = choice["message"]["tool_calls"]
    assert c["type"] == "function" and c["function"]["name"] == "calculator"
    assert json.loads(c["function"]["arguments"]) == {"expression": "12*3"}
    traj = endpoint.close("a")
    assert choice["token_ids"] == traj.turns[0].token_ids and r["prompt_token_ids"] == traj.prompt_ids
    assert [x["logprob"] for x in choice["logprobs"]["content"]] == traj.turns[0].logprobs
    assert r["usage"]["completion_tokens"] == len(choice["token_ids"])
    assert traj.end_reason == "done" and traj.turns[0].policy_version == 3


@pytest.mark.parametrize(
    ("edit", "index"),
    [
        (lambda m: m.__setitem__(1, {"role": "user", "content": "What is 2+2?"}), 1),
        (lambda m: m[2].__setitem__("content", "I will compute."), 2),
        (lambda m: m[2]["tool_calls"][0]["function"].__setitem__("arguments", '{"expression": "1+1"}'), 2),
        (lambda m: m.pop(0), 0),
    ],
)
def test_a_request_that_rewrites_the_history_is_refused_naming_the_message_and_ends_the_episode(endpoint, edit, index):
    url = endpoint.open("a", seed=1)
    _, r = first(url)
    messages = [*TASK, r["choices"][0]["message"], {"role": "tool", "tool_call_id": "call_0_0", "content": "36"}]
    edit(messages)
    status, err = first(url, messages)
    assert status == 400 and f"messages[{index}]" in err["error"]["message"] and err["error"]["code"] == "env_error"
    status, again = first(url, messages[:3])
    assert status == 400 and again["error"]["type"] == "episode_ended"
    traj = endpoint.close("a")
    assert traj.end_reason == "env_error" and f"messages[{index}]" in traj.end_detail


def test_changed_tools_or_no_new_message_end_the_episode_with_env_error(endpoint):
    for eid, tools, extra in (("t", [], [{"role": "tool", "content": "36"}]), ("n", TOOLS, [])):
        url = endpoint.open(eid, seed=1)
        _, r = first(url)
        status, err = first(url, [*TASK, r["choices"][0]["message"], *extra], tools=tools)
        assert status == 400, err
        assert endpoint.close(eid).end_reason == "env_error"


def test_max_turns_and_max_tokens_answer_400_with_the_reason_the_episode_ends_with():
    tok = tokenizer(SMOL)
    with PolicyEndpoint(TokenEngine(tok, solve), tok, SP, EpisodeLimits(max_turns=1)) as ep:
        url = ep.open("a", seed=1)
        _, r = first(url)
        tool = {"role": "tool", "tool_call_id": "call_0_0", "content": "36"}
        status, err = first(url, [*TASK, r["choices"][0]["message"], tool])
        assert (status, err["error"]["code"]) == (400, "max_turns") and "max_turns" in err["error"]["message"]
        traj = ep.close("a")
        assert traj.end_reason == "max_turns" and traj.turns[-1].role == "tool" and traj.turns[-1].token_ids == []
    with PolicyEndpoint(TokenEngine(tok, solve), tok, SP, EpisodeLimits(max_total_tokens=100)) as ep:
        url = ep.open("b", seed=1)
        status, err = first(url)
        assert (status, err["error"]["code"]) == (400, "max_tokens") and "+ 64 new > 100" in err["error"]["message"]
        assert ep.close("b").end_reason == "max_tokens"


def test_a_malformed_tool_call_is_plain_content_recorded_and_counted_then_ends_the_episode():
    tok = tokenizer(SMOL)
    engine = TokenEngine(tok, lambda key, k: BAD_CALL)
    with PolicyEndpoint(engine, tok, SP, EpisodeLimits(max_bad_tool_calls=1)) as ep:
        url = ep.open("a", seed=1)
        messages = list(TASK)
        for _ in range(2):
            status, r = first(url, messages)
            msg = r["choices"][0]["message"]
            assert status == 200 and "tool_calls" not in msg and msg["content"] == BAD_CALL
            assert r["choices"][0]["finish_reason"] == "stop"
            messages += [msg, {"role": "user", "content": "That call was malformed."}]
        status, err = first(url, messages)
        assert (status, err["error"]["code"]) == (400, "bad_tool_call")
        traj = ep.close("a")
    assert traj.end_reason == "bad_tool_call" and all(t.tool_call_error for t in traj.turns if t.role == "assistant")
    assert episode_counts([traj])["bad_tool_calls"] == 2 and traj.turns[1].role == "user" and traj.turns[1].token_ids


def test_bad_bodies_unknown_episodes_and_routes_get_json_errors_and_nothing_on_stderr(endpoint, capfd):
    url = endpoint.open("a", seed=1)
    assert post(f"{url}/chat/completions", b"{not json")[0] == 400
    assert post(f"{url}/chat/completions", [1, 2])[0] == 400
    assert first(url, n=2)[0] == 400 and first(url, stream=True)[0] == 400 and first(url, [])[0] == 400
    assert first(url, max_tokens=0)[0] == 400 and first(url, [{"role": "robot", "content": "x"}])[0] == 400
    status, err = post(f"{endpoint.url}/episodes/nope/v1/chat/completions", {"messages": TASK})
    assert status == 404 and "no episode 'nope'" in err["error"]["message"]
    assert post(f"{endpoint.url}/elsewhere", {}, "GET")[0] == 404
    assert post(f"{url}/models", None, "GET")[1]["data"][0]["id"] == "scripted"
    assert first(url)[0] == 200  # the bad requests left the episode open
    endpoint.close("a")
    assert first(url)[1]["error"]["type"] == "episode_ended"
    assert capfd.readouterr().err == ""


def test_requests_of_concurrent_episodes_are_generated_in_one_engine_call():
    tok = tokenizer(SMOL)
    engine = TokenEngine(tok, solve)
    with PolicyEndpoint(engine, tok, SP, window_s=0.5) as ep:
        urls = [ep.open(f"e{i}", seed=i) for i in range(3)]
        statuses = []
        threads = [threading.Thread(target=lambda u=u: statuses.append(first(u)[0])) for u in urls]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
        assert statuses == [200] * 3 and engine.calls == [3] and ep.generate_calls == [3]
        assert sorted(engine.sent) == [0, 1, 2]  # each with its own episode's seed


def raw_agent(row, base_url, model):
    """One turn through plain HTTP; row['fail'] raises, row['hang'] never returns."""
    if row.get("hang"):
        time.sleep(5)
    status, r = first(base_url)
    if row.get("fail"):
        raise KeyError("the agent broke")
    return {"signals": {"tokens": len(r["choices"][0]["token_ids"]), "ok": True}, "final_answer": "29"}


async def async_hung_agent(row, base_url, model):
    await asyncio.sleep(60)


def test_an_agent_that_raises_or_hangs_ends_only_its_own_episode():
    tok = tokenizer(SMOL)
    engine = TokenEngine(tok, solve)
    rows = [{}, {"fail": True}, {"hang": True}]
    start = time.monotonic()
    trajs = run_agent_episodes(engine, tok, raw_agent, rows, SP, EpisodeLimits(wall_time_s=0.5), seeds=[0, 1, 2])
    assert time.monotonic() - start < 3
    assert [t.end_reason for t in trajs] == ["done", "env_error", "wall_time"]
    assert trajs[0].signals == {"tokens": float(len(trajs[0].turns[0].token_ids)), "ok": 1.0} and trajs[0].final_answer == "29"
    assert "the agent raised KeyError" in trajs[1].end_detail and len(trajs[1].turns) == 1
    assert "still running after 0.5 s" in trajs[2].end_detail and trajs[2].turns == []
    (hung,) = run_agent_episodes(engine, tok, async_hung_agent, [{}], SP, EpisodeLimits(wall_time_s=0.2))
    assert hung.end_reason == "wall_time"
    counts = episode_counts(trajs)
    assert (counts["end_done"], counts["end_env_error"], counts["end_wall_time"], counts["turns"]) == (1, 1, 1, 2)


def test_a_closed_episodes_late_requests_are_answered_400_with_its_reason(endpoint):
    url = endpoint.open("late", seed=1)
    assert first(url)[0] == 200
    assert endpoint.close("late", "wall_time", "still running").end_reason == "wall_time"
    status, err = first(url)
    assert (status, err["error"]["code"]) == (400, "wall_time") and "still running" in err["error"]["message"]


def junk_agent(row, base_url, model):
    if row["call"]:
        first(base_url)
    return row["out"]


def test_an_agent_returning_junk_or_never_calling_the_policy_is_an_env_error():
    tok = tokenizer(SMOL)
    rows = [{"call": True, "out": 3}, {"call": True, "out": {"signals": {"x": float("nan")}}}, {"call": False, "out": None}]
    trajs = run_agent_episodes(TokenEngine(tok, solve), tok, junk_agent, rows, SP, seeds=[0, 1, 2])
    assert [t.end_reason for t in trajs] == ["env_error"] * 3
    assert "returned int" in trajs[0].end_detail and "'x' = nan" in trajs[1].end_detail
    assert "never asked the policy" in trajs[2].end_detail


def test_an_agent_is_loaded_by_file_or_module_and_configured_as_type_agent(tmp_path):
    (tmp_path / "a.py").write_text("def agent(row, base_url, model):\n    return None\nclass Other: pass\ndef two(a, b): pass\n")
    assert load_agent("a.py:agent", tmp_path).__name__ == "agent"
    assert load_agent("tests.unit.envs.test_endpoint:raw_agent") is raw_agent
    missing = r"has no nope \(functions there: agent, two\)"
    for spec, message in (("a.py:nope", missing), ("a.py:two", "must take"), ("a.py:Other", "not an agent function")):
        with pytest.raises(EnvError, match=message):
            load_agent(spec, tmp_path)
    spec = EnvSpec(type="agent", path="a.py:agent")
    assert spec.is_agent and spec.target == "a.py:agent"
    with_kwargs = {"type": "agent", "path": "a.py:agent", "kwargs": {"x": 1}}
    for bad, message in (({"type": "agent"}, "needs path: FILE.py:function"), (with_kwargs, "takes none")):
        with pytest.raises(ValueError, match=message):
            EnvSpec(**bad)


class BrokenEngine(TokenEngine):
    def generate(self, requests, sampling):
        raise RuntimeError("the GPU fell over")


def test_an_engine_failure_answers_500_and_fails_the_run_once_the_agents_are_done():
    tok = tokenizer(SMOL)
    statuses = []

    def agent(row, base_url, model):
        statuses.append(first(base_url)[0])

    with pytest.raises(RuntimeError, match="the GPU fell over"):
        run_agent_episodes(BrokenEngine(tok, solve), tok, agent, [{}, {}], SP, seeds=[0, 1])
    assert statuses == [500, 500]


def request(url, method="GET", body=None, host=None):
    """(status, JSON) of one request to ``url`` with the ``Host`` header given (None: none at all)."""
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    conn.putrequest(method, parts.path, skip_host=True)
    if host is not None:
        conn.putheader("Host", host)
    data = json.dumps(body).encode() if body is not None else b""
    conn.putheader("Content-Type", "application/json")
    conn.putheader("Content-Length", str(len(data)))
    conn.endheaders(data)
    r = conn.getresponse()
    try:
        return r.status, json.loads(r.read())
    finally:
        conn.close()


def test_a_request_whose_host_is_not_this_machines_loopback_is_refused_403_and_touches_no_episode(endpoint):
    """DNS rebinding: a web page sends its requests through a name it points at 127.0.0.1; the
    browser then sends that name as Host."""
    url = endpoint.open("a", seed=1)
    port = urllib.parse.urlsplit(url).port
    chat = {"model": "m", "messages": TASK, "tools": TOOLS}
    for host in ("evil.example", f"evil.example:{port}", "127.0.0.1.evil.example", "localhost.", "", None, "10.0.0.1"):
        for method, route, body in (("GET", "/models", None), ("POST", "/chat/completions", chat)):
            status, err = request(url + route, method, body, host)
            assert (status, err["error"]["type"]) == (403, "permission_error"), (host, err)
    for host in (f"127.0.0.1:{port}", "localhost", f"LocalHost:{port}", f"[::1]:{port}"):
        assert request(url + "/models", host=host)[0] == 200
    assert request(url + "/chat/completions", "POST", chat, f"localhost:{port}")[0] == 200
    traj = endpoint.close("a")
    assert traj.end_reason == "done" and len(traj.turns) == 1  # the refused requests took no turn


@pytest.mark.parametrize(
    ("host", "ok"),
    [("127.0.0.1", True), ("127.0.0.1:8080", True), ("localhost:1", True), ("[::1]", True), (" localhost ", True)]
    + [("evil.example", False), ("127.0.0.2", False), ("[::2]", False), ("localhost:99999999", False), (None, False)],
)
def test_local_host_accepts_only_the_loopback_names(host, ok):
    assert HostCheck("127.0.0.1").allows(host) is ok


def test_an_episodes_url_holds_a_random_token_not_its_id():
    tok = tokenizer(SMOL)
    with PolicyEndpoint(TokenEngine(tok, solve), tok, SP) as ep:
        urls = [ep.open(eid, seed=1) for eid in ("step1/p0/0", "a")]
        tokens = [u.split("/episodes/")[1].split("/")[0] for u in urls]
        assert len(set(tokens)) == 2 and all(len(t) >= 22 for t in tokens)  # 128 random bits each
        assert not any("step1" in u or u.endswith("/a/v1") for u in urls)
        for guess in ("step1%2Fp0%2F0", "a", "0", "e0"):  # the ids an orchestrator gives, and the defaults
            status, err = post(f"{ep.url}/episodes/{guess}/v1/models", None, "GET")
            assert (status, err["error"]["type"]) == (404, "not_found_error")
            assert first(f"{ep.url}/episodes/{guess}/v1")[0] == 404
        assert first(urls[1])[0] == 200
        assert ep.close("a").turns and ep.close("step1/p0/0").end_reason == "env_error"  # it never asked


def exiting_agent(row, base_url, model):
    first(base_url)
    raise SystemExit("the agent called sys.exit()")


async def async_exiting_agent(row, base_url, model):
    raise SystemExit(2)


@pytest.mark.parametrize("wall_time_s", [None, 30.0])  # with a deadline an async agent runs in a task of its own
def test_an_agent_that_calls_sys_exit_ends_only_its_own_episode(wall_time_s):
    tok = tokenizer(SMOL)
    for agent, detail in ((exiting_agent, "SystemExit: the agent called sys.exit()"), (async_exiting_agent, "SystemExit: 2")):
        (traj,) = run_agent_episodes(TokenEngine(tok, solve), tok, agent, [{}], SP, EpisodeLimits(wall_time_s=wall_time_s))
        assert traj.end_reason == "env_error" and traj.end_detail == f"the agent raised {detail}"
