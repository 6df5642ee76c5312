"""The grid says why a cell failed: against a server that cuts every User Model reply at the
configured limit (as SmolLM2 on llama.cpp did at --user-max-tokens 256), run_grid.py says each reason once with
the stage, the case count and the option to change, never advises a rerun that would buy the same failure, and
the display says a failed case as it happens, not only at the end."""

import json
import re
import sys
import time

import pytest

import run_grid
from lexpilot.errors import ONE_SLOT, CaseFailure
from lexpilot.running.failures import Reasons, advice
from tests.helpers.datasets import sample_cases, write_dataset
from tests.helpers.grids import grid_argv
from tests.helpers.reports import json_table

MODELS = ("model-a", "model-b")


@pytest.fixture
def two_cases(tmp_path):
    return write_dataset(tmp_path / "two.json", sample_cases()[:2])


class CutsTheUserModel:
    """Every User Model reply cut at its output limit; on the first judge request of an LJP stage (which a chain
    reaches only after its LexAwN failed), whether the display has already said a failed case."""

    def __init__(self):
        self.said_before_the_end: bool | None = None

    def __call__(self, kind, prompt, body):
        if (
            kind == "user" and body["max_tokens"] <= 256
        ):  # a model that rambles past 256 tokens, not past 2,048
            return {"content": "说" * 40, "finish_reason": "length"}
        if kind == "ljp_judge" and self.said_before_the_end is None:
            self.said_before_the_end = False
            deadline = time.monotonic() + 20  # the display's tick is 0.2 s; slack for a loaded machine
            while time.monotonic() < deadline and not self.said_before_the_end:
                self.said_before_the_end = " failed: User Model" in sys.stderr.getvalue()
                time.sleep(0.05)
        return None


@pytest.mark.slow
def test_a_grid_whose_user_model_replies_are_all_cut_says_why_once_per_reason(
    tmp_path, http, two_cases, capsys
):
    script = http.script = CutsTheUserModel()
    argv = grid_argv(tmp_path / "out", two_cases, "--user-max-tokens", "256", models=MODELS, runs=1)
    assert run_grid.main(argv) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert script.said_before_the_end, "the display said no failed case before the grid's end"
    end = err[err.index("[grid] 10 cells: ") :].splitlines()
    # LexAwN's consultations and DCG's answers both need the User Model: one line per stage, two cases per cell
    reason = (
        r"User Model 'DeepSeek-V4\.1-Flash' at 127\.0\.0\.1:\d+: reply truncated at --user-max-tokens 256 "
        r"\(after 4 attempts\); raise --user-max-tokens if the model needs the room"
    )
    for stage in ("LexAwN", "DCG"):
        lines = [line for line in end if line.startswith(f"[grid] {stage}: ")]
        assert len(lines) == 1, end
        assert re.fullmatch(
            rf"\[grid\] {stage}: 4 cases failed in 2 cells \(model-. run1, model-. run1\): {reason}", lines[0]
        ), lines[0]
    assert end[1:3] == sorted(end[1:3], key=lambda line: "DCG" in line)  # in the order they were met
    # the advice names the option and never says to rerun as it is
    assert end[-1] == (
        "[grid] Raise --user-max-tokens and rerun under a new run id (--run-id, or a grid's --run-ids): a run keeps "
        "the output limits it started with. As it is, a rerun would buy the same failure for 8 of them."
    )
    assert "Rerun the same command to retry" not in err and "rerun the same command to retry" not in err
    # and the advice is right: the same run refuses the raised limit, a new run id with it completes
    raised = grid_argv(tmp_path / "out", two_cases, "--user-max-tokens", "2048", models=MODELS, runs=1)
    assert (
        run_grid.main(raised) == 1 and "this run was started with other settings" in capsys.readouterr().err
    )
    raised[raised.index("--runs") : raised.index("--runs") + 2] = ["--run-ids", "run2"]
    assert run_grid.main(raised) == 0, capsys.readouterr().err


def test_a_transient_failure_says_to_rerun_and_a_cut_reply_says_what_to_change():
    transient = CaseFailure("1", "Judge 'J' at h: HTTP 503 (after 4 attempts)")
    cut = CaseFailure(
        "2", "Evaluated model 'M' at h: reply truncated at --max-tokens 64 (after 4 attempts)", "--max-tokens"
    )
    assert advice([transient]) == "Rerun the same command to retry it; saved cases are kept."
    assert advice([transient, cut]).startswith("Raise --max-tokens and rerun under a new run id")
    assert advice([transient, cut]).endswith("for 1 of them.")
    one_slot = CaseFailure("3", "Evaluated model 'M' at h: stream ended before the reply finished", ONE_SLOT)
    assert advice([transient, one_slot]) == (
        "Send the server fewer requests at once (see why above), then rerun the same command. As it is, a rerun "
        "would buy the same failure for 1 of them; saved cases are kept."
    )


