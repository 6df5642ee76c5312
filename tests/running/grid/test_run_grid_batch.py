""" "`--batch` pools every cell's requests for one endpoint into shared batch files per cycle: one
upload per endpoint per cycle, not one per cell. The ledger keeps its guarantees per request. A grid's number of
cycles is that of its longest chain of dependent steps, not the sum over cells. `--batch-roles` works as today."

Every grid here is written by the stage scripts' own code through run_grid.py against the scripted provider's batch
API, and compared with the README loop run by hand with --batch, stage by stage."""

import json
import re
from collections import Counter

import pytest

import run_grid
import show_results
from lexpilot.pricing import cost, read_prices
from lexpilot.protocols.catalog import ENTRY_POINTS
from lexpilot.running.stage import stage_main
from lexpilot.storage.checkpoints import run_folder
from tests.helpers.batches import run_batch_files
from tests.helpers.grids import MODELS, README_LOOP, clean_grid, grid_argv, records, small_grid
from tests.helpers.replies import USAGES, VALIDATED, FirstAnswerInvalid
from tests.helpers.stages import SECRET

# kills, Ctrl-C, Redis, browsers or whole grids: left out of the quick loop (-m "not slow")
pytestmark = pytest.mark.slow

JUDGE_AND_USER = ("DeepSeek-R1", "DeepSeek-V4.1-Flash")  # the default judge and User Model ids
POLL = ("--batch-poll", "0.02")


def batch_loop(root, dataset, *extra) -> None:
    """The README's loop with --batch: every stage of every (model, run) by hand, one after another."""
    for run_id in ("run1", "run2"):
        for model in MODELS:
            for script in README_LOOP:
                for stage in ENTRY_POINTS[script]:
                    argv = ["--run-id", run_id, "--model", model, "--dataset", str(dataset)]
                    argv += ["--output-root", str(root), "--batch", *POLL, *extra]
                    assert stage_main(stage, "test", argv=argv) == 0


def ledgers(root) -> dict:
    """(model, run id) -> its batches.json."""
    found = {}
    for path in root.glob("runs/*/*/batches.json"):
        model = next(m for m in MODELS if path.parent.name.startswith(f"{m}-"))
        found[(model, path.parent.parent.name)] = json.loads(path.read_text(encoding="utf-8"))
    return found


def batch_ids(ledger: dict, *roles: str) -> list[str]:
    return [b["batch_id"] for b in ledger["batches"] if b["role"] in roles]


def summary_numbers(err: str) -> tuple[int, int]:
    found = re.search(r"batch mode: (\d+) cycles?, (\d+) batch", err)
    assert found, err
    return int(found[1]), int(found[2])


