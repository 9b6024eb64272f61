"""Fuzz the HTTP engines with server replies: any status, any Location, any body.

A real local server answers each request with the fuzzed reply; a second server stands for
another origin. The property (issue #39): a call returns well-formed generations or raises one
EngineError that names the server's URL on one bounded line; no other exception; no spelling of the
key (or of the URL's password) in the message; nothing ever reaches the other origin.
"""

from __future__ import annotations

import json
import math
from urllib.parse import quote, quote_plus

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grm.engines.base import EngineError, SamplingParams
from grm.engines.base import GenerationRequest as Req
from grm.engines.openai_api import OpenAIEngine
from grm.engines.sglang import SGLangEngine
from tests.unit.fuzz.support import budget, count
from tests.unit.http_servers import Answer, LocalServer

KEY = 'sk-fuzz/K3y+&"<x>=%41-abcdefghij'
PASSWORD = "pw/fuzz+S3cret"


class Tok:
    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": [ord(c) % 50 for c in text]}

    def apply_chat_template(self, messages, tokenize=False, **kw):
        return "".join(m["content"] for m in messages)


@pytest.fixture(scope="module")
def servers():
    a, b = LocalServer(), LocalServer()
    yield a, b
    a.close()
    b.close()


def spellings(secret: str) -> set[str]:
    js = json.dumps(secret)[1:-1]
    return {secret, quote(secret, safe=""), quote_plus(secret), js, js.replace("/", "\\/")}


def forbidden(secret: str) -> set[str]:
    """What a message must not hold: any spelling, or the ends a cut message could keep."""
    return spellings(secret) | {secret[:8], secret[-8:]}


def echoes(secret: str) -> st.SearchStrategy[str]:
    return st.sampled_from(sorted(spellings(secret)) + [f"Bearer {secret}", f"?api_key={quote(secret, safe='')}"])


json_leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    echoes(KEY),
    echoes(PASSWORD),
)
json_values = st.recursive(
    json_leaves, lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=8), kids, max_size=4), max_leaves=12
)


def maybe(s: st.SearchStrategy) -> st.SearchStrategy:
    """A field of the right type, or one time in five any JSON value."""
    return st.integers(0, 4).flatmap(lambda k: json_values if k == 0 else s)


choices = st.fixed_dictionaries(
    {},
    optional={
        "text": maybe(st.text(max_size=30)),
        "message": maybe(st.fixed_dictionaries({"content": maybe(st.text(max_size=30))})),
        "finish_reason": maybe(st.sampled_from(["stop", "length"])),
        "logprobs": maybe(
            st.fixed_dictionaries(
                {},
                optional={
                    "token_logprobs": maybe(st.lists(maybe(st.floats(max_value=0)), max_size=4)),
                    "top_logprobs": maybe(
                        st.lists(maybe(st.dictionaries(st.sampled_from(["A", " B", "C"]), maybe(st.floats()))), max_size=2)
                    ),
                    "content": maybe(st.lists(maybe(st.fixed_dictionaries({"logprob": maybe(st.floats())})), max_size=3)),
                },
            )
        ),
    },
)
completions = st.fixed_dictionaries(
    {"choices": maybe(st.lists(maybe(choices), max_size=2))},
    optional={"usage": maybe(st.fixed_dictionaries({}, optional={"prompt_tokens": maybe(st.integers(-3, 10**12))}))},
)
rows = st.fixed_dictionaries(
    {},
    optional={
        "text": maybe(st.text(max_size=10)),
        "output_ids": maybe(st.lists(st.integers(0, 100), max_size=3)),
        "meta_info": maybe(
            st.fixed_dictionaries(
                {},
                optional={
                    "finish_reason": maybe(st.fixed_dictionaries({"type": maybe(st.sampled_from(["stop", "length", "abort"]))})),
                    "weight_version": maybe(st.sampled_from(["default", "0", "7", "²", "9" * 30])),
                    "output_token_logprobs": maybe(
                        st.lists(maybe(st.tuples(maybe(st.floats()), maybe(st.integers(0, 9)), st.none())), max_size=3)
                    ),
                    "input_token_logprobs": maybe(st.lists(maybe(st.tuples(maybe(st.floats()), st.integers(0, 9))), max_size=4)),
                },
            )
        ),
    },
)


def bodies(shaped: st.SearchStrategy) -> st.SearchStrategy[bytes]:
    return st.one_of(
        shaped.map(lambda v: json.dumps(v).encode()),
        json_values.map(lambda v: json.dumps(v).encode()),
        st.binary(max_size=300),
        st.tuples(st.text(max_size=40), echoes(KEY), echoes(PASSWORD)).map(lambda t: " ".join(t).encode()),
    )


