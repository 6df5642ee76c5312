"""Re-judging a saved run with another judge (rejudge.py): no evaluated-model or User Model call, the reused
files byte for byte, the two judges' agreement hand-checked, and a source with missing generations."""

import json
import re

import pytest

import rejudge
import show_results
from lexpilot.benchmark.records import (
    A1,
    DIRECT_PREDICTION,
    FORCE_ASK,
    GOLD_PREDICTION,
    INTERACTION,
)
from lexpilot.running.stage import stage_main
from lexpilot.scripted.replies import default_reply
from tests.helpers.datasets import sample_cases, write_dataset
from tests.helpers.stages import Harness

CASES = sample_cases()[:4]


def second_judge(kind, prompt, body):
    """The other judge disagrees with the first on every LCA label and every DCG decision, and agrees on
    every verdict; the first judge is the scripted default."""
    if body["model"] != "judge-B":
        return None
    first = default_reply(kind, prompt)
    if kind == "lca_judge":
        return {"策略一": "策略二", "策略二": "策略一"}[first]
    if kind == "dcg_judge":
        return {"是": "否", "否": "是"}[first]
    return None


@pytest.fixture
def saved(tmp_path, provider, monkeypatch):
    provider.script = second_judge
    h = Harness(tmp_path, provider, monkeypatch, write_dataset(tmp_path / "four.json", CASES))
    for stage in ("LexAwN", "DCG", "direct", "gold", "interaction"):
        assert h.run(stage) == 0
    return h


def run_rejudge(h, *extra):
    argv = [
        "--run-id",
        "r1-B",
        "--from-run",
        "r1",
        "--model",
        "eval-model",
        "--judge-model",
        "judge-B",
        "--dataset",
        str(h.dataset),
        "--output-root",
        str(h.root),
        *extra,
    ]
    return stage_main(rejudge.STAGE, "test", argv=argv, clients=h.provider.in_memory_clients())


def test_a_rejudged_run_calls_only_the_judge_and_reuses_the_generations_byte_for_byte(saved, provider):
    provider.requests = []
    assert run_rejudge(saved) == 0
    assert set(provider.kinds()) <= {"lca_judge", "dcg_judge", "ljp_judge"} and provider.requests
    assert all(r["model"] == "judge-B" for r in provider.requests)
    for kind in (A1, INTERACTION, FORCE_ASK, DIRECT_PREDICTION, GOLD_PREDICTION):
        original = kind.path(saved.root, "r1", "eval-model-4e88a982").read_bytes()
        assert kind.path(saved.root, "r1-B", "eval-model-4e88a982").read_bytes() == original
    manifest = json.loads(
        next((saved.root / "runs" / "r1-B").glob("*/manifest.json")).read_text(encoding="utf-8")
    )
    assert manifest["rejudged_from"] == "r1" and manifest["models"]["judge"]["model"] == "judge-B"
    provider.requests = []
    assert run_rejudge(saved) == 0 and not provider.requests  # resumed: nothing left to do


def test_the_judge_sensitivity_table_hand_checked(saved, capsys):
    assert run_rejudge(saved) == 0
    lca = {r["case_number"]: r for r in saved.records("eval_results", "LCA_results.jsonl")}
    capsys.readouterr()
    assert show_results.main(["--output-root", str(saved.root), "--resamples", "100"]) == 0
    out = capsys.readouterr().out
    table = out[out.index("Judge sensitivity") :].split("\n\n")[0].splitlines()
    # every label flipped: agreement 0; with k of the n labels 策略一 on one side and n - k on the other,
    # chance agreement is 2k(n-k)/n^2 and kappa = -pe / (1 - pe)
    labels = [j["label"] for r in lca.values() for j in r["judgments"].values()]
    n, k = len(labels), labels.count("策略一")
    pe = 2 * k * (n - k) / n**2
    lca_row = next(line for line in table if " LCA " in f" {line} ")
    assert lca_row.split()[-3:] == [str(n), "0.0%", f"{-pe / (1 - pe):.2f}"]  # κ at Table 12's 2 decimals
    ljp_row = next(line for line in table if " LJP " in f" {line} ")
    assert ljp_row.split()[-2:] == ["100.0%", "1.00"]
    assert "every metric under each judge" in out and "Re-judged − original" in out