def test_a_pooled_grid_writes_what_the_batch_loop_writes_in_one_batch_per_endpoint_and_cycle(
    tmp_path, http, three_cases, capsys
):
    batch_loop(tmp_path / "loop", three_cases)
    by_hand, loop_batches = Counter(http.processed), len(http.batches)
    http.processed.clear()
    assert run_grid.main(grid_argv(tmp_path / "grid", three_cases, "--batch", *POLL)) == 0
    cycles, batches = summary_numbers(capsys.readouterr().err)
    # the same requests, each answered once, and the same records byte for byte (usage says batched in both)
    assert http.processed == by_hand
    assert records(tmp_path / "grid") == records(tmp_path / "loop") and len(records(tmp_path / "loop")) == 60
    made = list(http.batches.values())[loop_batches:]
    assert all(n == 1 for n in http.submitted.values())  # every custom id in one batch only
    assert len(made) == batches
    assert all(len({line["body"]["model"] for line in b["_lines"]}) == 1 for b in made)  # one model each
    grid = ledgers(tmp_path / "grid")
    assert len(grid) == 6
    one = grid[("model-a", "run1")]
    # each stage's cycles as the loop counts them: LexAwN_gen's 12, DCG's 5, Direct's and Gold-Standard's 2 each,
    # Interaction-Based LJP's 1; every chain the same
    assert one["cycles"] == {"LexAwN": 12, "DCG": 5, "LJP direct": 2, "LJP gold": 2, "LJP interaction": 1}
    assert all(ledger["cycles"] == one["cycles"] for ledger in grid.values())
    # the stages side by side write one manifest: each notes its last submitting cycle, none over another's
    for path in (tmp_path / "grid").glob("runs/*/*/manifest.json"):
        assert json.loads(path.read_text(encoding="utf-8"))["batches_submitted"] == one["cycles"]
    # a chain's stages side by side: only Interaction-Based LJP reads LexAwN's records, and it is asked in the
    # cycle after LexAwN's last; DCG, Direct and Gold-Standard end within LexAwN's 12. So 12 + 1, not the 22 of
    # one stage after another, and (lockstep) not the six chains' sum
    assert cycles == 12 + 1
    # each cycle one batch per endpoint, whatever stages ask it: the User Model's and the judge's hold every chain's
    # requests, each evaluated model's those of its two runs; so by hand, from one chain's batches:
    shared = {role: set(batch_ids(one, role)) for role in ("eval", "user", "judge")}
    assert batches == len(MODELS) * len(shared["eval"]) + len(shared["user"]) + len(shared["judge"])
    assert len(shared["eval"]) <= cycles and len(shared["judge"]) <= cycles
    for ledger in grid.values():
        assert batch_ids(ledger, "user", "judge") == batch_ids(one, "user", "judge")  # shared by all six
    for model in MODELS:
        assert batch_ids(grid[(model, "run1")], "eval") == batch_ids(grid[(model, "run2")], "eval")
    # the README loop made one batch per cell and cycle (every role on one base URL here): six chains, 22 each
    assert loop_batches == 6 * 22 and batches < loop_batches
    reports = []
    for name in ("loop", "grid"):
        assert show_results.main(["--output-root", str(tmp_path / name), "--dataset", str(three_cases)]) == 0
        reports.append(capsys.readouterr().out)
    assert reports[0] == reports[1] and "model-c" in reports[0]
    assert (
        run_grid.main(grid_argv(tmp_path / "grid", three_cases, "--batch", *POLL)) == 0
    )  # nothing left to do
    assert http.processed == by_hand and len(http.batches) == loop_batches + batches


def test_batch_roles_pool_only_the_roles_named_and_ask_the_others_directly(
    tmp_path, http, three_cases, capsys
):
    """--batch-roles works as today: the User Model asked directly, within the cycles, each reply once."""
    batch_loop(tmp_path / "loop", three_cases, "--batch-roles", "eval,judge")
    by_hand = Counter(http.processed)
    http.processed.clear()
    argv = grid_argv(tmp_path / "grid", three_cases, "--batch", *POLL, "--batch-roles", "eval,judge")
    assert run_grid.main(argv) == 0
    assert http.processed == by_hand
    assert records(tmp_path / "grid") == records(tmp_path / "loop")
    asked = {line["body"]["model"] for b in http.batches.values() for line in b["_lines"]}
    assert "DeepSeek-V4.1-Flash" not in asked  # the User Model's default id: never in a batch


def test_a_chain_that_stops_does_not_hold_the_others_back(tmp_path, http, three_cases, capsys):
    """A cell that stops leaves the lockstep: the other chains' cycles go on without it."""
    root = tmp_path / "grid"
    ledger = run_folder(root, "run1", "model-b") / "batches.json"
    ledger.parent.mkdir(parents=True)
    ledger.write_text("{", encoding="utf-8")  # unreadable: run1 of model-b stops at once
    code = run_grid.main(grid_argv(root, three_cases, "--batch", *POLL, "--stages", "eval_LJP_gold"))
    err = capsys.readouterr().err
    assert code == 1 and "model-b run1 LJP gold" in err and "batches.json: unreadable" in err
    done = sorted(p.parent.relative_to(root).parts for p in root.glob("eval_results/*/*/LJP_gold.jsonl"))
    assert len(done) == 5 and ("eval_results", "run1", ledger.parent.name) not in done  # every other chain


