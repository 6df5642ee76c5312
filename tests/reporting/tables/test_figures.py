"""The figures: a further group labelled by what differs, scatter labels that do not overprint,
an undefined value drawn as n/a, error bars on every chart; on runs the stage scripts wrote."""

import pytest

import show_results
from lexpilot.reporting.tables import figures
from tests.helpers.datasets import sample_cases, write_dataset
from tests.helpers.stages import Harness

pytest.importorskip("matplotlib")


def test_ten_labels_close_together_do_not_overprint():
    points = [(f"model-{i}", 0.50 + 0.002 * i, 0.60 + 0.001 * i) for i in range(10)]
    placed = [where for _, _, where in figures.dodged(points)]
    for i, (x, y) in enumerate(placed):
        for px, py in placed[:i]:
            assert abs(x - px) >= figures.LABEL_GAP[0] or abs(y - py) >= figures.LABEL_GAP[1] - 1e-9


@pytest.fixture
def drawn(tmp_path, provider, monkeypatch):
    """Every figure of two groups of one model (the second at another temperature), with --ci, kept open."""
    figs = {}
    original = figures.save

    def keep(plt, fig, path, ax=None, legend=7):
        figs[path.name] = fig
        if ax is not None:
            ax.legend(fontsize=legend)
        return path

    monkeypatch.setattr(figures, "save", keep)
    h = Harness(tmp_path, provider, monkeypatch, write_dataset(tmp_path / "four.json", sample_cases()[:4]))
    import eval_focal_types

    for stage in ("LexAwN", "DCG", "direct", "gold", "interaction"):
        assert h.run(stage) == 0
    assert h.run_stage(eval_focal_types.STAGE) == 0
    h.run_id = "r2"
    for stage in ("LexAwN", "DCG", "direct", "gold", "interaction"):
        assert h.run(stage, "--temperature", "0.2") == 0
    assert h.run_stage(eval_focal_types.STAGE, "--temperature", "0.2") == 0
    complexity = tmp_path / "complexity.csv"
    complexity.write_text(
        "cause_of_action,complexity\n"
        + "".join(
            f"{cause},{i + 1}\n"
            for i, cause in enumerate(dict.fromkeys(c["cause_of_action"] for c in sample_cases()[:4]))
        ),
        encoding="utf-8",
    )
    assert (
        show_results.main(
            [
                "--output-root",
                str(h.root),
                "--plot",
                str(tmp_path / "plots"),
                "--ci",
                "--resamples",
                "100",
                "--complexity",
                str(complexity),
            ]
        )
        == 0
    )
    yield figs
    monkeypatch.setattr(figures, "save", original)
    import matplotlib.pyplot as plt

    plt.close("all")


@pytest.mark.slow
def test_a_group_is_labelled_by_what_differs_and_every_chart_has_error_bars(drawn):
    for name, fig in drawn.items():
        ax = fig.axes[0]
        legend = [t.get_text() for t in ax.get_legend().get_texts()] if ax.get_legend() else []
        if name.startswith(("by_class", "ljp_setups")):
            assert legend == ["eval-model", "eval-model · temperature 0.2, user_temperature 0.2"], name
            assert any(
                getattr(c, "has_yerr", False) or type(c).__name__ == "ErrorbarContainer"
                for c in ax.containers
            ), name
        assert not any("#" in label for label in legend), name


@pytest.mark.slow
def test_an_undefined_value_is_drawn_as_n_a(drawn):
    # four cases leave some focal-point type without a DCG accuracy (Figure 4 a): the chart says n/a there
    chart = drawn["fig4a_dcg_by_focal_type.png"].axes[0]
    heights = [bar.get_height() for bar in chart.patches]
    marks = [t.get_text() for t in chart.texts]
    assert sum(h != h for h in heights) > 0
    assert marks.count("n/a") == sum(h != h for h in heights)  # NaN heights: nothing drawn but the mark


