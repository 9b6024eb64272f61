"""The SGLang path end to end on the CPU: grm's sglang engine against a stand-in server that speaks
SGLang's HTTP API over a transformers model (tests/serving/sglang_standin.py).

The engine alone (no Ray): batched, seeded generation, behaviour log-probs, continuation scoring,
weight updates from disk with the served version advancing, a refused update; weight updates by
broadcast over a gloo group the stand-in joins (no file written). Then 3-step async arith-verifier
runs with ``policy.engine: {type: sglang, urls: [stand-in], weight_sync: broadcast|disk}`` (plus a
brevity rule, see ``write_brevity_judge``): after each sync the served weights version advances and
the served log-probs of a fixed sequence equal the trainer's (from the run's checkpoints) within 1e-4."""

import json
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from grm.engines.base import EngineError, SamplingParams
from grm.engines.base import GenerationRequest as Req
from grm.process import free_port
from tests.conftest import ROOT, run_grm
from tests.integration.orchestrator.sglang_checks import (
    RUN_STEPS,
    WeightWatch,
    check_served_weights,
    get_json,
    post_json,
    probe_ids,
    run_args,
    served_logprobs,
    trainer_logprobs,
)

pytestmark = pytest.mark.slow
MODEL = "smollm2-135m-instruct"
STANDIN = ROOT / "tests" / "serving" / "sglang_standin.py"
ENV = {"RAY_AUTH_MODE": "disabled", "RAY_DEDUP_LOGS": "0"}


@pytest.fixture(scope="module")
def standin_server(tmp_path_factory):
    """A stand-in server in its own process, as SGLang would be; one for the module (it takes a
    model load to start)."""
    from grm.engines.openai_api import ServerProcess
    from grm.models import resolve_model

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = [sys.executable, str(STANDIN), "--model-path", resolve_model(MODEL), "--port", str(port)]
    log = tmp_path_factory.mktemp("standin") / "standin.log"
    server = ServerProcess(cmd, url, timeout_s=600, log_path=str(log), health_path="/health")
    yield url
    server.stop()


@pytest.fixture
def standin_url(standin_server):
    """The server as it started, whatever the test before did to it: serving, with the model's own
    weights under weight_version "default"."""
    from grm.models import resolve_model

    post_json(standin_server + "/continue_generation", {})
    post_json(standin_server + "/update_weights_from_disk", {"model_path": resolve_model(MODEL), "weight_version": "default"})
    info = get_json(standin_server + "/get_model_info")
    assert info["weight_version"] == "default" and info["model_path"] == resolve_model(MODEL), info
    return standin_server


def test_engine_against_the_standin(standin_url):
    import torch

    from grm.engines.sglang import SGLangEngine
    from grm.models import resolve_model
    from grm.models.loading import load_model

    model, tok = load_model(MODEL, "fp32")
    eng = SGLangEngine([standin_url], MODEL, tok)
    reqs = [Req(messages=[{"role": "user", "content": "What is 2 + 3?"}]), Req(messages=[{"role": "user", "content": "Hi"}])]
    sp = SamplingParams(n=2, temperature=0.8, max_new_tokens=12, seed=7, stop=("\n",))
    gens = eng.generate(reqs, sp)
    assert [(g.request_index, g.sample_index) for g in gens] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert all(len(g.logprobs) == len(g.token_ids) > 0 and g.version == 0 for g in gens)
    assert all("\n" not in g.text for g in gens)
    assert [g.token_ids for g in eng.generate(reqs, sp)] == [g.token_ids for g in gens]  # seeded per row
    # behaviour log-probs are the model's own log-probs of the sampled tokens
    g = gens[0]
    ids = eng.encode(reqs[0]) + g.token_ids
    want = trainer_logprobs(model, None, ids)[-len(g.token_ids) :]
    assert max(abs(a - b) for a, b in zip(g.logprobs, want, strict=True)) < 1e-4
    # a continuation's score is its teacher-forced log-prob
    [[s5]] = eng.score_continuations(reqs[:1], [[" 5"]])
    cont = eng.tokenize(" 5")
    want = sum(trainer_logprobs(model, None, eng.encode(reqs[0]) + cont)[-len(cont) :])
    assert s5 == pytest.approx(want, abs=1e-4)

    # a disk update reaches the server: its version and its log-probs change, old copies go
    # (named_parameters names a tied LM head once: the update keeps it tied, as a trainer's does)
    sd = {k: v.detach() + 0.01 * torch.randn_like(v) for k, v in model.named_parameters()}
    eng.update_weights(sd, 1)
    info = get_json(standin_url + "/get_model_info")
    assert info["weight_version"] == "1" and info["model_path"].endswith("/v1") and eng.version == 1
    probe = probe_ids(resolve_model(MODEL))
    version, served = served_logprobs(standin_url, probe)
    want = trainer_logprobs(model, sd, probe)
    assert version == "1" and max(abs(a - b) for a, b in zip(served, want, strict=True)) < 1e-4
    assert eng.generate(reqs[:1], SamplingParams(max_new_tokens=2))[0].version == 1

    # a refused update keeps the served weights and the engine's version
    bad = Path(eng.sync_dir) / "broken"
    bad.mkdir()
    with pytest.raises(EngineError, match="no \\*.safetensors"):
        eng.update_weights_from_disk(str(bad), 2)
    assert eng.version == 1 and get_json(standin_url + "/get_model_info")["weight_version"] == "1"
    eng.version = 0  # an engine that believes the server holds other weights than it does
    with pytest.raises(EngineError, match="weights version 1, but the policy is at version 0"):
        eng.generate(reqs[:1], SamplingParams(max_new_tokens=2))
    eng.close()