def test_a_rejudge_of_a_run_with_missing_generations_says_which_stage_to_run(
    tmp_path, provider, monkeypatch, capsys
):
    h = Harness(tmp_path, provider, monkeypatch, write_dataset(tmp_path / "four.json", CASES))
    assert h.run("LexAwN") == 0 and h.run("DCG") == 0  # no Direct or Gold-Standard prediction yet
    provider.requests = []
    assert run_rejudge(h) == 2
    err = capsys.readouterr().err
    assert (
        "run r1 lacks direct_prediction records for 4 of 4 cases: run eval_LJP_direct.py --run-id r1 first"
        in err
    )
    assert not provider.requests


@pytest.mark.parametrize(
    "flags, named",
    [
        (("--temperature", "0.5"), "generation.temperature: run 0.7, now 0.5"),
        (("--user-model", "other-user"), "models.user.model: run DeepSeek-V4.1-Flash"),
        (("--max-tokens", "100"), "generation.max_tokens: run 8192, now 100"),
    ],
)
def test_a_rejudge_flag_that_contradicts_the_source_runs_generation_settings_is_refused(
    tmp_path, provider, monkeypatch, capsys, flags, named
):
    """The re-judged run records the source run's settings for every role but the judge; a flag
    that contradicts them is refused before any call and before anything is written."""
    h = Harness(tmp_path, provider, monkeypatch, write_dataset(tmp_path / "one.json", sample_cases()[:1]))
    for stage in ("LexAwN", "DCG", "direct", "gold", "interaction"):
        assert h.run(stage) == 0
    provider.requests = []
    capsys.readouterr()
    argv = [
        "--run-id",
        "rj",
        "--from-run",
        "r1",
        "--model",
        "eval-model",
        "--judge-model",
        "other-judge",
        "--dataset",
        str(h.dataset),
        "--output-root",
        str(h.root),
        *flags,
    ]
    assert stage_main(rejudge.STAGE, "test", argv=argv, clients=provider.in_memory_clients()) == 2
    err = capsys.readouterr().err
    assert named in err and "only the judge may differ" in err and not provider.requests
    assert not (h.root / "runs" / "rj").exists()
    argv = [a for a in argv if a not in flags]
    assert stage_main(rejudge.STAGE, "test", argv=argv, clients=provider.in_memory_clients()) == 0


def test_the_interaction_rounds_row_of_the_judge_sensitivity_table(saved, capsys):
    """The re-judged labels of the interaction's rounds (every one flipped by the second judge)
    are compared with the original rounds' labels, item by item, in their own row."""
    assert run_rejudge(saved) == 0
    original = {
        (r["case_number"], x["round"]): x["label"]
        for r in saved.records("AwN_gen", "interaction.jsonl")
        for x in r["rounds"]
        if x.get("label") is not None
    }
    saved.run_id = "r1-B"
    again = {
        (r["case_number"], x["round"]): x["label"]
        for r in saved.records("eval_results", "interaction_labels.jsonl")
        for x in r["rounds"]
    }
    shared = sorted(set(original) & set(again))
    assert shared and all(original[k] != again[k] for k in shared)  # the second judge flips each
    labels = [original[k] for k in shared]
    n, k = len(labels), labels.count("策略一")
    pe = (
        k * (n - k) + (n - k) * k
    ) / n**2  # chance agreement of two raters whose labels are each other's flip
    capsys.readouterr()
    assert show_results.main(["--output-root", str(saved.root), "--resamples", "100"]) == 0
    out = capsys.readouterr().out
    table = out[out.index("Judge sensitivity") :].split("\n\n")[0].splitlines()
    row = next(line for line in table if "interaction rounds" in line)
    kappa = "undefined" if pe == 1 else f"{-pe / (1 - pe):.2f}"
    assert row.split()[-3:] == [str(n), "0.0%", kappa]