def test_detached_grid_submits_a_cycle_then_a_rerun_collects_it_and_goes_on(
    tmp_path, http, three_cases, capsys
):
    """--batch-detach: each invocation submits the grid's next cycle and leaves, and the exit status is 0; a chain's
    stages that read none of the others submit side by side."""
    http.batch_delay = 30  # the provider takes its time
    stages = ("--stages", "eval_LJP_gold", "eval_LJP_direct")
    argv = grid_argv(tmp_path / "grid", three_cases, "--batch-detach", *POLL, *stages)
    assert run_grid.main(argv) == 0
    err = capsys.readouterr().err
    # by hand: Direct and Gold-Standard LJP read neither the other, so each of the six chains has both prediction
    # cycles in flight: 12 cells, each evaluated model's batch holding its 2 runs x 2 stages x 3 cases
    assert "12 cells with batches in flight: rerun the same command" in err and "--batch-status" not in err
    assert err.count("pooled with 3 other cells, 12 requests in all") == 12
    first = len(http.batches)
    assert first == 3  # one cycle: one batch per evaluated model
    assert run_grid.main(argv) == 0  # still in flight: nothing new submitted
    assert len(http.batches) == first
    assert (
        stage_main(ENTRY_POINTS["eval_LJP_gold"][0], "test", argv=by_hand(tmp_path / "grid", three_cases))
        == 2
    )
    assert "3 requests of this stage are in batches still in flight" in capsys.readouterr().err  # its 3 cases
    assert not http.processed  # the synchronous run asked nothing: it would have paid twice
    http.batch_delay = 0
    for batch in http.batches.values():
        batch["_ready"] = 0
    assert run_grid.main([a for a in argv if a != "--batch-detach"] + ["--batch"]) == 0
    assert all(n == 1 for n in http.submitted.values())
    for name in ("LJP_gold", "LJP_direct"):
        assert len(list((tmp_path / "grid").glob(f"eval_results/*/*/{name}.jsonl"))) == 6


def by_hand(root, dataset) -> list[str]:
    return ["--run-id", "run1", "--model", "model-a", "--dataset", str(dataset), "--output-root", str(root)]


@pytest.mark.parametrize("stages", [("eval_LJP_gold",), ("eval_LJP_gold", "eval_LJP_direct")])
def test_a_cell_whose_ledger_is_lost_re_attaches_its_lines_of_the_pooled_batch(
    tmp_path, http, three_cases, capsys, stages
):
    """A pooled batch carries no run, model or stage: after a lost ledger, the cell finds the grid's batches under
    its output root by their metadata and takes the lines that carry its run's incarnation, never asking twice
    (each stage of the run its own lines, when two stages of it share a batch)."""
    clean = tmp_path / "clean"
    assert run_grid.main(grid_argv(clean, three_cases, "--batch", *POLL, "--stages", *stages)) == 0
    clean_requests = Counter(line["body"]["model"] for b in http.batches.values() for line in b["_lines"])
    since, http.batch_delay = len(http.batches), 30
    argv = grid_argv(tmp_path / "grid", three_cases, "--batch-detach", *POLL, "--stages", *stages)
    assert run_grid.main(argv) == 0
    lost = run_folder(tmp_path / "grid", "run2", "model-c") / "batches.json"
    lost.unlink()
    http.batch_delay = 0
    for batch in http.batches.values():
        batch["_ready"] = 0
    capsys.readouterr()
    assert run_grid.main([a for a in argv if a != "--batch-detach"] + ["--batch"]) == 0
    err = capsys.readouterr().err
    assert re.search(
        r"\[model-c run2 LJP gold\] re-attached batch batch-\d+ from the provider.s list \(3 requests of this run\)",
        err,
    )
    again = Counter(
        line["body"]["model"] for b in list(http.batches.values())[since:] for line in b["_lines"]
    )
    assert again == clean_requests  # nothing asked twice
    assert records(tmp_path / "grid") == records(clean)