@pytest.mark.slow
def test_figure_3s_trend_lines_take_their_groups_colours(drawn):
    for ax in drawn["fig3_complexity.png"].axes:
        points = [c.lines[0].get_color() for c in ax.containers]  # each group's markers, in order
        trends = [
            line.get_color()
            for line in ax.get_lines()
            if line.get_linestyle() == "-" and len(line.get_xdata()) == 20
        ]
        # each group's trend line drawn in its markers' colour
        assert trends and trends == points[: len(trends)]


@pytest.mark.slow
def test_the_legend_stands_beside_the_axes_never_on_a_bar(tmp_path):
    """At 10 models the legend covered the Family bars; it now stands right of the axes."""
    import types

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    for m in range(10):
        ax.bar([x + m / 12 for x in range(6)], [1.0] * 6, width=1 / 12, label=f"model-{m}")
    kept = types.SimpleNamespace(close=lambda f: None)  # keep the figure open to measure it
    figures.save(kept, fig, tmp_path / "bars.png", ax)
    renderer = fig.canvas.get_renderer()
    legend, axes = ax.get_legend().get_window_extent(renderer), ax.get_window_extent(renderer)
    assert legend.x0 >= axes.x1 and (tmp_path / "bars.png").stat().st_size > 0
    plt.close(fig)


@pytest.mark.slow
def test_figure_3s_legend_stands_right_of_both_panels(drawn):
    fig = drawn["fig3_complexity.png"]
    renderer = fig.canvas.get_renderer()
    first, second = fig.axes[:2]
    assert first.get_legend() is None and second.get_legend() is not None
    assert second.get_legend().get_window_extent(renderer).x0 >= second.get_window_extent(renderer).x1


@pytest.mark.slow
def test_the_class_names_under_the_bars_never_overprint(tmp_path, provider, monkeypatch):
    """By-class plot labels overlapped ("Service Contract" ran into "Finance Contract"). On a run
    of every class of the sample (12 cases, 6 classes and Overall), each tick label of every per-class figure stands
    clear of the next one, as drawn."""
    figs = {}

    def keep(plt, fig, path, ax=None, legend=7):
        figs[path.name] = fig
        return path

    monkeypatch.setattr(figures, "save", keep)
    h = Harness(tmp_path, provider, monkeypatch, write_dataset(tmp_path / "all.json", sample_cases()))
    for stage in ("LexAwN", "DCG"):
        assert h.run(stage) == 0
    assert show_results.main(["--output-root", str(h.root), "--plot", str(tmp_path / "plots")]) == 0
    import matplotlib.pyplot as plt

    try:
        checked = 0
        for name, fig in figs.items():
            fig.canvas.draw()
            renderer = fig.canvas.get_renderer()
            for ax in fig.axes:
                boxes = [t.get_window_extent(renderer) for t in ax.get_xticklabels() if t.get_text()]
                for left, right in zip(boxes, boxes[1:]):
                    assert left.x1 < right.x0, (name, [t.get_text() for t in ax.get_xticklabels()])
                checked += name.startswith("by_class") and len(boxes) == 7
        assert checked >= 2  # LCA and DCG by class, every class shown
    finally:
        plt.close("all")


@pytest.mark.slow
def test_a_model_id_with_dollars_is_drawn_as_text_in_every_figure(tmp_path, provider, monkeypatch, capsys):
    """matplotlib reads "$…$" as mathematics: a model id such as "$\\frac{a$" failed --plot with a traceback."""
    h = Harness(tmp_path, provider, monkeypatch)
    for stage in ("LexAwN", "DCG"):
        assert h.run(stage, "--limit", "2", "--model", "$\\frac{a$ $b$") == 0
    plots = tmp_path / "plots"
    assert show_results.main(["--output-root", str(h.root), "--plot", str(plots)]) == 0
    assert "Traceback" not in capsys.readouterr().err
    assert {p.name for p in plots.glob("*.png")} >= {
        "lca_acc_c_vs_acc_u.png",
        "ljp_setups.png",
        "ranking_LCA.png",
    }
