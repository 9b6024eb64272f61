"""``grm eval --policy P --env E`` without a model: a scripted engine (the real SmolLM2 tokenizer,
no weights) plays known calc episodes through the real command line, so the report's success rate
and Wilson interval, end reasons, tool counts, files, resume, the --against paired difference,
judges over trajectories and every bad-input message are checked against known outcomes."""

import json
from types import SimpleNamespace

import pytest

from grm.cli import main
from grm.data.trajectory import Trajectory
from grm.engines.base import Generation
from grm.envs.calc import SPLITS, problem
from grm.evaluation import episode_eval, policy_source
from grm.evaluation import metrics as M
from grm.judges.types import JudgeResult
from tests.unit.envs.test_episodes import BAD_CALL, SMOL, call, tokenizer

HELD = SPLITS["held_out"]
POLICY, OTHER = "smollm2-135m-instruct", "qwen2.5-coder-0.5b-instruct"


def answer(i: int) -> int:
    return problem(HELD[i])[1]


def known(i: int, k: int) -> str:
    """Task i's k-th turn: 0 solves after a calculator call, 1 answers wrong, 2 writes malformed
    calls until the runner ends it, 3 calls the calculator until max_turns, 4 meets a tool error
    and then solves; the pattern repeats from task 5 on."""
    boxed = f"The answer is \\boxed{{{answer(i)}}}."
    return [
        [call("12*3"), boxed][min(k, 1)],
        f"The answer is \\boxed{{{answer(i) + 1}}}.",
        BAD_CALL,
        call("1+1"),
        [call("12 +* 3"), boxed][min(k, 1)],
    ][i % 5]


class Scripted:
    """Says ``script(task index, turn)`` for the request seeded with the task's index (seed 0), as
    the tokenizer's ids then eos; records every generate call's size."""

    model_id, version = "scripted", 0

    def __init__(self, script, crash_at=None):
        self.tokenizer, self.script, self.crash_at = tokenizer(SMOL), script, crash_at
        self.turn, self.calls = {}, []

    def generate(self, requests, sampling):
        if self.crash_at is not None and len(self.calls) == self.crash_at:
            raise RuntimeError("killed")
        self.calls.append(len(requests))
        out = []
        for j, r in enumerate(requests):
            k = self.turn[r.seed] = self.turn.get(r.seed, -1) + 1
            text = self.script(r.seed, k)
            ids = (self.tokenizer(text, add_special_tokens=False)["input_ids"] + [self.tokenizer.eos_token_id])[
                : sampling.max_new_tokens
            ]
            out.append(Generation(text, ids, [-0.1] * len(ids), "stop", 0, len(r.token_ids), j, 0))
        return out


@pytest.fixture
def engines(monkeypatch):
    """POLICY plays ``known``; any other policy always answers wrong. Records what it hands out."""
    made = []
    state = SimpleNamespace(made=made, crash_at=None)

    def load_engine(src, **kw):
        wrong = lambda i, k: f"\\boxed{{{answer(i) + 2}}}"  # noqa: E731
        eng = Scripted(known if src.ref == POLICY else wrong, crash_at=state.crash_at)
        made.append((src.ref, eng))
        return eng

    monkeypatch.setattr(policy_source, "load_engine", load_engine)
    return state


def grm(out, *extra, env="calc", policy=POLICY):
    return main(["eval", "--policy", policy, "--env", env, "--split", "heldout", "--out", str(out), *extra])


def lines(path):
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


# ----------------------------------------------------------------------------- the report


def test_wilson_interval_of_known_outcomes_and_undecided_left_out():
    two_of_five = M.success_rate([1.0, 0.0, 1.0, 0.0, 0.0, None])
    assert (two_of_five["n"], two_of_five["successes"], two_of_five["masked"], two_of_five["rate"]) == (5, 2, 1, 0.4)
    assert two_of_five["ci95"] == pytest.approx((0.1176, 0.7693), abs=1e-4)  # Wilson 95%, hand computed
    all_three = M.success_rate([1.0, 1.0, 1.0])
    assert all_three["rate"] == 1.0 and all_three["ci95"] == pytest.approx((0.4385, 1.0), abs=1e-4)
    assert M.success_rate([0.0, 0.0, 0.0])["ci95"][0] == 0.0 and all_three["ci95"][1] == 1.0  # exact, not 1e-17 off
    assert M.success_rate([None])["n"] == 0 and M.success_rate([None])["masked"] == 1