def test_the_evaluated_models_own_cut_replies_are_one_reason_for_every_model():
    """Cells of different evaluated models that failed alike share one line, whatever model each names."""
    reasons = Reasons()
    for model in ("m1", "m2"):
        message = f"Evaluated model '{model}' at h: reply truncated at --max-tokens 64 (after 4 attempts)"
        assert reasons.add(
            "LexAwN", model, f"{model} run1 LexAwN", CaseFailure("1", message, "--max-tokens")
        ) == (model == "m1")
    assert reasons.lines() == [
        "[grid] LexAwN: 2 cases failed in 2 cells (m1 run1, m2 run1): Evaluated model (each cell's model) at h: "
        "reply truncated at --max-tokens 64 (after 4 attempts)"
    ]


class CutsOneCase:
    """Every a1 reply of one case cut at its output limit: that case fails with all four attempts paid for."""

    def __init__(self, marker: str):
        self.marker, self.cut = marker, []  # the prompts whose replies it cut (synchronous or batched)

    def __call__(self, kind, prompt, body):
        if kind == "lexawn" and self.marker in prompt:
            self.cut.append(prompt)
            return {"content": "长" * 50, "finish_reason": "length"}
        return None


ROLES = {"eval": "model-a", "user": "DeepSeek-V4.1-Flash", "judge": "DeepSeek-R1"}


def refusing_grid(tmp_path, http, mode) -> tuple:
    """LexAwN_gen for model-a on three cases, the first case's a1 replies all cut: (the grid run, its display's
    text, the prompts cut, the price file, the output root)."""
    from lexpilot.protocols.catalog import stages_named
    from lexpilot.running.grid.run import start_grid
    from tests.helpers.grids import Terminal

    cases = sample_cases()[:3]
    dataset = write_dataset(tmp_path / "three.json", cases)
    script = http.script = CutsOneCase(cases[0]["complete_consultation"][0]["content"][:40])
    prices = tmp_path / "prices.json"
    prices.write_text(
        json.dumps({m: {"prompt": 1000.0, "completion": 2000.0} for m in ROLES.values()}), "utf-8"
    )
    root = tmp_path / "out"
    options = ["--dataset", str(dataset), "--output-root", str(root), "--prices", str(prices)]
    err = Terminal(tty=False)
    stages = stages_named(["LexAwN_gen"])
    plan = start_grid(
        stages, ["model-a"], ["run1"], [*options, "--max-cost", "1e6", *mode], None, [], err=err
    )
    assert plan.run() == 1
    return plan, err.text, script.cut, prices, root


@pytest.mark.parametrize("mode", [(), ("--batch", "--batch-poll", "0.02")], ids=["sync", "batch"])
def test_every_paid_attempt_of_a_case_that_failed_is_counted_to_the_token(tmp_path, http, capsys, mode):
    """ "Attempts whose replies were refused [...] and the attempts of cases that failed, are kept with their
    usage. They are counted in --usage, in the bill, in --max-cost, and in the quote's expected figure", shown as
    "paid for replies not used", all agreeing with the provider's own count."""
    plan, shown, cut, prices, root = refusing_grid(tmp_path, http, mode)
    billed = {model: dict(counts) for model, counts in http.billed.items()}
    calls = sum(b["calls"] for b in billed.values())
    refused = [len(prompt) for prompt in cut]  # the scripted provider counts a token a character
    assert len(refused) == 4  # the failed case's four a1 attempts, all paid for
    bill = sum((b["prompt_tokens"] * 1000 + b["completion_tokens"] * 2000) / 1e6 for b in billed.values())
    # --max-cost's budget settled every reply at what the provider counted
    assert plan.grid.sharing.budget.spent == pytest.approx(bill, abs=1e-9)
    # the display: calls as the quote counts them, the retries apart (the case's three after its first); spending
    figures = re.findall(
        r"; (\d+) of at most \d+ calls answered \(retries not counted, as the quote counts; (\d+) retries paid "
        r"besides\); spent here (\d+\.\d\d)",
        shown,
    )[-1]
    assert int(figures[0]) + int(figures[1]) == calls and int(figures[1]) == 3
    assert abs(float(figures[2]) - bill) <= 0.005 + 1e-9
    # --usage: per role what the provider billed its model, the refused replies on a line of their own
    # (each row: model, stage file, role, calls, prompt and completion tokens, cost)
    rows = json_table(capsys, "--output-root", str(root), "--usage", "--table", "usage_per_stage")
    for role, model in ROLES.items():
        for column, field in ((3, "calls"), (4, "prompt_tokens"), (5, "completion_tokens")):
            assert sum(r[column] for r in rows if r[2] == role) == billed[model][field], (role, field)
    not_used = [r[2:6] for r in rows if r[1] == "paid for replies not used"]
    assert not_used == [["eval", 4, sum(refused), 4 * 50]]
    # the bill: what --usage --prices says was spent is the provider's own counts at those prices
    argv = ("--output-root", str(root), "--prices", str(prices), "--table", "usage_grid_total")
    total = json_table(capsys, *argv)[-1]  # role, calls, …, cost, what the cache saved
    assert total[:2] == ["all", calls] and float(total[7]) == pytest.approx(bill, abs=0.005)