def test_a_weight_update_during_generation_cuts_the_rows_which_go_on_with_the_new_weights(standin_url):
    """``schedule.interruptible`` at the engine: an update while a generation runs aborts its rows
    (the stand-in's pause, as SGLang's); they go on from their last token once the new weights are
    in. The tokens before the cut are those of the same seeded generation left alone, and each
    token's behaviour log-prob is the teacher-forced one of the weights its version names."""
    import threading

    import torch

    from grm.engines.sglang import SGLangEngine
    from grm.models.loading import load_model

    model, tok = load_model(MODEL, "fp32")
    eng = SGLangEngine([standin_url], MODEL, tok)
    reqs = [Req(messages=[{"role": "user", "content": "Tell me a long story about a dragon and a castle."}])]
    sp = SamplingParams(n=2, temperature=1.0, max_new_tokens=160, seed=11)  # two rows: the server batches them
    t0 = time.perf_counter()
    alone = eng.generate(reqs, sp)
    took = time.perf_counter() - t0
    assert min(len(g.token_ids) for g in alone) > 40, "the stories must be long enough to cut"
    torch.manual_seed(0)
    sd = {k: v.detach() + 0.01 * torch.randn_like(v) for k, v in model.named_parameters()}
    out: dict = {}
    worker = threading.Thread(target=lambda: out.setdefault("gens", eng.generate(reqs, sp)))
    worker.start()
    time.sleep(0.4 * took)  # about 40% of the way through the tokens
    eng.update_weights(sd, 1)
    worker.join(300)
    gens = out["gens"]
    assert all(g.token_versions is not None for g in gens), "the update came after the generation ended"
    ids = [eng.encode(reqs[0]) + g.token_ids for g in gens]
    old = [trainer_logprobs(model, None, x)[-len(g.token_ids) :] for x, g in zip(ids, gens, strict=True)]
    new = [trainer_logprobs(model, sd, x)[-len(g.token_ids) :] for x, g in zip(ids, gens, strict=True)]
    for cut, first, o, n in zip(gens, alone, old, new, strict=True):
        k = cut.token_versions.index(1)
        assert set(cut.token_versions[:k]) == {0} and set(cut.token_versions[k:]) == {1} and cut.version == 0
        assert 0 < k < len(first.token_ids) and cut.token_ids[:k] == first.token_ids[:k]
        assert max(abs(a - b) for a, b in zip(cut.logprobs, o[:k] + n[k:], strict=True)) < 1e-4
        assert max(abs(a - b) for a, b in zip(cut.logprobs[k:], o[k:], strict=True)) > 1e-3  # the new weights' indeed
        assert cut.text == tok.decode(cut.token_ids, skip_special_tokens=True)
    eng.close()