def test_max_cost_caps_the_grid_with_each_batch_settled_at_its_real_cost_when_collected(
    tmp_path, http, three_cases, capsys
):
    """ "--max-cost caps the whole grid's spending: synchronous and batch calls". A batch is reserved at its
    worst case before it is submitted and settled at what its replies report when collected, so a cap above what
    the grid spends plus the worst case of its last cycle lets it finish, where the worst cases of both cycles of
    Gold-Standard LJP (the prediction, then the judge) would not fit."""
    prices = tmp_path / "prices.json"
    price = {"prompt": 100, "completion": 400, "batch_discount": 0.5}  # the figures shown with two decimals
    prices.write_text(json.dumps(dict.fromkeys(("model-a", "model-b", "model-c", *JUDGE_AND_USER), price)))
    argv = ["--batch", *POLL, "--stages", "eval_LJP_gold", "--prices", str(prices)]
    assert run_grid.main(grid_argv(tmp_path / "free", three_cases, *argv)) == 0
    shown = capsys.readouterr().err
    table = read_prices(prices)
    # by hand, from the requests the provider saw: each one's worst case, as the budget reserves it (the prompt at
    # a token a character, the completion at the output limit) ...
    worst = {1: 0.0, 2: 0.0}
    for batch in http.batches.values():
        for line in batch["_lines"]:
            body = line["body"]
            cycle = 2 if body["model"] in JUDGE_AND_USER else 1
            worst[cycle] += cost(
                table[body["model"]], len(body["messages"][0]["content"]), body["max_tokens"], 1.0
            )
    # ... and what the first cycle's replies cost, from the records' usage of the evaluated model
    first = 0.0
    for path in (tmp_path / "free").glob("Force_judge_gen/*/*/a1_force_judge.jsonl"):
        for line in path.read_text(encoding="utf-8").splitlines():
            usage = json.loads(line)["usage"]["eval"]
            first += cost(table["model-a"], usage["prompt_tokens"], usage["completion_tokens"], 1.0)
    assert 0 < first < worst[1]
    # the display counts what the batches answered, at the batch price, against the quote at batch prices
    judged = 0.0
    for path in (tmp_path / "free").glob("eval_results/*/*/LJP_gold.jsonl"):
        for line in path.read_text(encoding="utf-8").splitlines():
            usage = json.loads(line)["usage"]["judge"]
            judged += cost(table["DeepSeek-R1"], usage["prompt_tokens"], usage["completion_tokens"], 1.0)
    quoted = quote_grid_total(three_cases, prices, "Batch high value")
    said = re.findall(r"; spent (\d+\.\d\d) of the quote's (\d+\.\d\d) at most", shown)[-1]
    assert abs(float(said[0]) - (first + judged)) <= 0.005 and float(said[1]) == round(quoted, 2), said
    cap = worst[2] + (first + worst[1]) / 2  # more than first + worst[2]; less than worst[1] + worst[2]
    capsys.readouterr()
    assert run_grid.main(grid_argv(tmp_path / "capped", three_cases, *argv, "--max-cost", f"{cap:.6f}")) == 0
    assert records(tmp_path / "capped") == records(tmp_path / "free")
    below = round(first + worst[2] * 0.5, 2)  # the judge's cycle cannot be reserved whole
    assert run_grid.main(grid_argv(tmp_path / "short", three_cases, *argv, "--max-cost", str(below))) == 1
    err = capsys.readouterr().err
    assert f"--max-cost {below:g}:" in err and "the next call could cost up to" in err


def test_batch_files_hold_every_cells_requests_for_a_model_per_cycle(tmp_path, http, three_cases, capsys):
    """--batch-files: one `vllm run-batch` input file per model and cycle for every cell; each rerun collects the
    outputs and writes the next cycle's, until the grid is done with the records of a --batch grid."""
    stages = ("--stages", "eval_LJP_gold")
    assert run_grid.main(grid_argv(tmp_path / "api", three_cases, "--batch", *POLL, *stages)) == 0
    folder, files = tmp_path / "vllm", []
    argv = grid_argv(tmp_path / "files", three_cases, "--batch-files", str(folder), *stages)
    while True:
        assert run_grid.main(argv) == 0
        answered = run_batch_files(http, folder)
        if not answered:
            break
        files.append(answered)
    # by hand: the prediction asks each evaluated model (3 files, each with both runs), then the judge (1 file)
    assert files == [3, 1]
    assert records(tmp_path / "files") == records(tmp_path / "api")