def replies(shaped: st.SearchStrategy, other: str) -> st.SearchStrategy[Answer]:
    status = st.sampled_from([200] * 12 + [201, 204, 301, 302, 303, 307, 308, 400, 401, 404, 418, 429, 500, 503, 599])
    location = st.one_of(
        st.sampled_from([other, "/v1/elsewhere", f"//127.0.0.1:{other.rsplit(':', 1)[1]}", "javascript:x", "http://[::1", ""]),
        st.text(st.characters(min_codepoint=33, max_codepoint=255), max_size=30),
    )
    return st.builds(
        lambda s, body, loc: Answer(s, body, {"Location": loc} if loc is not None else {}),
        status,
        bodies(shaped),
        st.one_of(st.none(), location),
    )


def sent_alone(script: list[Answer], secret: str) -> str:
    """What the server sent, with every whole spelling of ``secret`` taken out: a piece of the key
    found here came from the server as a piece (fuzzed text), not from a message that cut a key."""
    text = " ".join(a.body.decode("utf-8", errors="replace") + " ".join(a.headers.values()) for a in script)
    for s in sorted(spellings(secret), key=len, reverse=True):
        text = text.replace(s, " ")
    return text


def check(call, url: str, b: LocalServer, secret: str, script: list[Answer]) -> str:
    alone = sent_alone(script, secret)
    try:
        call()
        outcome = "ok"
    except EngineError as e:
        message = str(e)
        leaked = [s for s in forbidden(secret) if s in message and (s in spellings(secret) or s not in alone)]
        assert not leaked, (leaked, message)
        assert url in message and "\n" not in message and len(message) < 2000, message
        outcome = "error"
    assert b.arrivals == [], "a request reached another origin"
    count(f"engine replies ({outcome})")
    return outcome


@settings(max_examples=budget(100))
@given(data=st.data())
def test_openai_engine_over_fuzzed_replies(servers, data):
    a, b = servers
    script = data.draw(st.lists(replies(completions, b.url + "/v1/completions"), min_size=1, max_size=3))
    sent = list(script)
    a.answer = lambda arrival: script.pop(0) if len(script) > 1 else script[0]
    eng = OpenAIEngine(a.url + "/v1", "m", api_key=KEY, tokenizer=Tok(), max_retries=1, backoff_s=0.0, timeout_s=2.0)
    try:
        if data.draw(st.booleans()):
            out = []
            outcome = check(
                lambda: out.extend(eng.generate([Req(text="q")], SamplingParams(max_new_tokens=2))), a.url, b, KEY, sent
            )
            if outcome == "ok":
                g = out[0]
                assert isinstance(g.text, str) and all(math.isfinite(x) for x in g.logprobs) and g.prompt_tokens >= 0
        else:
            check(lambda: eng.score_continuations([Req(text="q")], [["A", "B"]]), a.url, b, KEY, sent)
    finally:
        eng.close()


@settings(max_examples=budget(60))
@given(data=st.data())
def test_sglang_engine_over_fuzzed_replies(servers, data):
    a, b = servers
    shaped = st.one_of(st.lists(maybe(rows), max_size=3), rows)
    script = data.draw(st.lists(replies(shaped, b.url + "/generate"), min_size=1, max_size=3))
    sent = list(script)
    a.answer = lambda arrival: script.pop(0) if len(script) > 1 else script[0]
    eng = SGLangEngine(
        [f"http://grm:{quote(PASSWORD, safe='')}@127.0.0.1:{a.port}"], "m", Tok(), max_retries=1, backoff_s=0.0, timeout_s=2.0
    )
    try:
        which = data.draw(st.sampled_from(["generate", "score", "control"]))
        if which == "generate":
            out = []
            if (
                check(
                    lambda: out.extend(eng.generate([Req(text="q")], SamplingParams(max_new_tokens=2))), a.url, b, PASSWORD, sent
                )
                == "ok"
            ):
                assert len(out[0].token_ids) == len(out[0].logprobs) and all(math.isfinite(x) for x in out[0].logprobs)
        elif which == "score":
            check(lambda: eng.score_continuations([Req(text="q")], [["ab"]]), a.url, b, PASSWORD, sent)
        else:
            check(lambda: eng.update_weights_from_disk("/w", 1), a.url, b, PASSWORD, sent)
    finally:
        eng.close()
