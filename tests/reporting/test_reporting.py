"""show_results.py beyond the paper: bootstrap intervals, paired comparisons, interaction behaviour, cost, figures."""

import json
import sys
from pathlib import Path

import numpy as np
import pytest

import show_results
from lexpilot.benchmark.records import LJP_GOLD
from lexpilot.benchmark.records import model_folder as model_dirname
from lexpilot.reporting.scoring.groups import group_runs
from lexpilot.reporting.scoring.results import load_runs
from lexpilot.reporting.statistics.bootstrap import Bootstrap, paired_difference
from lexpilot.reporting.tables.renderings import json_key
from tests.helpers.datasets import sample_cases
from tests.helpers.messages import one_line
from tests.helpers.metrics import quadratic_weighted_kappa
from tests.helpers.paths import ROOT
from tests.helpers.saved_runs import C, U, make_run, saved

MANY = {f"F{i:02d}": "离婚纠纷" for i in range(20)}  # twenty Family cases


def groups_of(root):
    return group_runs(load_runs(root, None, None))


def group(root, model="m"):
    (g,) = [g for g in groups_of(root) if g.model == model]
    return g


def test_a_metric_identical_in_every_resample_has_a_zero_width_interval(tmp_path):
    make_run(tmp_path, "r1", cases=MANY, dcg={n: True for n in MANY}, lca={n: (C, U) for n in MANY})
    g, boot = group(tmp_path), Bootstrap(200, 0)
    assert boot.interval(g, ("DCG", "accuracy", "Overall")) == (1.0, 1.0)
    assert boot.interval(g, ("LCA", "macro_f1", "Overall")) == (1.0, 1.0)


def test_interval_brackets_the_estimate_and_the_seed_fixes_the_numbers(tmp_path):
    make_run(tmp_path, "r1", cases=MANY, dcg={n: i % 4 == 0 for i, n in enumerate(MANY)})
    g = group(tmp_path)
    lo, hi = Bootstrap(500, 1).interval(g, ("DCG", "accuracy", "Overall"))
    assert lo < 0.25 < hi and 0 <= lo and hi <= 1
    assert Bootstrap(500, 1).interval(g, ("DCG", "accuracy", "Overall")) == (lo, hi)
    assert Bootstrap(500, 2).interval(g, ("DCG", "accuracy", "Overall")) != (lo, hi)


def test_a_clear_paired_difference_excludes_zero(tmp_path):
    verdicts = ["支持", "部分支持", "驳回"]
    right = {n: [(verdicts[i % 3], verdicts[i % 3])] for i, n in enumerate(MANY)}
    wrong = {n: [(verdicts[i % 3], verdicts[(i + 1) % 3])] for i, n in enumerate(MANY)}
    make_run(tmp_path, "r1", cases=MANY, ljp={"direct": wrong, "interaction": right, "gold": right})
    g, boot = group(tmp_path), Bootstrap(300, 0)
    key = lambda s: (g, (f"LJP_{s}", "qwk", "Overall"))  # noqa: E731
    gain = paired_difference(boot, key("interaction"), key("direct"))
    assert gain["difference"] > 1 and gain["ci"][0] > 0 and gain["below_zero"] == 0
    same = paired_difference(boot, key("gold"), key("interaction"))
    assert same["difference"] == 0 and same["ci"] == (0.0, 0.0)  # paired: identical setups never differ


