"""The ranking figures in the site's overview (site/rank_svg.py): an inline SVG per task, written by the harness, with
one row per model in rank order, its raw mean and, with --corrected, its corrected mean side by side, each at an x
proportional to its value with the interval the report prints, and its Holm letters beside it; a model's name is
text however hostile, and the SVG is well-formed XML."""

import csv
import io
import math
import xml.etree.ElementTree as ET

import pytest

from lexpilot.reporting.site.rank_svg import figure_svg
from lexpilot.reporting.tables.rank_figures import Mark, Panel, Point, TaskFigure
from tests.helpers.rankings import THREE_MODELS, THREE_MODELS_CASES

HOSTILE = '</svg><script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">&amp;\x01 \'"'


def svg_of(html: str, task: str) -> ET.Element:
    """The overview's inline SVG of one task, parsed as XML (it must be well-formed)."""
    start = html.index(f'<svg class="ranking" id="ranking-{task}"')
    return ET.fromstring(html[start : html.index("</svg>", start) + len("</svg>")])


def centre(shape: ET.Element) -> tuple[float, float]:
    """A mark's centre: a circle's, or the mean of a diamond's four corners."""
    if shape.tag == "circle":
        return float(shape.get("cx")), float(shape.get("cy"))
    corners = [tuple(map(float, p.split(","))) for p in shape.get("points").split()]
    return sum(x for x, _ in corners) / 4, sum(y for _, y in corners) / 4


def marks(svg: ET.Element) -> list[dict]:
    """Per model row, top to bottom: its name, rank, and per kind (raw, corrected) the mark's centre, the interval
    line's ends and the letters."""
    rows = []
    for row in svg.iter("g"):
        if row.get("class") != "mark":
            continue
        found = {"model": row.find("text[@class='model']").text, "rank": row.get("data-rank")}
        for kind in row.findall("g"):
            line = kind.find("line[@class='interval']")
            found[kind.get("class")] = {
                "at": centre(
                    kind.find("circle") if kind.find("circle") is not None else kind.find("polygon")
                ),
                "ends": (float(line.get("x1")), float(line.get("x2"))),
                "letters": kind.find("text[@class='letters']").text,
            }
        rows.append(found)
    return rows


@pytest.mark.slow
def test_each_model_stands_in_rank_order_raw_and_corrected_side_by_side_with_its_letters(ranked_dcg):
    site, _, out = ranked_dcg
    rows = marks(svg_of((site / "index.html").read_text(encoding="utf-8"), "DCG"))
    # by the judge: 45, 30 and 10 of 60 cases; the experts fail 15 of m-a's, so corrected m-a is 30 of 60
    raw = {m: len(runs["r1"]) / THREE_MODELS_CASES for m, runs in THREE_MODELS.items()}
    corrected = {"m-a": 30 / 60, "m-b": 30 / 60, "m-c": 10 / 60}
    assert [r["model"] for r in rows] == ["m-a", "m-b", "m-c"] and [r["rank"] for r in rows] == [
        "1",
        "2",
        "3",
    ]
    # one x scale: x = left + slope · value, the same for every mark, raw or corrected
    (x_a, _), (x_c, _) = rows[0]["raw"]["at"], rows[2]["raw"]["at"]
    slope = (x_a - x_c) / (raw["m-a"] - raw["m-c"])
    assert slope > 0
    for r in rows:
        for kind, values in (("raw", raw), ("corrected", corrected)):
            assert r[kind]["at"][0] - x_c == pytest.approx(
                slope * (values[r["model"]] - raw["m-c"]), abs=0.02
            )
        # side by side: the corrected mark just below the raw one, in the model's own row
        assert 0 < r["corrected"]["at"][1] - r["raw"]["at"][1] < 20
    assert rows[0]["raw"]["at"][1] < rows[1]["raw"]["at"][1] < rows[2]["raw"]["at"][1]
    # the judge's numbers part all three; corrected, m-a and m-b tie: they share a letter
    assert [r["raw"]["letters"] for r in rows] == ["a", "b", "c"]
    assert [r["corrected"]["letters"] for r in rows] == ["a", "a", "b"]
    # the intervals are the ones the report prints: the main table's bootstrap (--ci), the corrected table's
    main = {r["row"]: r for r in csv_rows(out, "Main results")}
    fixed = {r["Model"]: r for r in csv_rows(out, "Judge-corrected metrics") if r["col1"] == "DCG Acc."}
    for r in rows:
        for kind, low, high in (
            ("raw", main[r["model"]]["DCG Acc. low"], main[r["model"]]["DCG Acc. high"]),
            ("corrected", *(fixed[r["model"]][f"Corrected 95% interval {end}"] for end in ("low", "high"))),
        ):
            ends = [x_c + slope * (float(v) - raw["m-c"]) for v in (low, high)]
            assert r[kind]["ends"] == pytest.approx(ends, abs=0.02)