def test_weights_reach_the_standin_by_broadcast_with_no_file_written(standin_url):
    """The policy actor's broadcast path without Ray: the stand-in joins a gloo group hosted by the
    trainer's side, two updates of perturbed weights arrive in 1 MiB buckets (many per update),
    the served version advances and its log-probs equal the trainer's within 1e-4, and no weight
    file is written (the disk path's directory is never made; the served model path is unchanged).
    Servers that refuse to join make the update fall back to disk, with the reason kept."""
    import torch

    from grm.engines.sglang import SGLangEngine
    from grm.models import resolve_model
    from grm.models.loading import load_model
    from grm.orchestrator.weight_broadcast import Broadcaster
    from grm.training.weight_group import weight_buckets

    model, tok = load_model(MODEL, "fp32")
    eng = SGLangEngine([standin_url], MODEL, tok)
    caster = Broadcaster(eng, "gloo", "127.0.0.1")
    probe = probe_ids(resolve_model(MODEL))
    for version in (1, 2):
        sd = {k: v.detach() + 0.01 * version * torch.randn_like(v) for k, v in model.named_parameters()}
        buckets = list(weight_buckets(sd.items(), 1 << 20))
        assert len(buckets) > 10
        caster.push(iter(buckets), version)
        served_version, served = served_logprobs(standin_url, probe)
        want = trainer_logprobs(model, sd, probe)
        assert served_version == str(version) and eng.version == version
        assert max(abs(a - b) for a, b in zip(served, want, strict=True)) < 1e-4
    assert eng.sync_dir is None and get_json(standin_url + "/get_model_info")["model_path"] == resolve_model(MODEL)
    assert eng.generate([Req(token_ids=probe[:5])], SamplingParams(max_new_tokens=2))[0].version == 2
    # servers that cannot join (the stand-in takes gloo only) refuse at once, naming the endpoint, and
    # the weights go by disk instead, this sync and the next
    other = SGLangEngine([standin_url], MODEL, tok)
    refused = Broadcaster(other, "nccl", "127.0.0.1")
    sd = {k: v.detach() + 0.03 * torch.randn_like(v) for k, v in model.named_parameters()}
    start = time.perf_counter()
    refused.push(weight_buckets(sd.items(), 1 << 20), 3)
    assert time.perf_counter() - start < 30 and refused.mode == "disk"
    assert "init_weights_update_group" in refused.fallback and "gloo" in refused.fallback
    served_version, served = served_logprobs(standin_url, probe)
    assert served_version == "3" and get_json(standin_url + "/get_model_info")["model_path"].endswith("/v3")
    assert max(abs(a - b) for a, b in zip(served, trainer_logprobs(model, sd, probe), strict=True)) < 1e-4
    eng.close()
    other.close()


@pytest.mark.timeout(1800)
@pytest.mark.extended
@pytest.mark.parametrize("weight_sync", ["broadcast", "disk"])
def test_async_run_serves_each_synced_version(tmp_path, standin_url, weight_sync):
    from grm.models import resolve_model

    out = tmp_path / "run"
    path = resolve_model(MODEL)
    t0 = time.perf_counter()
    with WeightWatch(standin_url, probe_ids(path)) as watch:
        r = run_grm(
            *run_args(tmp_path, standin_url, weight_sync),
            "algorithm.prompts_per_step=2",
            "algorithm.group_size=4",
            "rollout.max_new_tokens=24",
            "train.micro_batch_size=4",
            timeout=1500,
            env=ENV,
        )
        assert r.returncode == 0, (r.stdout[-3000:], r.stderr[-5000:])
        time.sleep(1.0)  # the last sync's reading
    ms = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines() if x.strip()]
    assert [m["step"] for m in ms] == [1, 2, 3]
    versions = {json.loads(x)["policy_version"] for x in (out / "samples.jsonl").read_text().splitlines()}
    assert 0 in versions and max(versions) >= 1 and versions <= {0, 1, 2}  # async: rollouts from synced weights
    gaps = check_served_weights(standin_url, out, watch, path, steps=RUN_STEPS, tol=1e-4)
    with urllib.request.urlopen(standin_url + "/get_model_info") as resp:
        served_from = json.loads(resp.read())["model_path"]
    if weight_sync == "disk":
        assert served_from.endswith("/v3")
    else:  # no weight file: the server still names the model it started from
        assert served_from == path
    assert json.loads((out / "placement.json").read_text())["policy"]["weight_sync"] == weight_sync
    assert [m["weight_sync_disk"] for m in ms] == [float(weight_sync == "disk")] * RUN_STEPS
    print(f"run {time.perf_counter() - t0:.0f} s; served vs trainer per step: {gaps}")