def test_an_invalid_judge_output_in_a_pooled_grid_is_asked_again_in_the_next_cycle(
    tmp_path, http, three_cases
):
    """The synchronous grid's fault tests (test_run_grid_faults.py) in batch mode: the first answer to every
    judge prompt is prose; each is asked once more, in a later pooled batch, and every case is saved."""
    expected = clean_grid(http, tmp_path / "clean", three_cases, "--batch", *POLL)
    script = http.script = FirstAnswerInvalid()
    assert run_grid.main(small_grid(tmp_path / "out", three_cases, "--batch", *POLL)) == 0
    extra = http.processed - expected
    assert (
        script.total > 0 and not expected - http.processed and {kind for kind, _ in extra} <= set(VALIDATED)
    )
    assert sum(extra.values()) == script.total  # each prose answer asked once more, nothing else
    # every case of every cell saved (which model's cell met a prompt first, and got the prose, is timing's)
    done, clean = records(tmp_path / "out"), records(tmp_path / "clean")
    assert {path: len(lines) for path, lines in done.items()} == {
        path: len(lines) for path, lines in clean.items()
    }


def test_a_malformed_usage_in_a_pooled_grid_is_kept_and_never_bought_again(
    tmp_path, http, three_cases, capsys
):
    expected = clean_grid(http, tmp_path / "clean", three_cases, "--batch", *POLL)
    http.usage_as = USAGES["negative"]
    assert run_grid.main(small_grid(tmp_path / "out", three_cases, "--batch", *POLL)) == 0
    assert http.processed == expected  # every reply kept: nothing bought twice
    err = capsys.readouterr().err
    assert "a reply's usage" in err and "Traceback" not in err
    usages = [u for r in all_records(tmp_path / "out") for u in r["usage"].values() if u.get("calls")]
    assert usages and all(u["unreported_calls"] == u["calls"] for u in usages)


def test_a_key_echoed_in_a_pooled_batch_reaches_no_message_and_no_file(tmp_path, http, three_cases, capsys):
    http.script = lambda kind, prompt, body: f"回复里有密钥 {SECRET}" if kind == "force_judge" else None
    assert run_grid.main(small_grid(tmp_path / "out", three_cases, "--batch", *POLL)) == 0
    assert SECRET not in capsys.readouterr().err
    assert any("[redacted key]" in json.dumps(r, ensure_ascii=False) for r in all_records(tmp_path / "out"))
    for path in (tmp_path / "out").rglob("*"):
        assert not path.is_file() or SECRET not in path.read_text(encoding="utf-8", errors="replace"), path


def all_records(root) -> list[dict]:
    return [json.loads(line) for lines in records(root).values() for line in lines]


def quote_grid_total(dataset, prices, column: str) -> float:
    """A column of quote_grid.py's total row for this file's grid (Gold-Standard LJP, three models, two runs)."""
    import csv
    import io
    from contextlib import redirect_stdout

    import quote_grid

    out = io.StringIO()
    argv = ["--models", *MODELS, "--runs", "2", "--stages", "eval_LJP_gold", "--format", "csv", "--batch"]
    with redirect_stdout(out):
        assert quote_grid.main([*argv, "--dataset", str(dataset), "--prices", str(prices)]) == 0
    rows = list(csv.reader(out.getvalue().splitlines()))
    header = next(r for r in rows if r[1] == "header")
    return float(next(r for r in rows if r[1] == "total")[header.index(column)])


@pytest.fixture
def three_cases(tmp_path):
    from tests.helpers.datasets import sample_cases, write_dataset

    return write_dataset(tmp_path / "three.json", sample_cases()[:3])


