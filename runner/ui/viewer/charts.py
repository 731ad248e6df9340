"""Charts as inline SVG, generated here: no script, no network, nothing to load.

Drawn in Python rather than with a JavaScript chart library because every chart is static (one
series per job, known when the page is written): an SVG of a 200-call job is a few kilobytes,
renders before any script runs, and the page stays one file that opens from disk.

Guarantees:
- A chart's size is bounded by its series and marks, never by the text of the run: every label is
  escaped, so a job or stage name is never markup.
- A series of more than :data:`MOST_POINTS` points is drawn through at most that many (:func:`thin`:
  the lowest and highest of each run of neighbours, so every peak and drop still shows).
- Marks too many to draw one by one (:func:`group_marks`) are counted per span of x instead: at most
  ``most`` groups, each one stacked bar under the plot, its counts by kind in its hover title.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from html import escape

from ...compaction.stages import Stage
from ..report import STATUS_STYLE

OTHER_STAGE_COLOR = "#555"  # an event line of no known stage
GROUP_STRIP = 26  # pixels under a line chart's plot for its groups of marks
MOST_POINTS = 1_600  # points of one series drawn, at most (about two per pixel of a 760-pixel chart)
# a status's chart colour: that of its style in the terminal's run table (report.STATUS_STYLE)
STYLE_COLORS = {
    "green": "#2ca02c",
    "red": "#d62728",
    "yellow": "#ff7f0e",
    "magenta": "#9467bd",
    "cyan": "#1f77b4",
    "dim": "#aaaaaa",
}
STATUS_COLORS: dict[str, str] = {status: STYLE_COLORS[style] for status, style in STATUS_STYLE.items()}


def stage_color(stage: str) -> str:
    """A compaction stage's chart colour."""
    known = Stage.named(stage)
    return known.color if known else OTHER_STAGE_COLOR


@dataclass(frozen=True)
class Series:
    label: str
    points: Sequence[tuple[float, float]]
    color: str
    right: bool = False  # drawn against the right-hand axis


@dataclass(frozen=True)
class Mark:
    """A vertical line at ``x``: a compaction before a model call (``kind``: its stage)."""

    x: float
    label: str
    color: str
    kind: str = ""


@dataclass(frozen=True)
class MarkGroup:
    """The marks of ``start < x <= end``, counted by kind: ``(kind, color, count)``, most first."""

    start: float
    end: float
    counts: tuple[tuple[str, str, int], ...]

    @property
    def total(self) -> int:
        return sum(n for _, _, n in self.counts)


