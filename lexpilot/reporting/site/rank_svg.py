"""The ranking figures as inline SVG for the site's overview (tables/rank_figures.py's numbers): per task a figure, per
headline metric a panel, per model a row in rank order with its raw mean ● and, with `--corrected`, its corrected
mean ◆ just below it, each with its 95% interval as a line and its Holm letters in a column at the right, so that the
models that tie read off at a glance. Written by the harness as text: no script, no library, no file beside the page
(the site opens from disk). Every label is escaped (a model's name is untrusted text) and the SVG is well-formed XML.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from lexpilot.reporting.site.case_sections import esc
from lexpilot.reporting.tables.formats import interval_cell, number_cell
from lexpilot.reporting.tables.rank_figures import Mark, Panel, Point, TaskFigure
from lexpilot.reporting.tables.table import METRIC

WIDTH_OF_PLOT = 420  # the plot area's width, in SVG units
ROW = 22  # a model's row with its raw mark; with a corrected mark too, ROW + OFFSET
OFFSET = 10  # the corrected mark below the raw one, in the same row
LETTERS = 70  # a letters column's width
MAX_LABEL = 420  # a longer model name is cut with "…" (its whole name in the mark's tooltip)
# characters XML 1.0 does not allow, even escaped: a name holding one would make the SVG unparsable
NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def text(value: object) -> str:
    """Untrusted text made safe inside SVG in an HTML page, and in XML: escaped, characters XML refuses replaced."""
    return esc(NOT_XML.sub("\ufffd", str(value)))


def text_width(value: str) -> float:
    """About how wide a label is drawn at 12 px: a wide (CJK) character twice a Latin one."""
    return sum(12.0 if ord(c) >= 0x2E80 else 7.0 for c in value)


def cut(value: str, width: float) -> str:
    """A label cut to `width` with "…" at its end."""
    while text_width(value) > width and len(value) > 1:
        value = value[:-2] + "…"
    return value


@dataclass(frozen=True)
class Scale:
    """A panel's x axis: values from `low` to `high` across the plot area from `left`."""

    low: float
    high: float
    left: float

    def x(self, value: float) -> float:
        return self.left + (value - self.low) / (self.high - self.low) * WIDTH_OF_PLOT

    def ticks(self) -> list[float]:
        step = 0.1 if self.high - self.low <= 1.0 + 1e-9 else 0.2
        count = int(round((self.high - self.low) / step))
        return [round(self.low + i * step, 10) for i in range(count + 1)]


def panel_scale(panel: Panel, left: float) -> Scale:
    """The panel's axis: every mean and interval bound of it inside, at whole tenths."""
    points = [p for m in panel.marks for p in (m.raw, m.corrected) if p is not None]
    values = [v for p in points for v in (p.value, *(p.interval or ())) if math.isfinite(v)]
    low, high = math.floor(min(values) * 10) / 10, math.ceil(max(values) * 10) / 10
    return Scale(low, high if high > low else low + 0.1, left)


def row_height(figure: TaskFigure) -> int:
    return ROW + (OFFSET if figure.corrected else 0)


def at(coordinate: float) -> str:
    """A coordinate in SVG units, to a hundredth (a metric's decimals are the tables', never stated here)."""
    return f"{round(coordinate, 2):g}"


def tooltip(mark: Mark, kind: str, point: Point) -> str:
    """A mark's numbers, shown on hover, at the tables' precision: the figure says them to a reader who points at it."""
    interval = "" if point.interval is None else f" {interval_cell(point.interval)}"
    letters = f", letters {point.letters}" if point.letters else ""
    return f"{mark.model}: {kind} {number_cell(point.value, METRIC)}{interval}{letters}"


def point_svg(mark: Mark, kind: str, point: Point, scale: Scale, y: float, letters_x: float) -> str:
    """One estimate: its interval as a line, its mean as a circle (raw) or a diamond (corrected), its letters."""
    x = scale.x(point.value)
    line = (
        ""
        if point.interval is None
        else f'<line class="interval" x1="{at(scale.x(point.interval[0]))}" y1="{at(y)}" '
        f'x2="{at(scale.x(point.interval[1]))}" y2="{at(y)}"/>'
    )
    shape = (
        f'<circle cx="{at(x)}" cy="{at(y)}" r="4.5"/>'
        if kind == "raw"
        else f'<polygon points="{at(x)},{at(y - 5.5)} {at(x + 5.5)},{at(y)} {at(x)},{at(y + 5.5)} '
        f'{at(x - 5.5)},{at(y)}"/>'
    )
    return (
        f'<g class="{kind}" data-model="{text(mark.model)}"><title>{text(tooltip(mark, kind, point))}</title>'
        f'{line}{shape}<text class="letters" x="{at(letters_x)}" y="{at(y + 4)}">{text(point.letters)}</text></g>'
    )