def test_a_stage_joins_its_chain_in_the_cycle_its_upstream_finishes(tmp_path, http, three_cases, capsys):
    """The grid's cycles are "that of its longest chain of dependent steps": a stage whose upstream finishes while
    another stage of its chain still asks is replayed at once and asks in the same cycle, not one later.

    LexAwN_gen is taken to its 8th cycle first (--batch-detach, a cycle per invocation). Then LexAwN (4 cycles
    left), Interaction-Based LJP (1, after LexAwN) and DCG (5) run together: DCG's 5 cycles are the longest chain,
    and Interaction-Based LJP asks in DCG's 5th, beside it; joining a cycle later would make 6."""
    one = dict(models=["model-a"], runs=1)
    detach = grid_argv(tmp_path, three_cases, "--batch-detach", *POLL, "--stages", "LexAwN_gen", **one)
    http.batch_delay = 30  # each invocation submits a cycle and leaves; the next finds it answered
    for _ in range(8):
        for batch in http.batches.values():
            batch["_ready"] = 0
        assert run_grid.main(detach) == 0
    for batch in http.batches.values():
        batch["_ready"] = 0
    http.batch_delay = 0
    ledger = json.loads(
        (run_folder(tmp_path, "run1", "model-a") / "batches.json").read_text(encoding="utf-8")
    )
    assert ledger["cycles"] == {"LexAwN": 8}
    capsys.readouterr()
    stages = ("--stages", "LexAwN_gen", "eval_LJP_interaction", "eval_DCG")
    assert run_grid.main(grid_argv(tmp_path, three_cases, "--batch", *POLL, *stages, **one)) == 0
    cycles, _ = summary_numbers(capsys.readouterr().err)
    assert cycles == 5
    ledger = json.loads(
        (run_folder(tmp_path, "run1", "model-a") / "batches.json").read_text(encoding="utf-8")
    )
    assert ledger["cycles"] == {"LexAwN": 12, "DCG": 5, "LJP interaction": 1}


def test_each_stage_of_a_chain_collects_and_says_its_own_batches(tmp_path, http, three_cases, capsys):
    """The stages side by side share their run's ledger, and each collects only its own batches: a request the
    provider failed is said, and asked again, by the stage that asked it (its cell), not by whichever stage of the
    run collected first."""
    failed = set()

    def script(kind, prompt, body):
        if kind == "dcg_judge" and not failed:
            failed.add(prompt)
            return {"status": 500, "error": "the judge is overloaded"}

    http.script = script
    argv = grid_argv(tmp_path, three_cases, "--batch", *POLL, models=["model-a"], runs=1)
    assert run_grid.main(argv) == 0
    said = [line for line in capsys.readouterr().err.splitlines() if "the judge is overloaded" in line]
    assert len(failed) == 1 and len(said) == 1, said
    assert said[0].startswith("[model-a run1 DCG] case ") and "asked again in the next cycle" in said[0], said


def test_a_stage_step_that_fails_leaves_no_journal_line_of_the_next_stage_behind(tmp_path):
    """The stages of a run share one journal writer, and a stage's turn may replace the journal (reading it drops the
    marks of ended calls). A turn that fails after writing to the journal (a failed replay does it, a budget
    stop or an endpoint's refusal too) must leave the writer closed: else the next stage's
    marks and paid replies go into the replaced file, and are bought again."""
    from types import SimpleNamespace

    from lexpilot.running.batch.chain import STOPPED, Turn
    from lexpilot.running.grid.cells import Grid
    from lexpilot.running.grid.chain import GridHost
    from lexpilot.storage.checkpoints import CallJournal, CheckpointWriter

    journal, writer = tmp_path / "calls_journal.jsonl", CheckpointWriter()
    settings = SimpleNamespace(redact=str, output_root=tmp_path)
    cell = SimpleNamespace(status="running", reason="", settings=settings, stage=SimpleNamespace(name="DCG"))
    host = GridHost(SimpleNamespace(spec=Grid))  # a grid's stage: it stops, the chain goes on
    turn = Turn(cell, SimpleNamespace(writer=writer), None, None, host)

    def fails_after_a_call(run):
        with CallJournal(journal, run.writer, set()).marked("judge") as sent:
            sent()
        raise OSError(28, "No space left on device")

    assert turn.step(fails_after_a_call) is STOPPED and cell.status == "failed"
    next_stage = CallJournal(journal, writer, set())  # the marks of the ended call dropped: the file replaced
    next_stage.add("1", "LJP gold", "key", "a paid reply", {"judge": {"calls": 1}})
    assert [json.loads(line)["reply"] for line in journal.read_text(encoding="utf-8").splitlines()] == [
        "a paid reply"
    ]


