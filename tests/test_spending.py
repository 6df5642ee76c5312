"""Where --max-cost's spending is kept (spending.py): an output root's `spending.json`, shared by every process on
the machine that writes the root. "--max-cost caps the grid's total across every shard, every rerun and every stage
script run on the same root. A call that would pass the cap is never sent." Each rule with sums computed by hand."""

import json
import os
import threading

import pytest

from lexpilot.errors import Aborted, HarnessError
from lexpilot.pricing import Budget, BudgetExceeded, Price
from lexpilot.spending import SPENDING_FILE, RootLedger, process_owner


def as_process(root, pid: int) -> RootLedger:
    """The root's ledger as another live process of this machine would hold it."""
    ledger = RootLedger(root)
    ledger.owner = process_owner(pid)
    return ledger


def test_two_processes_on_one_root_share_one_cap(tmp_path):
    # cap 10: this process reserves 6; another (a live one: pid 1) can reserve 4 but not 4.5; this one's call settles
    # at 2.5 (6 given back): 2.5 spent and 4 reserved leave 3.5, so 3.5 fits and 3.6 does not
    here, there = RootLedger(tmp_path), as_process(tmp_path, 1)
    assert here.reserve(6.0, 10.0)[0]
    ok, totals = there.reserve(4.5, 10.0)
    assert not ok and (totals.spent, totals.reserved) == (0.0, 6.0)
    assert there.reserve(4.0, 10.0)[0]
    here.settle(6.0, 2.5)
    assert here.totals().spent == 2.5 and here.totals().reserved == pytest.approx(4.0)
    assert not here.reserve(3.6, 10.0)[0] and here.reserve(3.5, 10.0)[0]


def test_a_rerun_counts_what_earlier_invocations_spent(tmp_path):
    # an invocation spent 7 of 10 and ended; the next, given the same cap, has 3 left: a call of 3.5 is refused
    prices = {"m": Price(1_000_000, 1_000_000, 500_000, 500_000)}  # a token costs 1
    first = Budget(10.0, prices, RootLedger(tmp_path))
    first.settle(first.reserve("m", 3, 2), "m", 3, 4)  # 7 tokens
    first.ledger.close()
    rerun = Budget(10.0, prices, RootLedger(tmp_path))
    assert rerun.spent == 7.0
    with pytest.raises(BudgetExceeded, match="7.0000 spent"):
        rerun.reserve("m", 2, 2)  # its worst case: 4
    assert rerun.reserve("m", 1, 2) == 3.0


def test_a_process_found_gone_has_its_reservations_counted_as_spent(tmp_path):
    # a process killed with 3 reserved (its calls in flight may have been billed): the next process counts the 3 as
    # spent (and says so as reclaimed); its own 1.5 reserved then stays its own
    gone = f"{process_owner().rsplit(':', 2)[0]}:999999999:1"  # no such pid
    (tmp_path / SPENDING_FILE).write_text(
        json.dumps({"spent": 2.0, "reclaimed": 0.0, "reserved": {gone: 3.0}}), encoding="utf-8"
    )
    ledger = RootLedger(tmp_path)
    assert ledger.reserve(1.5, 10.0)[0]
    totals = ledger.totals()
    assert (totals.spent, totals.reserved, totals.reclaimed) == (5.0, 1.5, 3.0)
    # a process of another machine cannot be told gone: kept as reserved
    other = "another-host:1234:5"
    saved = json.loads((tmp_path / SPENDING_FILE).read_text(encoding="utf-8"))
    saved["reserved"][other] = 2.0
    (tmp_path / SPENDING_FILE).write_text(json.dumps(saved), encoding="utf-8")
    assert ledger.totals().reserved == 3.5


def test_a_process_that_ends_gives_back_what_it_left_reserved(tmp_path):
    # batches submitted and left to a later invocation: given back when the process ends, spent when collected
    ledger = RootLedger(tmp_path)
    ledger.reserve(4.0, 10.0)
    ledger.close()
    assert ledger.totals().reserved == 0 and ledger.totals().spent == 0