def test_known_episodes_give_the_reported_success_end_reasons_tools_and_files(tmp_path, engines, capsys):
    out = tmp_path / "ev"
    assert grm(out, "--limit", "5", "--batch-size", "5") == 0
    printed = capsys.readouterr().out
    resp = lines(out / "responses.jsonl")
    assert [x["id"] for x in resp] == [f"held_out-{i}" for i in range(5)] and {x["side"] for x in resp} == {"policy"}
    trajs = [Trajectory.from_dict(x) for x in resp]  # one whole trajectory a line
    assert [t.end_reason for t in trajs] == ["done", "done", "bad_tool_call", "max_turns", "done"]
    assert [t.signals["success"] for t in trajs] == [1.0, 0.0, 0.0, 0.0, 1.0]
    assert [t.task.row["seed"] for t in trajs] == list(HELD[:5])  # held-out tasks, in order
    assert engines.made[0][1].calls == [5, 4, 2, 1]  # lockstep: task 1 ends first, task 3 at max_turns (4)

    s = json.loads((out / "summary.json").read_text())
    sm = s["sides"]["policy"]
    assert sm["success"]["rate"] == 0.4 and sm["success"]["successes"] == 2 and sm["success"]["masked"] == 0
    assert sm["success"]["ci95"] == pytest.approx([0.1176, 0.7693], abs=1e-4)
    assert sm["end_reasons"] == {"done": 3, "max_turns": 1, "bad_tool_call": 1}
    assert sm["tool_errors"] == 1 and sm["bad_tool_calls"] == 3  # two answered by the env, the third ends it
    assert sm["tool_calls"] == 1 + 4 + 1 and sm["turns"]["mean"] == (2 + 1 + 3 + 4 + 2) / 5
    assert s["split"] == "held_out" and s["env"]["target"] == "grm.envs.calc:CalcEnv" and s["comparison"] is None
    report = (out / "report.md").read_text()
    assert "0.400 [0.118, 0.769] (2/5)" in report and "bad_tool_call" in report
    assert "success [95% CI]" in printed and "0.400 [0.118, 0.769] (2/5)" in printed
    assert (out / "config.resolved.yaml").exists() and not (out / "results.jsonl").exists()


def test_an_env_failure_is_no_signal_and_named_and_a_yaml_env_block_sets_kwargs_and_limits(tmp_path, engines):
    (tmp_path / "flaky.py").write_text(
        "from grm.envs.calc import SPLITS, CalcEnv, task_rows\n\n"
        "class FlakyCalc(CalcEnv):\n"
        "    def reset(self, row):\n"
        "        if row['seed'] == SPLITS['held_out'][1]:\n"
        "            raise RuntimeError('no such problem today')\n"
        "        return super().reset(row)\n"
    )
    (tmp_path / "env.yaml").write_text("env:\n  type: python\n  path: flaky.py:FlakyCalc\n  max_turns: 2\n")
    out = tmp_path / "ev"
    assert grm(out, "--limit", "4", env=str(tmp_path / "env.yaml")) == 0
    s = json.loads((out / "summary.json").read_text())
    assert s["env"]["target"] == f"{(tmp_path / 'flaky.py').resolve()}:FlakyCalc"  # relative to the YAML, recorded whole
    sm = s["sides"]["policy"]
    assert sm["end_reasons"] == {"done": 1, "max_turns": 2, "env_error": 1}  # task 2's third bad call never comes
    assert sm["success"]["n"] == 3 and sm["success"]["masked"] == 1 and sm["success"]["successes"] == 1
    assert sm["env_errors"][0]["id"] == "held_out-1" and "no such problem today" in sm["env_errors"][0]["detail"]
    assert "no such problem today" in (out / "report.md").read_text()
    # --env-arg goes to the constructor: CalcEnv's own turn limit (1) now ends task 3 after one turn, as done
    assert grm(tmp_path / "ev2", "--limit", "4", "--env-arg", "max_turns=1", env=str(tmp_path / "env.yaml")) == 0
    trajs = [Trajectory.from_dict(x) for x in lines(tmp_path / "ev2" / "responses.jsonl")]
    assert trajs[3].end_reason == "done" and trajs[3].signals["hit_max_turns"] == 1.0


# ----------------------------------------------------------------------------- resume, against, judges


def test_a_crash_mid_run_resumes_with_only_the_missing_episodes(tmp_path, engines, capsys):
    out = tmp_path / "ev"
    engines.crash_at = 2  # batch 1 (tasks 0-1) finished in two generate calls; batch 2 dies at once
    with pytest.raises(RuntimeError, match="killed"):
        grm(out, "--limit", "4", "--batch-size", "2")
    assert [x["id"] for x in lines(out / "responses.jsonl")] == ["held_out-0", "held_out-1"]
    engines.crash_at = None
    assert grm(out, "--limit", "4", "--batch-size", "2") == 0
    assert "resuming: 2 of 4 episodes" in capsys.readouterr().err
    assert sorted(x["id"] for x in lines(out / "responses.jsonl")) == [f"held_out-{i}" for i in range(4)]
    n = len(engines.made)
    assert grm(out, "--limit", "4", "--batch-size", "2") == 0 and len(engines.made) == n  # all done: no model
    assert grm(out, "--limit", "4", "--temperature", "0.7") == 2  # other sampling: refused
    assert "sampling" in capsys.readouterr().err