@pytest.mark.timeout(1800)
@pytest.mark.extended
def test_an_interruptible_async_run_counts_its_tokens_by_version_lag_within_eta(tmp_path, standin_url):
    """η = 2, interruptible: steps 1-2's rollouts generate on the server beside step 0's training,
    and a sync that meets them cuts them (whether one does depends on timing: the engine test above
    makes the cut happen). The run trains its 3 steps, and every step's tokens are counted by
    version lag: shares summing to 1, none older than η."""
    out = tmp_path / "run"
    r = run_grm(
        *run_args(tmp_path, standin_url, "disk"),
        "schedule.max_staleness=2",
        "schedule.interruptible=true",
        "algorithm.prompts_per_step=2",
        "algorithm.group_size=4",
        "rollout.max_new_tokens=64",
        "train.micro_batch_size=4",
        timeout=1500,
        env=ENV,
    )
    assert r.returncode == 0, (r.stdout[-3000:], r.stderr[-5000:])
    ms = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines() if x.strip()]
    assert [m["step"] for m in ms] == [1, 2, 3]
    for m in ms:
        lags = {int(k.rsplit("_", 1)[1]): v for k, v in m.items() if k.startswith("rollout/tokens_lag_")}
        assert lags and max(lags) <= 2 and sum(lags.values()) == pytest.approx(1.0), m
        assert m["staleness_max"] <= 2
    spanning = [m["rollout/spanning_versions"] for m in ms]
    assert all(0.0 <= x <= 1.0 for x in spanning)
    print(
        "spanning versions per step:", spanning, "tokens by lag:", [{k: v for k, v in m.items() if "tokens_lag" in k} for m in ms]
    )


@pytest.mark.timeout(1500)
@pytest.mark.extended
def test_each_rank_launches_its_own_servers_and_rank_0_drives_them(tmp_path):
    """A 2-rank policy with ``engine: {type: sglang, replicas: 2}`` and no urls: rank r launches
    server r (the stand-in, by ``launcher``) in its own bundle, listening on its node's address;
    rank 0 rolls out on both and broadcasts each step's weights to both (no disk fallback)."""
    out = tmp_path / "run"
    engine = f"engine={{type: sglang, replicas: 2, launcher: [{sys.executable}, {STANDIN}], weight_sync: broadcast}}"
    r = run_grm(
        *("run", "pipelines/arith-verifier.yaml", f"out_dir={out}", "train.steps=2", "schedule.mode=sync"),
        *("checkpoint.every=0", "algorithm.prompts_per_step=2", "algorithm.group_size=4", "rollout.max_new_tokens=16"),
        *("train.micro_batch_size=2", "train.backend.ranks=2", "pools.train.cpus=2", f"policy.overrides=['{engine}']"),
        "checkpoint.export=false",
        timeout=1400,
        env=ENV,
    )
    assert r.returncode == 0, (r.stdout[-3000:], r.stderr[-5000:])
    placement = json.loads((out / "placement.json").read_text())
    servers = [placement[f"policy#{k}"]["servers"] for k in range(2)]
    assert [[(s["replica"], s["rank"]) for s in rank] for rank in servers] == [[(0, 0)], [(1, 1)]]
    # the node's address, not loopback: rank 0 may be on another node than the server
    assert all(not s["url"].startswith("http://127.0.0.1:") for rank in servers for s in rank), servers
    ms = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines() if x.strip()]
    assert [m["step"] for m in ms] == [1, 2] and [m["weight_sync_disk"] for m in ms] == [0.0, 0.0]
    samples = [json.loads(x) for x in (out / "samples.jsonl").read_text().splitlines()]
    assert len(samples) == 2 * 8 and {s["policy_version"] for s in samples} == {0, 1}  # step 2 from the synced weights