def test_concurrent_calls_never_pass_the_cap(tmp_path):
    # 4 threads of this process and 4 of another, each asking 0.25 at a time and settling at 0.1, cap 10: a call
    # is sent only while spent and reserved leave room for its 0.25. Alone, 98 calls would go (97 × 0.1 + 0.25 =
    # 9.95; the 99th would need 10.05); together the others' reservations refuse a few more near the end
    sent = []
    lock = threading.Lock()

    def calls(ledger):
        for _ in range(40):
            ok, totals = ledger.reserve(0.25, 10.0)
            assert totals.spent + totals.reserved <= 10.0 + 1e-9
            if ok:
                ledger.settle(0.25, 0.1)
                with lock:
                    sent.append(1)

    ledgers = [RootLedger(tmp_path) for _ in range(4)] + [as_process(tmp_path, 1) for _ in range(4)]
    threads = [threading.Thread(target=calls, args=(ledger,)) for ledger in ledgers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    totals = RootLedger(tmp_path).totals()
    assert totals.reserved == pytest.approx(0) and totals.spent == pytest.approx(0.1 * len(sent))
    assert 98 - 8 <= len(sent) <= 98 and totals.spent <= 10.0


def test_a_spending_file_that_is_not_the_harness_s_is_one_line(tmp_path):
    (tmp_path / SPENDING_FILE).write_text('{"spent": -3, "reserved": {}}', encoding="utf-8")
    with pytest.raises(HarnessError) as e:
        RootLedger(tmp_path).totals()
    said = str(e.value)
    assert "\n" not in said and SPENDING_FILE in said and "delete it" in said


def test_a_root_that_cannot_be_written_is_one_line(tmp_path):
    if os.geteuid() == 0:
        pytest.skip("root writes anywhere")
    tmp_path.chmod(0o500)
    try:
        with pytest.raises(HarnessError, match="cannot keep the spending"):
            RootLedger(tmp_path).reserve(1.0, 10.0)
    finally:
        tmp_path.chmod(0o700)


def test_a_call_waits_while_others_reservations_fill_the_cap_and_fails_only_when_spending_does(tmp_path):
    # cap 10, a token costs 1: a call in flight holds 6 (its worst case); another of worst case 6 fits beside what
    # is spent (0) but not beside the reservation, so it waits; the first settles at 1 and the second goes. A third
    # of worst case 4 finds 1 spent and 6 reserved: it waits too, until the second settles at 6 (7 spent): then
    # 7 + 4 > 10, and it fails, saying so
    prices = {"m": Price(1_000_000, 1_000_000, 500_000, 500_000)}
    budget = Budget(10.0, prices, RootLedger(tmp_path))
    first = budget.reserve("m", 1, 5)
    got: list = []
    second = threading.Thread(target=lambda: got.append(budget.reserve("m", 1, 5, stopped=lambda: False)))
    second.start()
    second.join(0.5)
    assert second.is_alive() and not got  # waiting, not failed
    budget.settle(first, "m", 1, 0)
    second.join(5)
    assert got == [6.0]
    failed: list = []

    def third():
        try:
            budget.reserve("m", 1, 3, stopped=lambda: False)
        except BudgetExceeded as e:
            failed.append(str(e))

    waiting = threading.Thread(target=third)
    waiting.start()
    waiting.join(0.5)
    assert waiting.is_alive()
    budget.settle(6.0, "m", 2, 4)
    waiting.join(5)
    assert failed and "7.0000 spent" in failed[0]
    # a stop ends the wait: the call is not sent (3 reserved beside 7 spent: another 3 fits only once it settles)
    budget.reserve("m", 1, 2)
    with pytest.raises(Aborted):
        budget.reserve("m", 1, 2, stopped=lambda: True)


def test_a_models_replies_raise_its_worst_case_where_its_tokenizer_counts_more(tmp_path):
    # a token costs 1; a call of 100 characters and an output limit of 50 is reserved at 150 at first. Its reply
    # counted 118 prompt tokens (SmolLM2 counts Chinese at 1.18 a character) and 51 completion tokens (llama.cpp
    # reports one past the limit): the model's next call of 100 characters is reserved at 118 + 51 = 169
    prices = {"m": Price(1_000_000, 1_000_000, 500_000, 500_000)}
    budget = Budget(1000.0, prices, RootLedger(tmp_path))
    assert budget.reserve("m", 100, 50) == 150
    budget.learn("m", 100, 50, 118, 51)
    assert budget.reserve("m", 100, 50) == pytest.approx(169)
    budget.learn("m", 100, 50, 90, 20)  # a later, smaller reply lowers nothing
    assert budget.reserve("m", 100, 50) == pytest.approx(169)


def test_a_callers_replies_teach_the_budget(provider):
    # through the caller: the provider counts 3 tokens a character of the prompt "请判断" (3 characters: 9 tokens)
    import dataclasses
    import threading as threads

    from lexpilot.models.calls import ModelCaller
    from lexpilot.models.usage import Usage
    from lexpilot.running.stage import Progress
    from lexpilot.settings import Spending
    from tests.helpers.calls import make_caller

    base = make_caller(provider)
    price = Price(1_000_000, 1_000_000, 500_000, 500_000)
    settings = dataclasses.replace(
        base.settings, spending=Spending({r.model: price for r in base.settings.roles.values()}, 100_000.0)
    )
    caller = ModelCaller(settings, Progress("t", 1, stream=open(os.devnull, "w")), threads.Event())
    provider.usage_as = {"prompt_tokens": 9, "completion_tokens": 2, "total_tokens": 11}
    caller.chat("judge", "请判断", Usage())
    assert caller.budget is not None and caller.budget.learned["DeepSeek-R1"] == (3.0, 0)