def test_cases_stay_whole_in_resampling(tmp_path):
    # Each case has both histories right or both wrong: with whole cases, Acc_C equals Acc_U in every resample.
    lca = {n: (C, U) if i % 3 else (U, C) for i, n in enumerate(MANY)}
    # Each case has three claims all right or one claim wrong: accuracy is 3a / (3a + b) for whole cases only.
    ljp = {n: [("支持", "支持")] * 3 if i % 2 else [("支持", "驳回")] for i, n in enumerate(MANY)}
    make_run(tmp_path, "r1", cases=MANY, lca=lca, ljp={"direct": ljp})
    g, boot = group(tmp_path), Bootstrap(300, 0)
    acc_c = boot.distribution(g, ("LCA", "acc_c", "Overall"))
    assert np.array_equal(acc_c, boot.distribution(g, ("LCA", "acc_u", "Overall"))) and acc_c.std() > 0
    allowed = {round(3 * a / (3 * a + (20 - a)), 12) for a in range(21)}
    assert {round(v, 12) for v in boot.distribution(g, ("LJP_direct", "accuracy", "Overall"))} <= allowed


def test_several_runs_resample_the_same_cases_and_average(tmp_path):
    make_run(tmp_path, "r1", cases=MANY, dcg={n: i % 2 == 0 for i, n in enumerate(MANY)})
    make_run(tmp_path, "r2", cases=MANY, dcg={n: i % 5 == 0 for i, n in enumerate(MANY)})
    g, boot = group(tmp_path), Bootstrap(100, 0)
    w = boot.weights(tuple(MANY))
    assert w.shape == (100, 20) and (w.sum(axis=1) == 20).all()
    per_run = [w @ np.array([i % k == 0 for i in range(20)], float) / 20 for k in (2, 5)]
    assert np.allclose(boot.distribution(g, ("DCG", "accuracy", "Overall")), np.mean(per_run, axis=0))


def test_ci_and_compare_on_the_command_line(tmp_path, capsys):
    make_run(tmp_path, "r1", model="good", cases=MANY, dcg={n: True for n in MANY})
    make_run(tmp_path, "r1", model="weak", cases=MANY, dcg={n: i % 4 == 0 for i, n in enumerate(MANY)})
    argv = ["--output-root", str(tmp_path), "--ci", "--resamples", "200"]
    assert show_results.main(argv) == 0
    first = capsys.readouterr().out
    assert "1.000 [1.000, 1.000]" in first and "Paired QWK differences" in first
    assert show_results.main(argv) == 0 and capsys.readouterr().out == first  # the fixed seed
    assert show_results.main(argv + ["--compare", "good", "weak"]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("DCG Acc."))
    low = float(row.split("[")[1].split(",")[0])
    assert "+0.750" in row and low > 0 and "0.0% < 0" in row
    assert show_results.main(argv + ["--compare", "good", "nobody"]) == 2
    assert "--compare nobody: no runs" in capsys.readouterr().err
    assert show_results.main(["--output-root", str(tmp_path), "--ci", "--format", "json"]) == 0
    groups = json.loads(capsys.readouterr().out)["groups"]
    assert groups[0]["metrics"]["dcg"]["accuracy"]["overall"]["ci95"] == [1.0, 1.0]


def write_interactions(root, run_id, stops, model="m"):
    """stops: {case: (stop_reason, labels of the rounds)} as LexAwN_gen.py writes them."""
    path = root / "AwN_gen" / run_id / model_dirname(model) / "interaction.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        "".join(
            json.dumps(
                saved(
                    "interaction.jsonl",
                    {
                        "case_number": n,
                        "cause_of_action": MIXED[n],
                        "stop_reason": stop,
                        "rounds": [{"label": label} for label in labels],
                    },
                )
            )
            + "\n"
            for n, (stop, labels) in stops.items()
        ),
        encoding="utf-8",
    )


MIXED = {"A1": "离婚纠纷", "A2": "法定继承纠纷", "B1": "相邻关系纠纷", "B2": "返还原物纠纷"}


