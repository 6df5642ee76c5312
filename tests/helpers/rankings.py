"""Runs with planted differences for the rankings' statistics: groups built from outcomes, and DCG runs the stage
writes against a scripted judge."""

import numpy as np

from lexpilot.reporting.scoring.groups import Group
from lexpilot.reporting.scoring.runs import MetricKey, Run, TaskData
from lexpilot.storage.manifest import Manifest

KEY = MetricKey("DCG", "accuracy")


def group_of(model: str, outcomes: np.ndarray) -> Group:
    """A group of runs from success outcomes (runs × cases) of a per-case accuracy task."""
    cases = [str(i) for i in range(outcomes.shape[1])]
    runs = []
    for i, row in enumerate(outcomes):
        run = Run(f"r{i}", model, Manifest.of({"selected_cases": cases}), model)
        run.tasks["DCG"] = TaskData(
            cases, ["c"] * len(cases), np.stack([row, np.ones_like(row)], axis=1).astype(float)
        )
        run.metrics[KEY] = float(row.mean())
        runs.append(run)
    return Group(model, (), runs)


def plan_script(cases, plan, run_id):
    """The evaluated model's forced questions carry 【对】 on the cases the plan (model -> run -> cases) makes its
    DCG a success; the judge answers 是 to exactly those."""
    firsts = [c["underspecified_consultation"][0]["content"] for c in cases]

    def script(kind, prompt, body):
        if kind == "force_ask":
            case = next(i for i, first in enumerate(firsts) if first in prompt)
            return "【策略二】请问还有哪些事实？" + (
                "【对】" if case in plan[body["model"]][run_id] else "【错】"
            )
        if kind == "dcg_judge":
            return "是" if "【对】" in prompt else "否"
        return None

    return script


def run_dcg(provider, run_id: str, model: str, dataset, root, *extra: str) -> None:
    """The DCG stage of one model and run, in memory against the scripted provider (its script set by the caller)."""
    from lexpilot.protocols.dcg import DCG_STAGE
    from lexpilot.running.stage import stage_main

    argv = [
        "--run-id",
        run_id,
        "--model",
        model,
        "--dataset",
        str(dataset),
        "--output-root",
        str(root),
        *extra,
    ]
    assert stage_main(DCG_STAGE, "t", argv=argv, clients=provider.in_memory_clients()) == 0


def write_dcg_runs(folder, plan, cases: int, judge_of=lambda model: ()):
    """The DCG runs the plan names (model -> run -> the cases it succeeds on), on `cases` synthetic cases, written by
    the stage against the scripted judge under folder/out: (the output root, the dataset). `judge_of(model)`: the
    extra options of a model's runs (another judge)."""
    import json

    import pytest

    from bench.throughput import synthetic_dataset
    from lexpilot.scripted.provider import ScriptedProvider
    from tests.helpers.stages import SECRET

    dataset = folder / "cases.json"
    synthetic_dataset(cases, dataset)
    written = json.loads(dataset.read_text(encoding="utf-8"))
    with pytest.MonkeyPatch.context() as monkeypatch, ScriptedProvider() as provider:
        monkeypatch.setenv("OPENAI_API_KEY", SECRET)
        for model, runs in plan.items():
            for run_id in runs:
                provider.script = plan_script(written, plan, run_id)
                run_dcg(provider, run_id, model, dataset, folder / "out", *judge_of(model))
    return folder / "out", dataset


def experts_labelled(root, dataset, out, experts_fail):
    """Every DCG round of the runs under `root` labelled by two experts as the judge labelled it, but 否 for both
    rounds of the (model, case index) in `experts_fail`: the scored annotation file `--corrected` reads, at `out`."""
    from lexpilot.reporting.validation import agreement as agreement_kit
    from tests.helpers.annotations import exported_items, write_csv

    rows = []
    for row, key, index in list(exported_items(root, dataset, out)):
        if row["task"] == "DCG":
            label = "否" if (key["model"], index) in experts_fail else key["llm_label"]
            rows.append(row | {"annotator_1": label, "annotator_2": label})
    write_csv(out, agreement_kit.ANNOTATION_COLUMNS, rows)
    return out


# three models' DCG runs, 60 cases: by the judge 0.75, 0.50 and 1/6, all three different; the experts fail m-a's
# cases 30-44 which the judge passed, so that corrected m-a ties m-b (0.50) and m-c stays apart
THREE_MODELS = {"m-a": {"r1": range(45)}, "m-b": {"r1": range(30)}, "m-c": {"r1": range(10)}}
THREE_MODELS_CASES = 60
EXPERTS_FAIL_M_A = {("m-a", case) for case in range(30, 45)}


def ranked_dcg_report(folder, *argv: str) -> tuple:
    """THREE_MODELS written by the stage, labelled by the experts, reported by `show_results.py --rank --corrected
    --ci --format csv` with `argv` (--html, --plot …): (the output root, the labels file, what it printed)."""
    import contextlib
    import io

    import show_results

    root, dataset = write_dcg_runs(folder, THREE_MODELS, THREE_MODELS_CASES)
    labels = experts_labelled(root, dataset, folder / "labels.csv", EXPERTS_FAIL_M_A)
    out = io.StringIO()
    report = ["--output-root", str(root), "--rank", "--corrected", str(labels), "--ci", "--format", "csv"]
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        assert show_results.main([*report, *argv]) == 0
    return root, labels, out.getvalue()