def test_the_quotes_expected_figure_counts_the_replies_paid_for_and_not_used(tmp_path, http):
    """Refused attempts are counted "[...] in the quote's expected figure": a1's evaluated-model usage per saved case
    (two saved, one failed) includes the failed case's four refused replies."""
    from lexpilot.protocols.catalog import ENTRY_POINTS
    from lexpilot.running.quote import saved_usage_per_case
    from lexpilot.storage.checkpoints import NOT_USED_FILE, run_folder

    _, _, cut, _, root = refusing_grid(tmp_path, http, ())
    steps = [step for stage in ENTRY_POINTS["LexAwN_gen"] for step in stage.steps]
    with_refused = saved_usage_per_case(root, steps)["eval"][0]
    (run_folder(root, "run1", "model-a") / NOT_USED_FILE).rename(tmp_path / "aside.jsonl")
    assert with_refused - saved_usage_per_case(root, steps)["eval"][0] == pytest.approx(
        sum(map(len, cut)) / 2
    )


@pytest.mark.slow
@pytest.mark.parametrize("servers", [True, False], ids=["server-limit", "broken-without-it"])
def test_two_model_ids_on_one_single_slot_server_share_its_limit(tmp_path, monkeypatch, capsys, servers):
    """ "Two model ids on one single-slot llama.cpp server, each concurrency = 1, still got two requests at
    once. [...] Every model on that base URL shares the server's limiter as well as its own." The scripted server
    answers one request at a time as llama-cpp-python's does (a second stream at once gets an empty stream); every
    role is served there. Without the [servers] table (the second case), two requests do meet."""
    from lexpilot.scripted.provider import ScriptedProvider

    dataset = write_dataset(tmp_path / "three.json", sample_cases()[:3])
    with ScriptedProvider(one_slot=True, latency=0.05) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "k")
        spelled = server.base_url.replace("http://", "HTTP://") + "/"  # another spelling of the same server
        grid = tmp_path / "grid.toml"
        grid.write_text(
            "".join(f'[models."{m}"]\nbase_url = "{server.base_url}"\nconcurrency = 1\n\n' for m in MODELS)
            + (f'[servers."{spelled}"]\nconcurrency = 1\n' if servers else ""),
            encoding="utf-8",
        )
        argv = [
            "--grid",
            str(grid),
            "--runs",
            "1",
            "--dataset",
            str(dataset),
            "--output-root",
            str(tmp_path / "o"),
        ]
        code = run_grid.main([*argv, "--stages", "eval_LJP_direct", "--stream", "--retries", "0"])
    err = capsys.readouterr().err
    if servers:
        assert code == 0, err
        assert server.most_active == 1 and server.statuses["cut"] == 0
        assert f"server {server.base_url}: 0 in flight" in err  # the display shows the server's own line
    else:
        assert server.most_active > 1 or server.statuses["cut"] > 0
        if server.statuses[
            "cut"
        ]:  # a cut stream (no retry here) fails its case, saying what to give the server
            assert "stream ended before the reply finished" in err, err
            assert f'[servers."{server.base_url}"] concurrency = 1 in the grid file' in err, err
            assert (
                err.rstrip().splitlines()[-1].startswith("[grid] Send the server fewer requests at once")
            ), err


def test_a_call_past_its_models_limit_waiting_for_the_server_is_counted_as_such():
    """The display's model line says how many of its calls in flight still wait for their server's turn (seen on a
    real llama.cpp grid: the judge '2 in flight' while the one-slot server held one)."""
    import threading

    from lexpilot.models.limits import Limiter, Limits, OnServer

    server = Limiter(1, Limits(concurrency=1))
    judge, user = OnServer(Limiter(4), server), OnServer(Limiter(4), server)
    held = user.acquire(lambda: False, "u")
    got = []
    waiting = threading.Thread(target=lambda: got.append(judge.acquire(lambda: False, "j")))
    waiting.start()
    deadline = time.monotonic() + 10
    while judge.model.server_waits != 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert (judge.model.in_flight, judge.model.server_waits, server.in_flight) == (1, 1, 1)
    user.release(lease=held)
    waiting.join(10)
    assert got and (judge.model.server_waits, server.in_flight) == (0, 1)
    judge.release(lease=got[0])
    assert (judge.model.in_flight, server.in_flight) == (0, 0)


def test_invalid_outputs_are_one_reason_whatever_the_model_wrote():
    """On a real server each cell's invalid judge output was its own summary line, since the
    reason quoted the output. The reason is what comes before the quote; the live line keeps the output."""
    reasons = Reasons()
    for model, raw in (("m1", "'```python\\nimport x'"), ("m2", "'你是一个专务法律顾问'")):
        message = f"judge 'J' at h: judge_lca output invalid after 3 attempts (expected 策略一 or 策略二); last raw output: {raw}"
        reasons.add("LexAwN", model, f"{model} run1 LexAwN", CaseFailure("1", message))
    assert reasons.lines() == [
        "[grid] LexAwN: 2 cases failed in 2 cells (m1 run1, m2 run1): judge 'J' at h: judge_lca output invalid after "
        "3 attempts (expected 策略一 or 策略二)"
    ]
    assert next(iter(reasons.by_key.values())).first.endswith("last raw output: '```python\\nimport x'")