def test_interaction_behaviour_from_hand_made_records(tmp_path, capsys):
    ljp = {
        "A1": [("支持", "支持")],
        "A2": [("驳回", "驳回")],
        "B1": [("支持", "驳回")],
        "B2": [("驳回", "支持")],
    }
    make_run(tmp_path, "r1", cases=MIXED, ljp={"interaction": ljp})
    write_interactions(
        tmp_path,
        "r1",
        {
            "A1": ("judged", ["策略一"]),  # premature
            "A2": ("judged", ["策略二", "策略二", "策略一"]),  # judged in round 3 after two questions
            "B1": ("budget", ["策略二", "策略二", "策略二", None]),  # forced after three questions
            "B2": ("judged", ["策略一"]),  # premature
        },
    )
    g = group(tmp_path)
    stat = lambda *key: g.stat(key)["mean"]  # noqa: E731
    assert stat("behaviour", "questions", "Overall") == pytest.approx(5 / 4)
    assert stat("behaviour", "round 1", "Overall") == 0.5 and stat("behaviour", "round 2", "Overall") == 0
    assert stat("behaviour", "round 3", "Overall") == 0.25 and stat("behaviour", "budget", "Overall") == 0.25
    assert (
        stat("behaviour", "questions", "Family") == 1 and stat("behaviour", "round 1", "Real Rights") == 0.5
    )
    # QWK per stop reason: round 1 holds A1 (支持→支持) and B2 (驳回→支持)
    assert stat("LJP_interaction_by_stop", "qwk", "round 1") == pytest.approx(
        quadratic_weighted_kappa(["支持", "驳回"], ["支持", "支持"])
    )
    assert g.stat(("LJP_interaction_by_stop", "qwk", "round 2")) is None
    assert show_results.main(["--output-root", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    row = out[out.index("Interaction behaviour") :].splitlines()[3].split()
    assert row == ["m", "1.25", "0.500", "0.000", "0.250", "0.250"]
    by_class = out[out.index("Stop reasons by class") :].splitlines()
    assert by_class[1].split()[1:] == ["Family", "Real", "Rights", "Overall"]
    # Family: A1 premature, A2 judged in round 3; Real Rights: B1 budget, B2 premature
    assert " ".join(by_class[3].split()) == (
        "m 0.500 / 0.000 / 0.500 / 0.000 0.500 / 0.000 / 0.000 / 0.500 0.500 / 0.000 / 0.250 / 0.250"
    )


def write_usage(root, run_id, name, usages, model="m"):
    top = "eval_results" if name.startswith(("LCA", "DCG", "LJP")) else "AwN_gen"
    path = root / top / run_id / model_dirname(model) / name
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as f:
        for n, usage in usages.items():
            f.write(
                json.dumps(saved(name, {"case_number": n, "cause_of_action": MIXED[n], "usage": usage}))
                + "\n"
            )


def a_run_with_hand_made_usage_and_prices(tmp_path) -> Path:
    """Run r1 of models m, u and j with the usage below in two files, and a price file (returned) for them."""
    make_run(
        tmp_path,
        "r1",
        cases=MIXED,
        models={"eval": {"model": "m"}, "user": {"model": "u"}, "judge": {"model": "j"}},
    )
    used = lambda calls, p, c: {"calls": calls, "prompt_tokens": p, "completion_tokens": c}  # noqa: E731
    write_usage(
        tmp_path,
        "r1",
        "a1.jsonl",
        {"A1": {"eval": used(2, 1_000_000, 500_000)}, "A2": {"eval": used(2, 1_000_000, 500_000)}},
    )
    write_usage(
        tmp_path,
        "r1",
        "interaction.jsonl",
        {
            "A1": {
                "eval": used(1, 0, 0),
                "user": used(1, 2_000_000, 0),
                "judge": used(1, 1_000_000, 1_000_000),
            }
        },
    )
    prices = tmp_path / "prices.json"
    prices.write_text(
        json.dumps(
            {
                "m": {"prompt": 1, "completion": 4},
                "u": {"prompt": 0.5, "completion": 1},
                "j": {"prompt": 2, "completion": 8},
            }
        ),
        encoding="utf-8",
    )
    return prices


def test_cost_from_hand_made_usage_and_a_price_file(tmp_path, capsys):
    prices = a_run_with_hand_made_usage_and_prices(tmp_path)
    assert show_results.main(["--output-root", str(tmp_path), "--prices", str(prices), "--width", "0"]) == 0
    out = capsys.readouterr().out
    per_run = out[out.index("Token usage per run") :].splitlines()[3].split()
    # eval 2M prompt + 1M completion = 2 + 4; user 2M * 0.5 = 1; judge 1M*2 + 1M*8 = 10 -> 17
    assert per_run == [
        "m",
        "r1",
        "5",
        "/",
        "2000000",
        "/",
        "1000000",
        "1",
        "/",
        "2000000",
        "/",
        "0",
        "1",
        "/",
        "1000000",
        "/",
        "1000000",
        "17.00",
    ]
    stages = out[out.index("Token usage per stage") :].splitlines()[3:7]
    assert [line.split() for line in stages] == [
        ["m", "a1.jsonl", "eval", "4", "2000000", "1000000", "6.00"],
        ["m", "interaction.jsonl", "eval", "1", "0", "0", "0.0000"],
        ["m", "interaction.jsonl", "user", "1", "2000000", "0", "1.00"],
        ["m", "interaction.jsonl", "judge", "1", "1000000", "1000000", "10.00"],
    ]
    prices.write_text(json.dumps({"m": {"prompt": 1}}), encoding="utf-8")
    assert show_results.main(["--output-root", str(tmp_path), "--prices", str(prices)]) == 2
    assert "entry 'm' must be" in capsys.readouterr().err


@pytest.mark.slow
def test_each_figure_is_written_and_is_a_valid_png(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    import matplotlib.image

    for run_id in ("r1", "r2"):
        make_run(
            tmp_path,
            run_id,
            cases=MIXED,
            lca={n: (C, U) for n in MIXED},
            dcg={n: True for n in MIXED},
            ljp={
                s: {n: [("支持", "支持"), ("驳回", "部分支持")] for n in MIXED}
                for s in ("direct", "interaction", "gold")
            },
        )
    plots = tmp_path / "plots"
    assert (
        show_results.main(["--output-root", str(tmp_path), "--plot", str(plots), "--ci", "--resamples", "50"])
        == 0
    )
    names = sorted(p.name for p in plots.iterdir())
    assert names == sorted(
        [
            "by_class_LCA_macro_f1.png",
            "by_class_DCG_accuracy.png",
            "by_class_LJP_direct_qwk.png",
            "by_class_LJP_interaction_qwk.png",
            "by_class_LJP_gold_qwk.png",
            "lca_acc_c_vs_acc_u.png",
            "ljp_setups.png",
            "ranking_LCA.png",  # the ranking figures, one per task
            "ranking_DCG.png",
            "ranking_LJP.png",
        ]
    )
    for name in names:
        data = (plots / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n"
        image = matplotlib.image.imread(plots / name)
        assert (
            image.shape[0] > 200 and image.shape[1] > 300 and image.std() > 0
        )  # not blank (a ranking of one model is short)


def test_plot_without_matplotlib_says_how_to_install(tmp_path, capsys, monkeypatch):
    make_run(tmp_path, "r1", dcg={n: True for n in MIXED}, cases=MIXED)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import fails as if not installed
    assert show_results.main(["--output-root", str(tmp_path), "--plot", str(tmp_path / "p")]) == 2
    assert "pip install matplotlib" in capsys.readouterr().err and not (tmp_path / "p").exists()


# ----------------------------------------------------------------------------- drift the suite must catch


def random_ljp(rng, cases, accuracy):
    labels = ["支持", "部分支持", "驳回"]
    out = {}
    for n in cases:
        gold = [labels[i] for i in rng.integers(0, 3, size=int(rng.integers(1, 4)))]
        out[n] = [(g, g if rng.random() < accuracy else labels[int(rng.integers(0, 3))]) for g in gold]
    return out


def test_every_task_setup_run_and_model_is_resampled_with_one_shared_draw(tmp_path):
    """Any task, LJP setup, run or model given draws of its own fails here: every bootstrap value must be the
    metric on the one matrix of case weights the bootstrap holds for these cases."""
    from lexpilot.reporting.scoring.scoring import TASKS

    rng = np.random.default_rng(7)
    for model in ("m", "n"):
        for run_id in ("r1", "r2"):
            make_run(
                tmp_path,
                f"{model}-{run_id}",
                model=model,
                cases=MANY,
                lca={c: (C if rng.random() < 0.6 else U, U if rng.random() < 0.6 else C) for c in MANY},
                dcg={c: bool(rng.random() < 0.5) for c in MANY},
                ljp={
                    s: random_ljp(rng, MANY, a)
                    for s, a in (("direct", 0.4), ("interaction", 0.6), ("gold", 0.8))
                },
            )
    boot = Bootstrap(150, 3)
    weights = boot.weights(tuple(MANY))
    for g in groups_of(tmp_path):
        assert {"LCA", "DCG", "LJP_direct", "LJP_interaction", "LJP_gold"} <= set(g.runs[0].tasks)
        for task, (_, _, metrics_from) in TASKS.items():
            if task not in g.runs[0].tasks:
                continue  # the plain consultation was not run here
            per_run = [metrics_from(weights @ run.tasks[task].counts) for run in g.runs]
            for metric in per_run[0]:
                expected = np.nanmean(np.array([m[metric] for m in per_run]), axis=0)
                assert np.allclose(
                    boot.distribution(g, (task, metric, "Overall")), expected, equal_nan=True
                ), (g.model, task, metric)


def test_identical_imperfect_setups_differ_by_exactly_zero_in_every_resample(tmp_path):
    rng = np.random.default_rng(11)
    same = random_ljp(rng, MANY, 0.5)
    make_run(
        tmp_path,
        "r1",
        cases=MANY,
        ljp={"direct": same, "interaction": same, "gold": random_ljp(rng, MANY, 0.9)},
    )
    g, boot = group(tmp_path), Bootstrap(300, 0)
    key = lambda s: (g, (f"LJP_{s}", "qwk", "Overall"))  # noqa: E731
    assert np.nanstd(boot.distribution(*key("direct"))) > 0.01  # imperfect: unpaired draws would disagree
    diff = paired_difference(boot, key("interaction"), key("direct"))
    assert diff["difference"] == 0 and diff["ci"] == (0.0, 0.0)


def test_the_interval_is_the_central_95_percent():
    from lexpilot.reporting.statistics.bootstrap import percentile_interval

    values = np.arange(1000.0)
    lo, hi = percentile_interval(values)
    assert (lo, hi) == pytest.approx((24.975, 974.025))
    assert np.mean((values >= lo) & (values <= hi)) == pytest.approx(0.95)
    with_nan = np.concatenate([values, [np.nan] * 100])
    assert percentile_interval(with_nan) == (lo, hi)  # undefined resamples are left out, not counted


def test_table_15_paired_declines_hand_checked(tmp_path, capsys):
    cases = {"A1": "离婚纠纷", "A2": "法定继承纠纷"}
    # Standard: both right, QWK 1. Delayed: A2 predicted 支持 for 驳回: O = [[1,0,0],[0,0,0],[1,0,0]],
    # E = outer([1,0,1],[2,0,0])/2 = [[1,0,0],[0,0,0],[1,0,0]]: QWK = 1 - 1/1 = 0, decline -1.
    # Resamples holding one case twice leave QWK undefined on both sides; those with both cases give -1.
    make_run(
        tmp_path,
        "std",
        cases=cases,
        ljp={"interaction": {"A1": [("支持", "支持")], "A2": [("驳回", "驳回")]}},
    )
    make_run(
        tmp_path,
        "del",
        cases=cases,
        user_condition="delayed",
        ljp={"interaction": {"A1": [("支持", "支持")], "A2": [("驳回", "支持")]}},
    )
    make_run(
        tmp_path,
        "sc",
        cases=cases,
        user_condition="self-correction",
        ljp={"interaction": {"A1": [("支持", "支持")], "A2": [("驳回", "驳回")]}},
    )
    assert (
        show_results.main(["--output-root", str(tmp_path), "--ci", "--resamples", "200", "--width", "0"]) == 0
    )
    out = capsys.readouterr().out
    table = out[out.index("Non-ideal users (Table 15)") :].splitlines()
    assert table[1].split("  ")[0] == "Model" and "Delayed Disclosure − Standard" in table[1]
    row = [c.strip() for c in table[3].split("  ") if c.strip()]
    assert row[-2] == "-1.0000 [-1.0000, -1.0000], 100.0% < 0"  # Table 15 at 4 decimals, as the paper's
    assert row[-1] == "+0.0000 [+0.0000, +0.0000], 0.0% < 0"


def test_per_class_intervals_resample_that_class_only_on_a_run_the_stages_wrote(
    tmp_path, provider, monkeypatch, capsys
):
    """Under --ci, a class cell's interval comes from the class's own cases. The DCG judge
    accepts every question of the Family cases and every other one elsewhere: Family's interval is [1, 1]; the
    whole-benchmark interval is not."""
    from tests.helpers.datasets import sample_cases, write_dataset
    from tests.helpers.stages import Harness

    cases = sample_cases()
    from categories import cause_class

    # Family: every question accepted; elsewhere the first case of each class only
    def judge(kind, prompt, body):
        if kind == "dcg_judge":
            i, case = next(
                (i, c)
                for i, c in enumerate(cases)
                if all(
                    fp in prompt
                    for fp in ([c["focal_point"]] if isinstance(c["focal_point"], str) else c["focal_point"])
                )
            )
            return "是" if cause_class(case["cause_of_action"]) == "Family" or i % 2 == 0 else "否"
        return None

    provider.script = judge
    h = Harness(tmp_path, provider, monkeypatch, write_dataset(tmp_path / "all.json", cases))
    assert h.run("DCG") == 0
    records = h.records("eval_results", "DCG_results.jsonl")
    by_class = {}
    for r in records:
        by_class.setdefault(cause_class(r["cause_of_action"]), []).append(r["success"])
    capsys.readouterr()
    assert (
        show_results.main(["--output-root", str(h.root), "--ci", "--resamples", "300", "--format", "json"])
        == 0
    )
    dcg = json.loads(capsys.readouterr().out)["groups"][0]["metrics"]["dcg"]["accuracy"]
    assert (
        by_class["Family"] == [True, True]
        and dcg["family"]["mean"] == 1.0
        and dcg["family"]["ci95"] == [1.0, 1.0]
    )
    mixed = [c for c, v in by_class.items() if len(set(v)) > 1]
    assert mixed and dcg["overall"]["ci95"][0] < dcg["overall"]["mean"] < 1.0
    for c in mixed:  # a class of two cases, one success: its resamples give 0, 0.5 or 1
        low, high = dcg[json_key(c)]["ci95"]
        assert dcg[json_key(c)]["mean"] == 0.5 and low == 0.0 and high == 1.0


# ----------------------------------------------------------------------------- what a report refuses


def test_show_results_malformed_usage_and_an_unwritable_plot_folder(saved_run, tmp_path, monkeypatch, capsys):
    h = saved_run(tmp_path, monkeypatch)
    from lexpilot.benchmark.records import content_digest

    path = h.file(LJP_GOLD)
    records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    records[0]["usage"] = {"judge": {"calls": "many"}}
    records[0]["digest"] = content_digest(records[0])
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    capsys.readouterr()
    assert show_results.main(["--output-root", str(h.root), "--usage"]) == 0
    assert "malformed usage for case" in capsys.readouterr().err
    pytest.importorskip("matplotlib")
    (tmp_path / "plot-file").write_text("x")
    assert show_results.main(["--output-root", str(h.root), "--plot", str(tmp_path / "plot-file")]) == 2
    assert "--plot" in one_line(capsys.readouterr().err)


def test_resamples_are_bounded(capsys):
    """--resamples is bounded: a billion is refused in one line with the bounds."""
    import show_results

    assert show_results.main(["--ci", "--resamples", "1000000000"]) == 2
    assert "--resamples must be from 1 to 100,000" in capsys.readouterr().err


def test_what_was_asked_for_and_is_not_there_is_said_with_a_non_zero_status(harness, tmp_path, capsys):
    """A run, a model or an output root asked for and not there is said with status 2; a root with records but no
    manifest too; an empty root is no error."""
    import show_results

    assert harness.run("gold", "--limit", "1") == 0
    root = str(harness.root)
    capsys.readouterr()
    assert show_results.main(["--output-root", root, "--run-id", "nope"]) == 2
    assert "--run-id nope: no such run" in capsys.readouterr().err
    assert show_results.main(["--output-root", root, "--model", "other"]) == 2
    assert "--model other: no such run" in capsys.readouterr().err
    assert show_results.main(["--output-root", str(tmp_path / "nowhere")]) == 2
    assert "does not exist" in capsys.readouterr().err
    next((harness.root / "runs").glob("*/*/manifest.json")).unlink()
    assert show_results.main(["--output-root", root]) == 2
    err = capsys.readouterr().err
    assert "records of run(s) r1" in err and "but no manifest" in err
    empty = tmp_path / "empty"
    empty.mkdir()
    assert show_results.main(["--output-root", str(empty)]) == 0  # nothing run yet is not an error


def test_odd_model_ids_cells_complexities_and_report_paths_are_refused_or_made_safe(
    harness, provider, tmp_path, capsys
):
    """A model id with an invisible character; a LaTeX cell with braces; a signed Unicode-digit string is text;
    1e999 (infinite once read) as a complexity; --dataset a folder for show_results."""
    import show_results
    from lexpilot.files import spreadsheet_safe
    from lexpilot.reporting.tables.renderings import render_latex
    from lexpilot.reporting.tables.table import Table

    for model in ("gpt\u200b4", "gpt\n4"):
        assert harness.run("gold", "--limit", "1", "--model", model) == 2
        assert "invisible characters" in capsys.readouterr().err
    assert render_latex([Table("t", "a{b}", ["x_{1}"], [["\\\\cmd{y}"]])]).count(r"\{") == 3
    assert spreadsheet_safe("-١٢") == "'-١٢"
    text = json.dumps(sample_cases()[:1], ensure_ascii=False).replace(
        '{"case_number"', '{"complexity": 1e999, "case_number"', 1
    )
    path = tmp_path / "d.json"
    path.write_text(text, encoding="utf-8")
    assert harness.run("gold", "--dataset", str(path)) == 2
    assert "complexity: 'inf' is not a non-negative number" in capsys.readouterr().err
    assert show_results.main(["--output-root", str(tmp_path), "--dataset", str(tmp_path)]) == 2
    assert "no such file" in capsys.readouterr().err
    # a file that is no dataset is refused in one line, before any report (it printed eight
    # warnings and the report, and exited 0); a site or figure folder that cannot be written, before the report too
    assert show_results.main(["--output-root", str(tmp_path), "--dataset", str(ROOT / "README.md")]) == 2
    said = capsys.readouterr()
    assert said.out == "" and len(said.err.strip().splitlines()) == 1 and "README.md" in said.err, said.err
    for flag in ("--html", "--plot"):
        assert show_results.main(["--output-root", str(tmp_path), flag, str(ROOT / "README.md")]) == 2
        said = capsys.readouterr()
        assert said.out == "" and said.err.startswith(f"show_results: {flag} ") and "cannot write" in said.err
