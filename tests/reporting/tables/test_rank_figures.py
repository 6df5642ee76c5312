"""The ranking figures' numbers (tables/rank_figures.py) and their PNG (figures.py, `--plot`): each model's mean, the
interval of the bootstrap over cases, the ranking table's order and letters; one PNG per task, a valid image, each
model's marks drawn at its values, a hostile name drawn as text."""

import numpy as np
import pytest

from lexpilot.reporting.statistics.bootstrap import Bootstrap
from lexpilot.reporting.statistics.rankings import ranking_tables
from lexpilot.reporting.tables.rank_figures import Mark, Panel, Point, TaskFigure, rank_figures
from tests.helpers.rankings import group_of

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def model(name: str, successes: int, cases: int = 40):
    """A model's group of one DCG run whose first `successes` cases succeed, labelled by its name."""
    group = group_of(name, (np.arange(cases) < successes).astype(float)[None, :])
    group.label = name  # as group_runs labels a model's only group
    return group


def test_without_a_ranking_the_models_stand_by_mean_with_the_bootstrap_interval_and_no_letters():
    groups = [model("low", 8), model("high", 30), model("mid", 20)]
    figures = rank_figures(groups, Bootstrap(200, 3), [])
    assert [f.task for f in figures] == ["DCG"]  # only DCG was run
    (panel,) = figures[0].panels
    assert [(m.model, m.rank, m.raw.letters) for m in panel.marks] == [
        ("high", 1, ""),
        ("mid", 2, ""),
        ("low", 3, ""),
    ]
    assert [m.raw.value for m in panel.marks] == pytest.approx([30 / 40, 20 / 40, 8 / 40])
    assert not figures[0].ranked and not figures[0].corrected and "pass --rank" in figures[0].notes[0]
    # the 95% percentile interval over 200 draws of the 40 cases, with the report's seed, drawn here in NumPy
    draws = np.random.default_rng(3).integers(0, 40, size=(200, 40))
    for mark, successes in zip(panel.marks, (30, 20, 8)):
        resampled = (draws < successes).mean(
            axis=1
        )  # a drawn case succeeds when its index is below successes
        assert mark.raw.interval == pytest.approx(tuple(np.percentile(resampled, [2.5, 97.5])))


def test_with_a_ranking_the_order_ranks_and_letters_are_the_ranking_tables():
    groups = [model(m, s, 80) for m, s in (("c", 20), ("a", 60), ("b", 58), ("d", 20))]
    boot = Bootstrap(200, 0)
    tables = ranking_tables(groups, boot, 0.05)
    ranking = next(t for t in tables if t.id == "ranking")
    (panel,) = rank_figures(groups, boot, tables)[0].panels
    rows = [(r[2], int(r[1]), r[-1]) for r in ranking.rows if r[0] == "DCG Acc."]
    assert [(m.model, m.rank, m.raw.letters) for m in panel.marks] == rows
    # 60 and 58 of 80 tie, as do 20 and 20 (which share a rank); the two pairs are far apart
    assert [m.rank for m in panel.marks] == [1, 2, 3, 3]
    letters = [m.raw.letters for m in panel.marks]
    assert letters[0] == letters[1] and letters[2] == letters[3] and not set(letters[0]) & set(letters[2])


def figure_of(name: str) -> TaskFigure:
    marks = [
        Mark(name, 1, "", Point(0.8, (0.7, 0.9), "a"), Point(0.6, (0.5, 0.7), "a")),
        Mark("m-b", 2, "", Point(0.55, (0.45, 0.65), "ab"), None, refused=True),
        Mark("m-c", 3, "", Point(0.3, (0.2, 0.4), "b"), Point(0.35, (0.25, 0.45), "b")),
    ]
    return TaskFigure("LCA", "LCA", [Panel("LCA Acc_C", marks), Panel("LCA Acc_U", marks[1:])], True, True)


@pytest.mark.slow
def test_the_png_draws_each_mark_at_its_value_in_rank_order_and_a_hostile_name_as_text(tmp_path):
    import types

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from lexpilot.reporting.tables import figures

    name = "$\\frac{1}{0}$ <script>"  # mathtext to matplotlib, unless its "$" are escaped
    kept = types.SimpleNamespace(
        subplots=plt.subplots, close=lambda f: None
    )  # the figure kept open to read it
    path = figures.ranking_plot(kept, figure_of(name), tmp_path)
    assert path.name == "ranking_LCA.png" and path.read_bytes().startswith(PNG_SIGNATURE)
    fig = plt.gcf()
    first = fig.axes[0]
    # as matplotlib draws them: plain text, no mathtext
    drawn_names = [t._preprocess_math(t.get_text()) for t in first.get_yticklabels()]
    assert drawn_names == [(f"1. {name}", False), ("2. m-b", False), ("3. m-c", False)]
    # each errorbar's marker at its value, raw above corrected in the model's row; the best row at the top
    drawn = [(c.lines[0].get_xdata()[0], c.lines[0].get_ydata()[0]) for c in first.containers]
    expected = [(0.8, -0.18), (0.6, 0.18), (0.55, 0.82), (0.3, 1.82), (0.35, 2.18)]
    assert np.allclose(np.array(drawn, float), expected), drawn
    assert first.get_ylim()[0] > first.get_ylim()[1]  # y grows downward: rank 1 first
    letters = [t.get_text() for t in first.texts if t.get_text() not in ("raw", "corrected")]
    assert letters == ["a", "a", "ab", "refused", "b", "b"]
    plt.close("all")


@pytest.mark.slow
def test_plot_writes_one_valid_png_per_task_run(ranked_dcg):
    from matplotlib.image import imread

    _, plots, _ = ranked_dcg
    written = sorted(p.name for p in plots.glob("ranking_*.png"))
    assert written == ["ranking_DCG.png"]  # the runs hold DCG only: no LCA or LJP figure
    data = (plots / "ranking_DCG.png").read_bytes()
    assert data.startswith(PNG_SIGNATURE)
    grey = imread(plots / "ranking_DCG.png")[..., :3].mean(axis=2) * 255
    assert grey.shape[0] > 100 and grey.min() < 100 < grey.max()  # an image, not blank