def mark_svg(mark: Mark, scale: Scale, y: float, label_width: float, figure: TaskFigure) -> str:
    """A model's row: its rank and name at the left, raw and corrected side by side, their letters at the right."""
    letters_x = scale.left + WIDTH_OF_PLOT + 20
    name = text(cut(mark.model, label_width - 30))
    parts = [
        f'<g class="mark" data-rank="{mark.rank}"><text class="rank" x="4" y="{at(y + 4)}">{mark.rank}</text>'
        f'<text class="model" x="{at(label_width)}" y="{at(y + 4)}" text-anchor="end">{name}</text>',
        point_svg(mark, "raw", mark.raw, scale, y, letters_x),
    ]
    if mark.corrected is not None:
        below = y + OFFSET
        parts.append(point_svg(mark, "corrected", mark.corrected, scale, below, letters_x + LETTERS))
    elif mark.refused:
        parts.append(
            f'<text class="refused" x="{at(letters_x + LETTERS)}" y="{at(y + OFFSET + 4)}">refused</text>'
        )
    return "".join(parts) + "</g>"


def axis_svg(scale: Scale, top: float, bottom: float) -> str:
    """The panel's grid lines at each tick, the tick values under the rows."""
    out = []
    for tick in scale.ticks():
        x = scale.x(tick)
        out.append(
            f'<line class="grid" x1="{at(x)}" y1="{at(top)}" x2="{at(x)}" y2="{at(bottom)}"/>'
            f'<text class="tick" x="{at(x)}" y="{at(bottom + 13)}" text-anchor="middle">{tick:g}</text>'
        )
    return "".join(out)


def panel_svg(panel: Panel, figure: TaskFigure, top: float, label_width: float) -> tuple[str, float]:
    """One metric's panel from `top`: its name and the letters' column heads, a row per model (a comparable set's
    number before its first model, when there are several), the axis; and where the next panel starts."""
    scale = panel_scale(panel, label_width + 14)
    letters_x = scale.left + WIDTH_OF_PLOT + 20
    heads = (
        f'<text class="head" x="{at(letters_x)}" y="{at(top + 14)}">{"raw" if figure.ranked else ""}</text>'
    )
    if figure.corrected:
        heads += f'<text class="head" x="{at(letters_x + LETTERS)}" y="{at(top + 14)}">corrected</text>'
    out = [f'<g class="panel" data-metric="{text(panel.metric)}">', heads]
    out.append(f'<text class="metric" x="4" y="{at(top + 14)}">{text(panel.metric)}</text>')
    y, shown_set = top + 22, None
    rows = []
    for mark in panel.marks:
        if mark.comparable_set != (shown_set or "") and mark.comparable_set:
            rows.append(f'<text class="set" x="4" y="{at(y + 10)}">set {text(mark.comparable_set)}</text>')
            y += 16
        shown_set = mark.comparable_set
        rows.append(mark_svg(mark, scale, y + ROW / 2, label_width, figure))
        y += row_height(figure)
    out.append(axis_svg(scale, top + 20, y) + "".join(rows) + "</g>")
    return "".join(out), y + 24


def legend_svg(figure: TaskFigure, y: float) -> str:
    """What the marks mean, a line each."""
    raw = (
        f'<g class="raw"><circle cx="10" cy="{at(y)}" r="4.5"/></g>'
        f'<text class="legend" x="20" y="{at(y + 4)}">raw mean, 95% bootstrap interval over cases</text>'
    )
    if not figure.corrected:
        return raw
    y += 16
    return raw + (
        f'<g class="corrected"><polygon points="10,{at(y - 5.5)} 15.5,{at(y)} 10,{at(y + 5.5)} 4.5,{at(y)}"/></g>'
        f'<text class="legend" x="20" y="{at(y + 4)}">corrected for the judge, 95% interval with the expert '
        "sample</text>"
    )


def figure_svg(figure: TaskFigure) -> str:
    """A task's figure: an <svg> that scales to the page's width, its title for a screen reader."""
    label_width = min(
        MAX_LABEL, max(80.0, *(text_width(m.model) + 30 for p in figure.panels for m in p.marks))
    )
    parts, y = [], 26.0 + (16 if figure.corrected else 0)  # below the legend
    for panel in figure.panels:
        drawn, y = panel_svg(panel, figure, y, label_width)
        parts.append(drawn)
    width = label_width + 14 + WIDTH_OF_PLOT + 20 + LETTERS * (2 if figure.corrected else 1)
    title = text(figure.title)
    # no xmlns: inside HTML the parser puts <svg> in its namespace, and the site names no address at all
    return (
        f'<svg class="ranking" id="ranking-{text(figure.task)}" '
        f'viewBox="0 0 {at(width)} {at(y)}" width="{at(width)}" role="img" aria-label="{title}">'
        f"<title>{title}</title>{legend_svg(figure, 12)}{''.join(parts)}</svg>"
    )


def rankings_html(figures: list[TaskFigure]) -> str:
    """The overview's section of ranking figures, one per task ("": none to draw)."""
    if not figures:
        return ""
    notes = "; ".join(dict.fromkeys(n for f in figures for n in f.notes))
    caption = (
        "Models in rank order; models sharing a letter are not different at the ranking's α after Holm's "
        "adjustment" + (f" ({notes})" if notes else "")
    )
    shown = "".join(
        f'<figure class="ranking"><figcaption>{text(f.title)}</figcaption>{figure_svg(f)}</figure>'
        for f in figures
    )
    return f'<h3 id="rankings">Rankings at a glance</h3><p class="note">{text(caption)}</p>{shown}'