def thin(points: Sequence[tuple[float, float]], most: int = MOST_POINTS) -> Sequence[tuple[float, float]]:
    """``points`` when they are at most ``most``; else, of each run of neighbours, the lowest and the
    highest (in their order): at most ``most`` points, every peak and drop kept."""
    if len(points) <= most:
        return points
    runs = most // 2
    out: list[tuple[float, float]] = []
    for i in range(runs):
        chunk = points[i * len(points) // runs : (i + 1) * len(points) // runs]
        low = min(range(len(chunk)), key=lambda k: chunk[k][1])
        high = max(range(len(chunk)), key=lambda k: chunk[k][1])
        out += [chunk[k] for k in sorted({low, high})]
    return out


def group_step(x_max: float, most: int) -> int:
    """The width of a group of marks: a round number (1, 2, 5 times a power of ten) that makes at most
    ``most`` groups from 0 to ``x_max``."""
    step = 1
    while x_max / step > most:
        for factor in (2, 2.5, 2):  # 1, 2, 5, 10, 20, 50, ...
            step = int(step * factor)
            if x_max / step <= most:
                break
    return step


def group_marks(marks: Sequence[Mark], *, x_max: float, most: int) -> list[MarkGroup]:
    """``marks`` counted per span of x (spans of :func:`group_step`), only the spans that have any."""
    step = group_step(x_max, most)
    spans: dict[int, dict[str, list]] = {}
    for mark in marks:
        index = max(int(-(-mark.x // step)) - 1, 0)  # (index * step, (index + 1) * step]
        count = spans.setdefault(index, {}).setdefault(mark.kind, [mark.color, 0])
        count[1] += 1
    return [
        MarkGroup(
            index * step,
            (index + 1) * step,
            tuple(sorted(((k, c, n) for k, (c, n) in kinds.items()), key=lambda t: (-t[2], t[0]))),
        )
        for index, kinds in sorted(spans.items())
    ]


def _ticks(top: float) -> list[float]:
    """Four or five round values from 0 to at least ``top``."""
    if top <= 0:
        return [0.0, 1.0]
    step = 10 ** len(str(int(top / 4))) / 10 if top >= 4 else 1.0
    for factor in (1, 2, 2.5, 5, 10):
        if top / (step * factor) <= 5:
            step *= factor
            break
    count = int(-(-top // step))
    return [step * i for i in range(count + 1)]


def _fmt(value: float) -> str:
    if value >= 1e6:
        return f"{value / 1e6:g}M"
    if value >= 1e3:
        return f"{value / 1e3:g}k"
    return f"{value:g}"


def _head(title: str, width: int, height: int, left: int) -> list[str]:
    """A chart's opening ``<svg>`` tag and its title."""
    return [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" viewBox="0 0 {width} {height}" '
        f'width="{width}" height="{height}" role="img" aria-label="{escape(title)}">',
        f'<text x="{left}" y="16" class="ct">{escape(title)}</text>',
    ]


def _value_axis(
    ticks: list[float], y_of: Callable[[float], float], *, left: int, plot_w: int, money: bool
) -> list[str]:
    """The left axis: a grid line across the plot and a label (dollars when ``money``) per tick."""
    out = []
    for tick in ticks:
        y = y_of(tick)
        label = f"${tick:.2f}" if money else _fmt(tick)
        out.append(
            f'<line x1="{left}" x2="{left + plot_w}" y1="{y:.1f}" y2="{y:.1f}" class="grid"/>'
            f'<text x="{left - 4}" y="{y + 4:.1f}" class="ax" text-anchor="end">{label}</text>'
        )
    return out


def _axis_title(text: str, x: float, y: float, angle: int) -> str:
    """An axis's title at ``(x, y)``, turned ``angle`` degrees about that point."""
    return (
        f'<text x="{x}" y="{y}" class="ax" text-anchor="middle" '
        f'transform="rotate({angle} {x} {y})">{escape(text)}</text>'
    )


def line_chart(
    series: Sequence[Series],
    *,
    title: str,
    x_label: str,
    left_label: str,
    right_label: str = "",
    limits: Sequence[tuple[float, str, bool]] = (),
    marks: Sequence[Mark] = (),
    groups: Sequence[MarkGroup] = (),
    group_label: str = "",
    width: int = 760,
    height: int = 260,
    money: bool = False,
) -> str:
    """An SVG line chart; ``limits`` are horizontal lines ``(value, label, right_axis)``; ``marks`` each
    a vertical line; ``groups`` each a stacked bar in a strip under the plot, as high as its count
    against the largest group's, its counts in its title (``group_label`` names what they count)."""
    strip = GROUP_STRIP if groups else 0
    left, right, top, bottom = 58, 58 if any(s.right for s in series) else 16, 40, 34 + strip
    height += strip
    plot_w, plot_h = width - left - right, height - top - bottom
    xs = [x for s in series for x, _ in s.points] + [m.x for m in marks] + [g.end for g in groups]
    x_max = max(xs, default=1) or 1
    tops = {
        side: max(
            [y for s in series if s.right == side for _, y in s.points]
            + [v for v, _, r in limits if r == side],
            default=0,
        )
        for side in (False, True)
    }
    ticks = {side: _ticks(tops[side] * 1.05) for side in (False, True)}

    def px(x: float) -> float:
        return left + plot_w * x / x_max

    def py(y: float, side: bool) -> float:
        return top + plot_h - plot_h * y / (ticks[side][-1] or 1)

    out = _head(title, width, height, left)
    out += _value_axis(ticks[False], lambda tick: py(tick, False), left=left, plot_w=plot_w, money=money)
    if right > 16:
        for tick in ticks[True]:
            out.append(
                f'<text x="{left + plot_w + 4}" y="{py(tick, True) + 4:.1f}" class="ax">{_fmt(tick)}</text>'
            )
    out += [
        f'<text x="{px(tick):.1f}" y="{top + plot_h + strip + 14}" class="ax" '
        f'text-anchor="middle">{_fmt(tick)}</text>'
        for tick in _ticks(x_max)
        if tick <= x_max
    ]
    tallest = max((g.total for g in groups), default=0)
    for group in groups:
        title = _group_title(group, x_label=x_label, group_label=group_label)
        bars = _group_bars(
            group,
            (px(group.start), px(group.end)),
            base=top + plot_h + strip - 2,
            strip=strip,
            tallest=tallest,
        )
        out.append(f'<g class="group"><title>{escape(title)}</title>{bars}</g>')
    out.append(
        f'<text x="{left + plot_w / 2}" y="{height - 4}" class="ax" text-anchor="middle">'
        f"{escape(x_label)}</text>"
    )
    out.append(_axis_title(left_label, 12, top + plot_h / 2, -90))
    if right_label:
        out.append(_axis_title(right_label, width - 6, top + plot_h / 2, 90))
    for mark in marks:
        x = px(mark.x)
        out.append(
            f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{top}" y2="{top + plot_h}" stroke="{mark.color}" '
            f'class="mark"><title>{escape(mark.label)}</title></line>'
        )
    for value, label, side in limits:
        y = py(value, side)
        out.append(
            f'<line x1="{left}" x2="{left + plot_w}" y1="{y:.1f}" y2="{y:.1f}" class="limit"/>'
            f'<text x="{left + plot_w - 2}" y="{y - 3:.1f}" class="ax lim" text-anchor="end">'
            f"{escape(label)}</text>"
        )
    for s in series:
        if not s.points:
            continue
        coords = " ".join(f"{px(x):.1f},{py(y, s.right):.1f}" for x, y in thin(s.points))
        out.append(
            f'<polyline points="{coords}" fill="none" stroke="{s.color}" stroke-width="1.6" '
            f'class="line"><title>{escape(s.label)}</title></polyline>'
        )
    out += _legend(series, left)
    out.append("</svg>")
    return "".join(out)


def _group_bars(group: MarkGroup, span: tuple[float, float], *, base: float, strip: int, tallest: int) -> str:
    """A group of marks as one stacked bar over ``span`` (its left and right in pixels), standing on
    ``base``, as high against ``strip`` as its count against the ``tallest`` group's."""
    x0, x1 = span
    y = base
    parts = []
    for _, color, count in group.counts:
        h = (strip - 6) * count / tallest
        y -= h
        parts.append(
            f'<rect x="{x0 + 0.5:.1f}" y="{y:.1f}" width="{max(x1 - x0 - 1, 0.5):.1f}" '
            f'height="{h:.1f}" fill="{color}"/>'
        )
    return "".join(parts)


def _group_title(group: MarkGroup, *, x_label: str, group_label: str) -> str:
    """A group's hover title: its span of x and its counts by kind."""
    first, last = int(group.start) + 1, int(group.end)
    kinds = ", ".join(f"{kind} {count:,}" for kind, _, count in group.counts)
    return f"{x_label} {first:,}-{last:,}: {group.total:,} {group_label} ({kinds})"


def _legend(series: Sequence[Series], left: int) -> list[str]:
    """The legend, a line of its own under the title, from ``left``: each series' colour and label."""
    out = []
    legend_x = left
    for s in series:
        out.append(
            f'<rect x="{legend_x}" y="25" width="10" height="3" fill="{s.color}"/>'
            f'<text x="{legend_x + 14}" y="30" class="ax">{escape(s.label)}</text>'
        )
        legend_x += 14 + 7 * len(s.label) + 16
    return out


def bar_chart(
    bars: Sequence[tuple[str, float, str]],
    *,
    title: str,
    y_label: str,
    money: bool = False,
    width: int = 760,
    height: int = 200,
) -> str:
    """One bar per ``(label, value, status)``, coloured by status, in the given order."""
    left, right, top, bottom = 58, 12, 26, 14
    plot_w, plot_h = width - left - right, height - top - bottom
    ticks = _ticks(max((v for _, v, _ in bars), default=0) * 1.05)
    scale = ticks[-1] or 1
    step = plot_w / max(len(bars), 1)
    out = _head(title, width, height, left)
    out += _value_axis(
        ticks, lambda tick: top + plot_h - plot_h * tick / scale, left=left, plot_w=plot_w, money=money
    )
    out.append(_axis_title(y_label, 12, top + plot_h / 2, -90))
    for i, (label, value, status) in enumerate(bars):
        h = plot_h * value / scale
        shown = f"${value:.4f}" if money else f"{value:g}"
        out.append(
            f'<rect x="{left + i * step:.1f}" y="{top + plot_h - h:.1f}" width="{max(step - 1, 0.5):.1f}" '
            f'height="{h:.1f}" fill="{STATUS_COLORS.get(status, "#888")}" class="bar">'
            f"<title>{escape(label)}: {shown} ({escape(status)})</title></rect>"
        )
    out.append("</svg>")
    return "".join(out)