def csv_rows(out: str, title_start: str) -> list[dict]:
    """A CSV table's rows by its header's names (the row label under "row"; the first cell of a table whose first
    column is its label, "col1")."""
    rows = [r for r in csv.reader(io.StringIO(out)) if r and r[0].startswith(title_start)]
    header = ["title", "row", *rows[0][2:]]
    return [dict(zip(header, r)) | {"col1": r[1]} for r in rows[1:]]


def hostile_figure(corrected: bool = True) -> TaskFigure:
    marks = [
        Mark(HOSTILE, 1, "", Point(0.8, (0.7, 0.9), "a"), Point(0.6, (0.5, 0.7), "a") if corrected else None),
        Mark("中文模型", 2, "", Point(0.55, (0.45, 0.65), "ab"), None, refused=corrected),
        Mark("m-c", 3, "", Point(0.3, None, "b"), Point(0.3, (0.2, 0.4), "b") if corrected else None),
    ]
    return TaskFigure("DCG", "DCG accuracy <b>", [Panel("DCG Acc.", marks)], True, corrected)


def test_a_hostile_model_name_is_text_in_a_well_formed_svg():
    svg = figure_svg(hostile_figure())
    assert "<script>" not in svg and "<img" not in svg and "\x01" not in svg
    tree = ET.fromstring(svg)  # well-formed: a name cannot close the element or open another
    assert not [e for e in tree.iter() if e.tag in ("script", "img", "foreignObject")]
    names = [e.text for e in tree.iter("text") if e.get("class") == "model"]
    shown = HOSTILE.replace("\x01", "\ufffd")
    # a long name cut with "…", whole in the tooltip and the row's data
    assert names[0].endswith("…") and shown.startswith(names[0][:-1]) and names[1:] == ["中文模型", "m-c"]
    assert tree.find(".//g[@class='raw']/title").text.startswith(shown + ": raw 0.800")
    assert tree.find("title").text == "DCG accuracy <b>"
    assert shown in [g.get("data-model") for g in tree.iter("g")]
    refused = [e.text for e in tree.iter("text") if e.get("class") == "refused"]
    assert refused == ["refused"]  # the model whose labels do not allow a correction says so, in its row


def test_without_corrected_only_the_raw_marks_are_drawn_on_a_scale_of_whole_tenths():
    tree = ET.fromstring(figure_svg(hostile_figure(corrected=False)))
    assert [g.get("class") for g in tree.iter("g") if g.get("class") in ("raw", "corrected")] == ["raw"] * 4
    ticks = [float(e.text) for e in tree.iter("text") if e.get("class") == "tick"]
    assert ticks == pytest.approx([0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9])  # every value and bound inside
    circles = [float(c.get("cx")) for c in tree.iter("circle")][1:]  # the legend's first
    assert (circles[0] - circles[2]) / (0.8 - 0.3) == pytest.approx((circles[1] - circles[2]) / (0.55 - 0.3))
    assert not math.isnan(circles[0])


@pytest.mark.slow
def test_the_overview_shows_the_figure_in_a_browser(ranked_dcg, open_page, tmp_path):
    """In Chromium, at 800 px, the DCG figure is drawn (three rows, seen in a screenshot), the page does not scroll
    sideways, and nothing on the page fails."""
    site, _, _ = ranked_dcg
    page = open_page(800)
    page.goto((site / "index.html").as_uri())
    figure = page.locator("svg#ranking-DCG")
    assert figure.is_visible() and figure.locator("g.mark").count() == 3
    box = figure.bounding_box()
    assert 300 < box["width"] <= 800 and box["height"] > 100
    assert page.evaluate("document.documentElement.scrollWidth") <= 800
    assert page.locator("h3#rankings").is_visible()
    shot = tmp_path / "figure.png"
    figure.screenshot(path=str(shot))
    from matplotlib.image import imread

    grey = imread(shot)[..., :3].mean(axis=2) * 255
    assert grey.min() < 100 < grey.max()  # drawn, not blank
    assert not page.errors
