"""The served models' scopes (models/served.py): a role at its endpoint, shared by a grid's cells, and a role in one
run, seeded from its manifest; the narrowest stop: the role at that endpoint, never another role or model there."""

import pytest

from lexpilot.models.served import ServedModelChanged, ServedModels
from lexpilot.settings import Role

URL = "http://127.0.0.1:9/v1"


def role(name: str, model: str) -> Role:
    return Role(name, model, URL, "sk-test", 0.1)


JUDGE, USER, OTHER_JUDGE = role("judge", "r1"), role("user", "r1"), role("judge", "r1-other")


def test_a_change_seen_by_one_run_stops_that_role_at_that_endpoint_in_every_run_and_nothing_else():
    models = ServedModels()
    assert models.observe(JUDGE, "run-a", "r1-0528", 1, allow=False) == ([], False)  # an alias from the start
    # another run's first judge reply: held to what the endpoint serves the other runs, neither scope accepts it
    assert models.observe(JUDGE, "run-b", "r2", 1, allow=False) == ([], True)
    for run in ("run-a", "run-b", "run-c"):
        with pytest.raises(ServedModelChanged, match=r"served r1-0528 \(1 call\), r2 \(1 call\)"):
            models.check(JUDGE, run)
    models.check(USER, "run-a")  # the same model id asked by another role goes on
    models.check(OTHER_JUDGE, "run-a")  # and another model id at the same server
    # the line is written once, when first said: a later reply does not change it
    models.observe(JUDGE, "run-a", "r2", 3, allow=False)
    with pytest.raises(ServedModelChanged, match=r"r1-0528 \(1 call\), r2 \(1 call\)"):
        models.check(JUDGE, "run-a")


def test_a_run_seeded_with_a_change_it_never_accepted_is_stopped_and_the_option_accepts_it():
    models = ServedModels()
    assert models.seed(JUDGE, "run-a", ["r1"], {"r1": 4, "r2": 2}, allow=False) == []
    with pytest.raises(ServedModelChanged, match=r"served r1 \(4 calls\), r2 \(2 calls\)"):
        models.check(JUDGE, "run-a")
    allowed = ServedModels()
    assert allowed.seed(JUDGE, "run-a", ["r1"], {"r1": 4, "r2": 2}, allow=True) == ["r2"]
    allowed.check(JUDGE, "run-a")
    assert allowed.accepted_in_run("judge", "run-a") == ["r1", "r2"]
    # seeded once per run: a later stage of the run in the same grid keeps this invocation's counts
    assert allowed.seed(JUDGE, "run-a", ["r9"], {"r9": 1}, allow=True) == []
    assert allowed.accepted_in_run("judge", "run-a") == ["r1", "r2"]


def test_a_run_stopped_by_another_runs_change_notes_the_refused_id_so_its_rerun_buys_nothing():
    """Two runs of a grid share the judge's endpoint; run b's calls met the change, run a's were stopped before any
    of them did. Run a's manifest learns the refused id all the same (with no call): rerun, it stops at once."""
    from lexpilot.models.served import ServedCalls

    grid = ServedModels()
    run_a, run_b = (ServedCalls(grid, {"judge": JUDGE}, run, allow=False) for run in ("a", "b"))
    run_a.note("judge", "r1", 2)
    run_b.note("judge", "r1", 1)
    run_b.note("judge", "r2", 1)  # the change: the endpoint stops
    with pytest.raises(ServedModelChanged):
        run_a.check("judge")
    counts, accepted, _ = run_a.take()
    assert counts == {"judge": {"r1": 2, "r2": 0}} and accepted == {"judge": ["r1"]}
    rerun = ServedModels()  # a new process, seeded from run a's manifest
    rerun.seed(JUDGE, "a", accepted["judge"], dict(counts["judge"]), allow=False)
    with pytest.raises(ServedModelChanged):
        rerun.check(JUDGE, "a")


def test_a_run_whose_first_reply_is_the_change_refuses_it_on_its_rerun_too():
    """Two runs of a grid share the judge's endpoint; run a's calls were all served r1 before the change, run b's
    first call met it. Run b's manifest holds r1 as accepted and r2 as refused: rerun alone (run a done), it stops
    at once instead of buying calls from a judge its grid's other cell was not judged by."""
    from lexpilot.models.served import ServedCalls

    grid = ServedModels()
    run_a, run_b = (ServedCalls(grid, {"judge": JUDGE}, run, allow=False) for run in ("a", "b"))
    run_a.note("judge", "r1", 3)
    run_b.note("judge", "r2", 1)  # run b's first reply is the change
    with pytest.raises(ServedModelChanged):
        run_b.check("judge")
    counts, accepted, _ = run_b.take()
    assert accepted == {"judge": ["r1"]} and counts["judge"]["r2"] == 1
    rerun = ServedModels()
    rerun.seed(JUDGE, "b", accepted["judge"], dict(counts["judge"]), allow=False)
    with pytest.raises(ServedModelChanged):
        rerun.check(JUDGE, "b")