def test_a_run_rejudged_by_another_judge_is_read_whole_by_the_reports_and_the_viewer(saved, tmp_path, capsys):
    """The generations a re-judged run copied carry the source run's settings (its judge was another): the reports
    read them as the re-judged run's, and its case page shows every task, each label beside the original judge's."""
    from lexpilot.reporting.scoring.results import load_runs
    from lexpilot.reporting.scoring.runs import saved_records
    from lexpilot.reporting.site.case_sections import esc

    assert run_rejudge(saved) == 0
    (run,) = load_runs(saved.root, None, ["r1-B"])
    assert not [p for p in run.problems if "other settings" in p], run.problems
    source = {r["case_number"]: r for r in saved.records(A1)}
    assert saved_records(run, saved.root, A1) == source and set(run.tasks) >= {
        "LCA",
        "DCG",
        "LJP_direct",
        "LJP_interaction",
    }
    capsys.readouterr()
    assert show_results.main(["--output-root", str(saved.root), "--html", str(tmp_path / "site")]) == 0
    assert "other settings" not in capsys.readouterr().err
    page = (tmp_path / "site" / "case" / "0.html").read_text(encoding="utf-8")
    (section,) = [s for s in page.split('<section class="run"') if "re-judged by judge-B" in s.split(">")[0]]
    reply = source[CASES[0]["case_number"]]["responses"]["underspecified"]["response"]
    assert esc(reply) in section and "DCG: " in section and "Interaction (" in section
    assert section.count("original judge") >= 4  # LCA on both histories, each DCG question, the verdicts
    # the interaction's rounds: the new judge's label beside the original judge's (judge-B flips every LCA label)
    saved.run_id = "r1-B"
    relabelled = {r["case_number"]: r for r in saved.records("eval_results", "interaction_labels.jsonl")}
    rounds = relabelled[CASES[0]["case_number"]]["rounds"]
    for entry in rounds:
        assert esc(f"round {entry['round']}, ") in section
        assert f"{entry['label']}" in section and f"original judge {entry['original_label']}" in section
    assert section.count("(disagree)") >= len(rounds)


@pytest.mark.parametrize(
    "source, run_id, said",
    [("nope", "x", "no run 'nope' of model 'eval-model'"), ("r1", "r1", "--from-run names this run itself")],
)
def test_a_failed_rejudge_leaves_no_run_behind(saved, capsys, source, run_id, said):
    argv = [
        "--run-id",
        run_id,
        "--from-run",
        source,
        "--model",
        "eval-model",
        "--judge-model",
        "judge-B",
        "--dataset",
        str(saved.dataset),
        "--output-root",
        str(saved.root),
    ]
    before = sorted(p.relative_to(saved.root) for p in saved.root.rglob("*"))
    assert stage_main(rejudge.STAGE, "test", argv=argv, clients=saved.provider.in_memory_clients()) == 2
    err = capsys.readouterr().err
    assert said in err and "Traceback" not in err and len(err.strip().splitlines()) <= 2
    assert sorted(p.relative_to(saved.root) for p in saved.root.rglob("*")) == before  # no manifest, no lock


def test_a_rejudged_run_counts_only_its_own_calls_in_the_spending(saved):
    """The generations it copied were paid for by its source run: the re-judged run's usage is its judge's calls,
    and the grid's evaluated-model calls are the source run's, not twice theirs."""
    from lexpilot.reporting.scoring.results import load_runs

    assert run_rejudge(saved) == 0
    runs = {r.run_id: r for r in load_runs(saved.root, None, None)}
    roles = lambda run: {
        role for stage in run.usage.values() for role, used in stage.items() if used["calls"]
    }  # noqa: E731
    calls = lambda run, role: sum(u[role]["calls"] for u in run.usage.values() if role in u)  # noqa: E731
    assert roles(runs["r1-B"]) == {"judge"} and calls(runs["r1"], "eval") > 0
    assert sum(calls(r, "eval") for r in runs.values()) == calls(runs["r1"], "eval")
    saved.run_id = "r1-B"  # the judge's calls it made: every one counted
    made = sum(
        r["usage"].get("judge", {}).get("calls", 0)
        for name in (
            "LCA_results.jsonl",
            "DCG_results.jsonl",
            "LJP_direct.jsonl",
            "LJP_gold.jsonl",
            "LJP_interaction.jsonl",
            "interaction_labels.jsonl",
        )
        for r in saved.records("eval_results", name)
    )
    assert calls(runs["r1-B"], "judge") == made > 0


def test_a_rejudge_of_a_non_ideal_run_is_refused_before_anything_is_written(saved, capsys):
    """`--from-run delayed1 --run-id d1-rj` once left a manifest that said "standard": the re-judged run keeps its
    source's user condition."""
    saved.run_id = "delayed1"
    assert saved.run("LexAwN", "--user-condition", "delayed") == 0
    argv = [
        "--run-id",
        "d1-rj",
        "--from-run",
        "delayed1",
        "--model",
        "eval-model",
        "--judge-model",
        "judge-B",
        "--dataset",
        str(saved.dataset),
        "--output-root",
        str(saved.root),
    ]
    before = sorted(p.relative_to(saved.root) for p in saved.root.rglob("*"))
    capsys.readouterr()
    assert stage_main(rejudge.STAGE, "test", argv=argv, clients=saved.provider.in_memory_clients()) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "[rejudge] error: run delayed1 was made with the delayed user: re-judging covers standard runs "
        "(their every task)"
    ]
    assert sorted(p.relative_to(saved.root) for p in saved.root.rglob("*")) == before  # no manifest, no lock