def test_against_gives_the_paired_success_difference(tmp_path, engines):
    out = tmp_path / "ev"
    assert grm(out, "--limit", "5", "--against", OTHER) == 0
    s = json.loads((out / "summary.json").read_text())
    assert s["sides"]["other"]["success"]["successes"] == 0 and s["sides"]["other"]["end_reasons"] == {"done": 5}
    d = s["comparison"]["success"]
    assert d["n"] == 5 and d["mean"] == pytest.approx(0.4) and (d["policy_only"], d["other_only"]) == (2, 0)
    assert d["ci95"][0] >= 0.0 and d["ci95"][1] <= 1.0 and d["ci95"][0] <= 0.4 <= d["ci95"][1]
    assert "only POLICY 2, only OTHER 0" in (out / "report.md").read_text()


class TurnJudge:
    """Pointwise: an episode's assistant turns; masked when it has no final answer."""

    spec = SimpleNamespace(name="turns", mode="pointwise")
    spec_hash = "h1"

    def __init__(self):
        self.seen = []

    def score_batch(self, samples):
        self.seen += samples
        return [
            JudgeResult("turns", score=float(sum(t.role == "assistant" for t in s.trajectory.turns)))
            if s.trajectory.final_answer is not None
            else JudgeResult("turns")
            for s in samples
        ]


def test_pointwise_judges_score_the_trajectories_once(tmp_path, engines, monkeypatch):
    judge = TurnJudge()
    monkeypatch.setattr(episode_eval, "load_judges", lambda refs, ov: [judge])
    out = tmp_path / "ev"
    assert grm(out, "--limit", "5") == 0
    assert [s.id for s in judge.seen] == [f"policy/held_out-{i}" for i in range(5)]
    first = judge.seen[0]
    assert first.trajectory.task.row["seed"] == HELD[0] and first.response == first.trajectory.final_answer
    jm = json.loads((out / "summary.json").read_text())["sides"]["policy"]["judges"]["turns"]
    assert (jm["n"], jm["masked"], jm["mean"]) == (3, 2, pytest.approx((2 + 1 + 2) / 3))  # tasks 2, 3 never answered
    assert len(lines(out / "results.jsonl")) == 5
    assert grm(out, "--limit", "5") == 0 and len(judge.seen) == 5  # resumed: nothing judged twice


# ----------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        ([], "nosuch", "--env nosuch: type 'nosuch' is neither python nor a shipped environment (calc"),
        (["--env-arg", "bogus=1"], "calc", "CalcEnv(**{'bogus': 1}) raised TypeError"),
        (["--env-arg", "max_turns=0"], "calc", "max_turns: Input should be greater than or equal to 1 (got 0)"),
        (["--env-arg", "max_turns"], "calc", "--env-arg 'max_turns': expected KEY=VALUE"),
        (["--split", "nosuch"], "calc", "env 'calc' has no split 'nosuch' (its splits: train ("),
        ([], "missing.py:Env", "missing.py not found"),
        ([], "grm.envs.tools:CalculatorTool", "does not implement the Environment protocol"),
        ([], "tests.unit.evaluation.test_policy_episodes:NoTasks", "NoTasks offers no tasks (define task_rows"),
        (["--prompts", "builtin:arith-prompts"], "calc", "runs episodes: --prompts do not apply"),
        (["builtin:pairwise-logprob"], "calc", "compares trajectories"),
    ],
)
def test_bad_input_is_one_named_line_and_exit_2(tmp_path, engines, capsys, args, env, message):
    assert grm(tmp_path / "ev", *args, env=env) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and err.count("\n") == 1
    assert engines.made == []


class NoTasks:
    def reset(self, row): ...

    def step(self, message): ...


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("name: x\n", "env.yaml:1: no env: block"),
        ("env:\n  type: calc\n  max_turns: 0\n", "env.yaml:3: env.max_turns: Input should be greater than or equal to 1"),
        ("env:\n  type: calc\n  turns: 3\n", "env.yaml:3: env: unknown key 'turns'"),
    ],
)
def test_a_bad_env_file_is_named_with_its_line(tmp_path, engines, capsys, text, message):
    (tmp_path / "env.yaml").write_text(text)
    assert grm(tmp_path / "ev", env=str(tmp_path / "env.yaml")) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_env_flags_need_policy_and_episode_flags_need_env(tmp_path, capsys):
    assert main(["eval", "--env", "calc", "--out", str(tmp_path / "a")]) == 2
    assert "--env apply only to evaluating a policy (--policy" in capsys.readouterr().err
    assert main(["eval", "--policy", POLICY, "--prompts", "builtin:arith-prompts", "--split", "x", "--out", str(tmp_path)]) == 2
    assert "--split only apply with --env" in capsys.readouterr().err
