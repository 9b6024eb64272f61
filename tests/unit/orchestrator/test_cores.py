"""Idle cores lent between a run's processes on one node (``grm.orchestrator.cores``): a busy
process takes its proportion of the run's cores among the busy ones, before each forward of the
models it watches, and returns to its share when its phase ends. Several ledgers on one file stand
for several processes here; ``tests/integration/orchestrator/test_run.py`` reads the lent threads
from inside a real async run's policy actor."""

import pytest
import torch

from grm.config.pipeline import ScheduleSpec
from grm.orchestrator.cores import CoreLedger, CoreShare, CoreShares, NoLedger, ledger, remove


@pytest.fixture
def threads():
    """Torch threads restored after a test that lets a ledger change them."""
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def ledgers(tmp_path, *shares: int) -> list[CoreLedger]:
    return [CoreLedger(CoreShare("run", slot, n), tmp_path) for slot, n in enumerate(shares)]


def test_a_busy_process_takes_the_cores_of_those_that_wait(tmp_path):
    policy, judge = ledgers(tmp_path, 1, 1)
    assert policy.threads() == judge.threads() == 1  # idle: its own share
    with judge.busy():
        assert judge.threads() == 2  # the policy waits: its core is lent
        with policy.busy():
            assert judge.threads() == policy.threads() == 1  # both busy: each its share
        assert judge.threads() == 2
    assert judge.threads() == 1


def test_cores_are_lent_in_proportion_to_shares_and_never_below_ones_own(tmp_path):
    big, small, idle = ledgers(tmp_path, 2, 1, 1)
    with big.busy(), small.busy():
        assert (big.threads(), small.threads()) == (2, 1)  # 4 cores among shares 2 + 1: floor, never more than 4
    with small.busy():
        assert small.threads() == 4
    with big.busy():
        assert big.threads() == 4
    assert idle.threads() == 1


def test_nested_busy_counts_once(tmp_path):
    a, b = ledgers(tmp_path, 1, 1)
    with a.busy():
        with a.busy():
            pass
        assert b.map[2 * a.share.slot + 1] == 1  # still busy after the inner call
    assert b.map[2 * a.share.slot + 1] == 0


def test_forward_hook_sets_the_threads_and_the_share_returns_after_the_phase(tmp_path, threads):
    torch.set_num_threads(1)
    lender, borrower = ledgers(tmp_path, 1, 1)
    model = torch.nn.Linear(4, 4)
    seen = []
    model.register_forward_hook(lambda *_: seen.append(torch.get_num_threads()))
    borrower.watch(model, model, None)  # repeats and None skipped: one hook
    assert len(model._forward_pre_hooks) == 1
    x = torch.ones(1, 4)
    with borrower.busy():
        model(x)
        with lender.busy():
            model(x)
        model(x)
    model(x)  # between phases: its share
    assert seen == [2, 1, 2, 1]
    assert torch.get_num_threads() == 1
    assert borrower.take_peak() == 2 and borrower.take_peak() == 1  # the peak since the last reading


def test_layers_refresh_in_forward_and_backward(tmp_path, threads):
    """A training micro-batch: the threads follow the ledger layer by layer, in the backward too."""
    torch.set_num_threads(1)
    lender, borrower = ledgers(tmp_path, 1, 1)
    model = torch.nn.Sequential(torch.nn.ModuleList([torch.nn.Linear(4, 4) for _ in range(3)]))
    model.forward = lambda x: model[0][2](model[0][1](model[0][0](x)))
    borrower.watch(model)
    seen = []
    for layer in model[0]:
        layer.register_forward_hook(lambda *_: seen.append(("fwd", torch.get_num_threads())))
    x = torch.ones(1, 4)
    with borrower.busy():
        y = model(x).sum()
        phase = lender.busy()
        phase.__enter__()  # the lender's phase starts while the borrower trains
        grads = []
        model[0][0].weight.register_hook(lambda g: grads.append(torch.get_num_threads()))
        y.backward()
        phase.__exit__(None, None, None)
    assert seen == [("fwd", 2)] * 3
    assert grads == [1]  # the core went back before the first layer's backward


def test_the_runs_ledger_file_is_removed_at_its_end(tmp_path):
    c = CoreLedger(CoreShare("other", 0, 1), tmp_path)
    remove("other", tmp_path)
    assert not c.path.exists()
    with pytest.raises(ValueError, match="slot"):
        CoreLedger(CoreShare("run", 10_000, 1), tmp_path)


def test_shares_only_when_phases_overlap_and_lending_is_on():
    assert ScheduleSpec(mode="async").lends_cores
    assert ScheduleSpec(mode="sync", stream_prompts=2).lends_cores
    assert not ScheduleSpec(mode="sync").lends_cores  # phases run alone and take the node's cores instead
    assert not ScheduleSpec(mode="sync", sync_threads="pool").lends_cores
    assert not ScheduleSpec(mode="async", overlap_threads="pool").lends_cores
    off, on = CoreShares(False), CoreShares(True)
    assert off(1) is None and isinstance(ledger(off(1)), NoLedger)
    a, b = on(1), on(2)
    assert a.key == b.key and (a.slot, b.slot) == (0, 1) and b.threads == 2