@pytest.mark.slow
def test_figure_3_shows_the_model_not_its_re_judged_copy(saved, tmp_path, capsys, monkeypatch):
    """ "Re-judged copies appear as extra series; they belong in the judge tables only"."""
    assert run_rejudge(saved) == 0
    complexity = tmp_path / "complexity.csv"
    causes = sorted({c["cause_of_action"] for c in CASES})
    complexity.write_text("".join(f"{c},{i + 1}\n" for i, c in enumerate(causes)), encoding="utf-8")
    argv = ["--output-root", str(saved.root), "--complexity", str(complexity)]
    capsys.readouterr()
    assert show_results.main([*argv, "--table", "figure_3"]) == 0
    out = capsys.readouterr().out
    assert out.count("Case complexity (Figure 3): ") == 1 and "re-judged" not in out
    assert show_results.main([*argv, "--table", "judge_sensitivity"]) == 0
    assert "(DeepSeek-R1 / judge-B)" in capsys.readouterr().out  # the copy is in the judge's table
    pytest.importorskip("matplotlib")
    from lexpilot.reporting.tables import figures

    drawn = {}
    monkeypatch.setattr(
        figures, "save", lambda plt, fig, path, ax=None, legend=7: drawn.setdefault(path.name, fig)
    )
    assert show_results.main([*argv, "--plot", str(tmp_path / "fig")]) == 0
    for ax in drawn["fig3_complexity.png"].axes:
        assert len(ax.containers) == 1  # one series: the model's runs, not the copy's
    import matplotlib.pyplot as plt

    plt.close("all")


def blocks_of(out: str, title: str) -> list[list[str]]:
    """The column blocks of a text table: each its header line, rule and rows."""
    lines = out[out.index(title) :].split("\n\n")[0].splitlines()
    starts = [i for i, line in enumerate(lines) if re.fullmatch(r"\(\d+/\d+\)", line)]
    return [lines[a + 1 : b] for a, b in zip(starts, starts[1:] + [len(lines)])]


def test_a_wide_table_cut_into_blocks_repeats_every_key_column(saved, capsys):
    """ "Wide tables split into blocks repeat every key column ... A block never holds a lone
    column when the table fits in fewer blocks"."""
    assert run_rejudge(saved) == 0
    capsys.readouterr()
    assert show_results.main(["--output-root", str(saved.root), "--width", "80"]) == 0
    out = capsys.readouterr().out
    blocks = blocks_of(out, "Judge sensitivity")
    assert len(blocks) == 2
    first, second = ([re.split(r"\s{2,}", line) for line in b if not line.startswith("-")] for b in blocks)
    assert first[0] == ["Model", "Runs", "Judges", "Task", "Items"]
    assert second[0] == ["Model", "Task", "Agreement", "Cohen's κ"]  # the model and the task, again
    assert [r[0] for r in second] == [r[0] for r in first] and [r[1] for r in second[1:]] == [
        r[3] for r in first[1:]
    ]
    assert len({tuple(r[:2]) for r in second[1:]}) == len(second) - 1  # every row told apart
    # Table 11's five metrics at 107 cells, with the re-judged group's row (its label "eval-model · re-judged by
    # judge-B", 33 cells: 33 + 15 + 15 + 16 + 21 = 100 for four, 115 for five): two blocks, three and two, not four
    # and a lone one
    assert show_results.main(["--output-root", str(saved.root), "--width", "107", "--include-rejudged"]) == 0
    main = blocks_of(capsys.readouterr().out, "Main results")
    assert [len(re.split(r"\s{2,}", b[0])) - 1 for b in main] == [3, 2]


def test_from_run_is_checked_like_a_run_id(harness, provider, capsys):
    """--from-run is checked like a run id: a path or a hidden name is refused before any call."""
    import rejudge

    for bad in ("../../x", "a/b", ".hidden"):
        assert harness.run_stage(rejudge.STAGE, "--from-run", bad) == 2
        assert "--from-run" in capsys.readouterr().err
    assert not provider.requests