def test_a_detached_run_whose_stages_batches_finish_apart_says_only_the_waiting_one_in_flight(
    tmp_path, http, three_cases, capsys
):
    """--batch-detach when a run's batches finish at different times (different endpoints): the stage whose batch
    is still out is in flight; the one whose batch was collected is left waiting for the rerun, not counted in
    flight too."""
    one = dict(models=["model-a"], runs=1)
    stages = ("--stages", "LexAwN_gen", "eval_LJP_direct")
    detach = grid_argv(tmp_path, three_cases, "--batch-detach", *POLL, *stages, **one)
    http.batch_delay = 30
    assert run_grid.main(detach) == 0  # cycle 1: both stages ask the evaluated model, in one batch
    for batch in http.batches.values():
        batch["_ready"] = 0
    assert run_grid.main(detach) == 0  # cycle 2: LexAwN asks on, Direct asks the judge to extract
    judge = [b for b in http.batches.values() if b["_lines"][0]["body"]["model"] == "DeepSeek-R1"]
    assert len(http.batches) == 3 and len(judge) == 1
    judge[0]["_ready"] = 0  # the judge's batch is answered, LexAwN's is not
    capsys.readouterr()
    assert run_grid.main(detach) == 0
    err = capsys.readouterr().err
    assert "[grid] 1 cell with batches in flight: rerun the same command" in err, err
    assert "[grid] 2 cells: 0 done" in err, err
    assert re.search(r"\[model-a run1 LJP direct\] batch batch-\d+ \(judge\): completed", err), (
        err
    )  # its lines said
    http.batch_delay = 0
    for batch in http.batches.values():
        batch["_ready"] = 0
    assert run_grid.main([a for a in detach if a != "--batch-detach"] + ["--batch"]) == 0
    assert all(n == 1 for n in http.submitted.values())


