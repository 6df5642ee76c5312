"""The model that answered, in a grid (run_grid.py, models/served.py): the judge's served model is held per endpoint
across the grid's cells and per run; when it changes, the cells that call the judge stop with one line, the cells
that do not go on, and --allow-served-model-change completes the grid with the change recorded."""

import json
import re

import pytest

import run_grid
from lexpilot.scripted.served import ServedAs, switching
from tests.helpers.datasets import sample_cases, write_dataset
from tests.helpers.grids import SMALL_GRID_MODELS, small_grid

pytestmark = pytest.mark.slow  # whole grids

JUDGE = "DeepSeek-R1"
NEXT = "deepseek-r2-0901"


@pytest.fixture
def dataset(tmp_path):
    return write_dataset(tmp_path / "three.json", sample_cases()[:3])


def manifests(root) -> dict[str, dict]:
    """Each (model, run)'s manifest, by its evaluated model."""
    found = {}
    for path in sorted((root / "runs").rglob("manifest.json")):
        saved = json.loads(path.read_text(encoding="utf-8"))
        found[saved["models"]["eval"]["model"]] = saved
    return found


def stopped_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if "the served model changed" in line]


def test_a_judge_re_pointed_between_two_grid_invocations_stops_each_runs_judge_cells(
    tmp_path, http, dataset, capsys
):
    """Both runs' LJP gold judged by the id asked for (3 calls each); the provider then answers it as NEXT, and each
    run's DCG meets NEXT at its first judge call (one case at a time: its second question's judgement is never
    asked). The two cells say the same line, said once by the grid; the option completes them: case 1's first
    judgement replayed, 5 judgements asked per run."""
    root = tmp_path / "out"
    assert run_grid.main(small_grid(root, dataset, "--stages", "eval_LJP_gold")) == 0
    http.served_as[JUDGE] = NEXT
    grid = small_grid(root, dataset, "--stages", "eval_LJP_gold", "eval_DCG", "--concurrency", "1")
    capsys.readouterr()
    assert run_grid.main(grid) == 1
    err = capsys.readouterr().err
    said = [line for line in stopped_lines(err) if line.startswith("[grid] 2 cells failed: ")]
    assert len(said) == 1, err
    assert (
        f"served {JUDGE} (3 calls), {NEXT} (1 call)" in said[0] and "--allow-served-model-change" in said[0]
    )
    for model, saved in manifests(root).items():
        assert saved["served_models"]["judge"] == {"calls": {JUDGE: 3, NEXT: 1}, "accepted": [JUDGE]}, model
    assert run_grid.main([*grid, "--allow-served-model-change"]) == 0
    for saved in manifests(root).values():
        assert saved["served_models"]["judge"] == {"calls": {JUDGE: 3, NEXT: 6}, "accepted": [JUDGE, NEXT]}
        assert saved["served_model_changes_allowed"] == [{"role": "judge", "served": NEXT}]
    assert set(manifests(root)) == set(SMALL_GRID_MODELS)


def test_a_judge_switched_halfway_through_a_grid_stops_every_cell_that_asks_it(
    tmp_path, http, dataset, capsys
):
    """Two runs' LJP gold side by side, one case at a time each: the judge's third request on is answered as NEXT.
    Every reply is kept: the judge's served ids in the manifests add up to the judge requests the provider answered,
    3 as asked and the rest NEXT (the one that showed the change, and the other cell's if it was in flight then);
    the cells stop with one line, said once by the grid; the option completes both."""
    http.script = switching(http, [ServedAs(JUDGE, NEXT, 3)])
    root = tmp_path / "out"
    grid = small_grid(root, dataset, "--stages", "eval_LJP_gold", "--concurrency", "1")
    assert run_grid.main(grid) == 1
    err = capsys.readouterr().err
    said = [line for line in stopped_lines(err) if line.startswith("[grid] ")]
    # both cells, unless one had asked its three judgements before the other's first (timing)
    assert len(said) == 1 and re.match(r"\[grid\] (2 cells|model-. run1 LJP gold:) failed: ", said[0]), err
    judged = sum(n for (kind, _), n in http.processed.items() if kind == "ljp_judge")
    counts: dict[str, int] = {}
    for saved in manifests(root).values():
        for model, n in saved["served_models"]["judge"]["calls"].items():
            counts[model] = counts.get(model, 0) + n
    assert counts[JUDGE] == 3 and counts[NEXT] in (1, 2) and sum(counts.values()) == judged
    # each stopped run's manifest knows the refused id, its own calls met it or not: rerun as it is, no judge call is
    # bought (a run whose cell had ended before the change, under load, has nothing left to ask)
    one = re.match(r"\[grid\] (model-.) run1 LJP gold: failed: ", said[0])
    for model, saved in manifests(root).items():
        if one is None or model == one.group(1):
            assert NEXT in saved["served_models"]["judge"]["calls"], model
    assert run_grid.main(grid) == 1
    assert sum(n for (kind, _), n in http.processed.items() if kind == "ljp_judge") == judged
    assert run_grid.main([*grid, "--allow-served-model-change"]) == 0
    assert sum(n for (kind, _), n in http.processed.items() if kind == "ljp_judge") == 2 * 3


def test_a_batch_grid_resumed_after_its_judge_was_re_pointed_stops_and_then_completes(
    tmp_path, http, dataset, capsys
):
    """run_grid.py --batch: both runs' LJP gold judged as asked (3 calls each); then the judge's id is answered as
    NEXT, and each run's DCG collects its first judgements (3 per run, in the cycle's one pooled batch) as NEXT: both
    cells stop with the same line, said once, every reply kept. The option completes them: the first judgements
    replayed from the journals, the 3 second ones asked per run."""
    root = tmp_path / "out"
    fast = ("--batch-poll", "0.05")
    assert run_grid.main(small_grid(root, dataset, "--stages", "eval_LJP_gold", "--batch", *fast)) == 0
    http.served_as[JUDGE] = NEXT
    grid = small_grid(root, dataset, "--stages", "eval_LJP_gold", "eval_DCG", "--batch", *fast)
    capsys.readouterr()
    assert run_grid.main(grid) == 1
    err = capsys.readouterr().err
    said = [line for line in stopped_lines(err) if line.startswith("[grid] 2 cells failed: ")]
    assert len(said) == 1 and f"served {JUDGE} (3 calls), {NEXT} (3 calls)" in said[0], err
    for saved in manifests(root).values():
        assert saved["served_models"]["judge"] == {"calls": {JUDGE: 3, NEXT: 3}, "accepted": [JUDGE]}
    # rerun as it is: the DCG cells are refused again, the finished LJP gold cells stay done
    assert run_grid.main(grid) == 1
    err = capsys.readouterr().err
    assert "[grid] 4 cells: 2 done, 2 failed" in err
    assert "(model-a run1 DCG, model-b run1 DCG)" in stopped_lines(err)[-1]
    assert run_grid.main([*grid, "--allow-served-model-change"]) == 0
    for saved in manifests(root).values():
        assert saved["served_models"]["judge"] == {"calls": {JUDGE: 3, NEXT: 6}, "accepted": [JUDGE, NEXT]}
    assert sum(n for (kind, _), n in http.processed.items() if kind == "dcg_judge") == 2 * 6
