"""What the SGLang run tests check, shared by the CPU stand-in test and the GPU test: the weights a
server serves after each sync, read over SGLang's own HTTP API while the run goes on, against the
trainer's weights in the run's checkpoints.

A watcher polls ``/get_model_info``; when ``weight_version`` changes it asks ``/generate`` for the
log-probs of a fixed token sequence at once (prefill only, ``return_logprob``). A reading counts
only if no update can have slipped in between: the version is the same before and after it, and
in ``meta_info.weight_version`` when the server reports that. Syncs are a training step apart
(tens of seconds), a reading takes well under one.
"""

from __future__ import annotations

import json
import threading
import urllib.request
from pathlib import Path
from typing import Any

# a prompt and answer from the arith-verifier's world: the tokens training moves
PROBE = [
    {"role": "user", "content": "What is 17 + 25?"},
    {"role": "assistant", "content": "17 + 25 = 42. The answer is 42."},
]


RUN_STEPS = 3
"""Steps of the async run: each sync must put a new version on the server."""


def run_args(directory: Path, url: str, weight_sync: str = "broadcast") -> list[str]:
    """``grm run`` arguments of the async arith-verifier run both tests make, rolling out on the
    server at ``url`` with ``weight_sync`` (broadcast or disk); its run directory is ``directory /
    "run"`` (the brevity judge is written beside it). Each test adds its sizes (tokens, batch, pools)."""
    brevity = write_brevity_judge(directory)
    return [
        "run",
        "pipelines/arith-verifier.yaml",
        f"out_dir={directory / 'run'}",
        f"train.steps={RUN_STEPS}",
        "schedule.mode=async",
        "checkpoint.every=1",  # check_served_weights reads every step's weights from its checkpoint
        f"checkpoint.keep={RUN_STEPS}",
        f"judges=[{{spec: builtin:numeric-answer, weight: 1.0}}, {{spec: {brevity}, weight: 0.2}}]",
        f'policy.overrides=["engine={{type: sglang, urls: [{url}], weight_sync: {weight_sync}}}"]',
    ]


def write_brevity_judge(directory: Path) -> Path:
    """A length rule beside the numeric answer: with 8 samples a step the arithmetic alone often
    rewards every sample alike, GRPO's advantages are then 0 and the weights do not move (a step
    that trains nothing cannot show new weights arriving). Response lengths differ in every group."""
    path = directory / "brevity.yaml"
    path.write_text(
        "# Rule verifier: short answers score higher.\n"
        "name: brevity\n"
        'description: "1.0 up to 4 words, falling linearly to 0.0 at 8."\n'
        "mode: rule\n"
        "rule: {type: length, target_tokens: 4}\n"
    )
    return path


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=60) as r:
        return json.loads(r.read())


def post_json(url: str, body: dict[str, Any]) -> Any:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read())


def probe_ids(model_path: str) -> list[int]:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_path)
    return tok(tok.apply_chat_template(PROBE, tokenize=False), add_special_tokens=False)["input_ids"]


def served_logprobs(url: str, ids: list[int]) -> tuple[str | None, list[float]]:
    """(weight version the row reports or None, log-prob of every token after the first)."""
    body = {
        "input_ids": ids,
        "sampling_params": {"max_new_tokens": 0, "temperature": 0.0},
        "return_logprob": True,
        "logprob_start_len": 0,
    }
    meta = post_json(url + "/generate", body)["meta_info"]
    lps = [r[0] for r in meta["input_token_logprobs"] if r[0] is not None]
    assert len(lps) >= len(ids) - 1, meta["input_token_logprobs"]
    return meta.get("weight_version"), lps[-(len(ids) - 1) :]


class WeightWatch:
    """Served log-probs of ``ids`` at every weight version the server announces (see module doc)."""

    def __init__(self, url: str, ids: list[int], poll_s: float = 0.2) -> None:
        self.url, self.ids, self.poll_s = url, ids, poll_s
        self.seen: dict[str, list[float]] = {}  # weight_version -> log-probs, in order of arrival
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> WeightWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join(timeout=60)

    def _version(self) -> str:
        return str(get_json(self.url + "/get_model_info")["weight_version"])

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                before = self._version()
                if before not in self.seen:
                    row_version, lps = served_logprobs(self.url, self.ids)
                    if self._version() == before and row_version in (None, before):
                        self.seen[before] = lps
            except OSError as e:  # the server busy or restarting: try again at the next poll
                self.errors.append(str(e))
            self._stop.wait(self.poll_s)


def checkpoint_weights(run_dir: Path, step: int) -> dict[str, Any]:
    """The trainer's weights after ``step`` batches, from ``checkpoints/step-N`` (DeepSpeed's module
    states, or the torch backend's safetensors)."""
    import torch

    policy = run_dir / "checkpoints" / f"step-{step}" / "policy"
    if (policy / "model.safetensors").exists():
        from safetensors.torch import load_file

        return load_file(str(policy / "model.safetensors"))
    files = sorted(policy.rglob("mp_rank_00_model_states.pt"))
    assert files, f"no model states under {policy}"
    return torch.load(files[0], map_location="cpu", weights_only=False)["module"]


def trainer_logprobs(model: Any, state: dict[str, Any] | None, ids: list[int]) -> list[float]:
    """Log-probs of ``ids[1:]`` under ``model`` with ``state`` loaded (None: as it is), computed the
    way the trainer computes them (``grm.models.weights.token_logprobs``, fp32)."""
    import torch

    from grm.models.weights import token_logprobs

    if state is not None:
        missing, unexpected = model.load_state_dict(state, strict=False)
        assert not unexpected and set(missing) <= {"lm_head.weight"}, (missing, unexpected)
        model.tie_weights()
    x = torch.tensor([ids])
    with torch.no_grad():
        lp, _ = token_logprobs(model, x, torch.ones_like(x))
    return lp[0].tolist()


def check_served_weights(url: str, run_dir: Path, watch: WeightWatch, model_path: str, steps: int, tol: float) -> dict:
    """Versions 1..steps were served in order, each with the trainer's log-probs of the probe within
    ``tol`` (max over tokens), and each step moved them by more than ``2 * tol`` (a version that
    never arrived cannot pass for one that did). Returns the measured gaps for the report."""
    import torch
    from transformers import AutoModelForCausalLM

    versions = [v for v in watch.seen if v.isdigit()]
    assert versions == [str(s) for s in range(1, steps + 1)], (list(watch.seen), watch.errors[-3:])
    info = get_json(url + "/get_model_info")
    assert info["weight_version"] == str(steps), info
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).eval()
    initial = [v for v in watch.seen if not v.isdigit()]
    prev = trainer_logprobs(model, None, watch.ids)
    if initial:  # the server's weights before the first sync are the policy's initial weights
        assert max(abs(a - b) for a, b in zip(watch.seen[initial[0]], prev, strict=True)) < tol
    gaps = {}
    for step in range(1, steps + 1):
        want = trainer_logprobs(model, checkpoint_weights(run_dir, step), watch.ids)
        got = watch.seen[str(step)]
        err = max(abs(a - b) for a, b in zip(got, want, strict=True))
        moved = max(abs(a - b) for a, b in zip(want, prev, strict=True))
        gaps[step] = {"served_vs_trainer": err, "step_moved": moved}
        assert err < tol, (step, err)
        assert moved > 2 * tol, (step, moved)
        prev = want
    return gaps