def test_a_model_whose_endpoint_takes_no_batches_is_asked_directly_with_batch_false(
    tmp_path, http, three_cases, capsys
):
    """Grid files and batch mode together: one evaluated model lives on an endpoint without a batch API (llama.cpp's
    server, here the scripted provider answering 404 there). Its cells stop with one line naming the grid file's way out;
    with `batch = false` in its [models] table it is asked directly within the cycles, everything else batched."""
    from lexpilot.scripted.provider import ScriptedProvider

    with ScriptedProvider() as local:
        local.batch_refuse = True
        grid_file = tmp_path / "grid.toml"
        table = f'[models."model-c"]\nbase_url = "{local.base_url}"\n'
        grid_file.write_text(table, encoding="utf-8")
        argv = lambda root: grid_argv(
            root, three_cases, "--grid", str(grid_file), "--batch", *POLL, "--stages", "eval_LJP_direct"
        )
        assert run_grid.main(argv(tmp_path / "refused")) == 1
        err = capsys.readouterr().err
        assert (
            "the endpoint refuses the batch API (HTTP 404); leave the role synchronous (--batch-roles without "
            "eval; in a grid, batch = false in its [models] table) or run without --batch" in err
        ), err
        since = len(http.batches)
        grid_file.write_text(table + "batch = false\n", encoding="utf-8")
        assert run_grid.main(argv(tmp_path / "out")) == 0
        # by hand: 3 cases x 2 runs of each model; model-c's predictions asked directly at its own endpoint, the
        # judge's extraction of them in the shared batches beside the other models'
        assert Counter(r["model"] for r in local.requests) == {"model-c": 6} and not local.batches
        batched = Counter(
            line["body"]["model"] for b in list(http.batches.values())[since:] for line in b["_lines"]
        )
        assert batched == {"model-a": 6, "model-b": 6, "DeepSeek-R1": 18}
        capsys.readouterr()
        assert (
            run_grid.main(argv(tmp_path / "none") + ["--batch-roles", "eval"]) == 2
        )  # nothing of it to batch
        err = capsys.readouterr().err.strip()
        assert (
            err.endswith(
                "model-c takes no batches (batch = false in the grid file), so none of its roles "
                "would be batched; run it in a grid without --batch"
            )
            and len(err.splitlines()) == 1
        )
    assert len(list((tmp_path / "out").glob("eval_results/*/*/LJP_direct.jsonl"))) == 6
    # the quote's batch columns price model-c's own calls at the synchronous price, with --batch or without it
    prices = tmp_path / "prices.json"
    price = {"prompt": 100, "completion": 400, "batch_discount": 0.5}
    prices.write_text(json.dumps(dict.fromkeys(("model-a", "model-b", "model-c", *JUDGE_AND_USER), price)))
    quoted = [
        per_model_quote(tmp_path / "q", three_cases, grid_file, prices, *mode) for mode in ((), ("--batch",))
    ]
    assert quoted[0] == quoted[1]
    sync_low, batch_low = quoted[0]["model-c"][1], quoted[0]["model-c"][4]
    other_sync, other_batch = quoted[0]["model-a"][1], quoted[0]["model-a"][4]
    # by hand: model-a's calls all at half price; model-c's own at full price, its judge's at half
    assert other_batch == pytest.approx(other_sync / 2, abs=1e-3) and other_batch < batch_low < sync_low


def per_model_quote(root, dataset, grid_file, prices, *extra) -> dict[str, list[float]]:
    """quote_grid.py's "Per evaluated model" rows: model -> calls, sync low, high, expected, batch low, ..."""
    import io
    from contextlib import redirect_stdout

    import quote_grid

    out = io.StringIO()
    argv = ["--grid", str(grid_file), "--models", *MODELS, "--runs", "2", "--stages", "eval_LJP_direct"]
    argv += ["--format", "csv", *extra]
    with redirect_stdout(out):
        argv += ["--dataset", str(dataset), "--prices", str(prices), "--output-root", str(root)]
        assert quote_grid.main(argv) == 0
    rows = [
        r
        for r in csv_rows(out.getvalue())
        if r[:1] and r[0].startswith("Per evaluated model") and r[1] != "header"
    ]
    return {r[1]: [float(v) if v not in ("none", "n/a") else v for v in r[2:9]] for r in rows}


def csv_rows(text: str) -> list[list[str]]:
    import csv

    return list(csv.reader(text.splitlines()))


def test_calls_asked_directly_in_a_batch_grid_go_out_as_many_at_once_as_a_synchronous_stage_sends(
    tmp_path, http, three_cases
):
    """A model with batch = false (or a role left out of --batch-roles) is asked within the cycles at --concurrency,
    as a synchronous stage asks it, not one case after another (432 cases' calls were once made in a row). One
    run of Direct LJP, three cases: the three predictions reach the model's endpoint before the first is answered."""
    from lexpilot.scripted.provider import ScriptedProvider

    with ScriptedProvider(latency=0.5) as local:
        local.batch_refuse = True
        grid_file = tmp_path / "grid.toml"
        grid_file.write_text(
            f'[models."model-c"]\nbase_url = "{local.base_url}"\nbatch = false\n', encoding="utf-8"
        )
        argv = grid_argv(
            tmp_path, three_cases, "--grid", str(grid_file), "--batch", *POLL, models=["model-c"], runs=1
        )
        assert run_grid.main(argv + ["--stages", "eval_LJP_direct"]) == 0
        assert len(local.arrivals) == 3 and max(local.arrivals) - min(local.arrivals) < 0.5, local.arrivals
