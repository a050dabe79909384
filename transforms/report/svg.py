"""Inline SVG bar charts for the report: no script, no font or file to fetch."""

from __future__ import annotations

from html import escape
from typing import Optional, Sequence

LABEL_WIDTH = 230
BAR_HEIGHT = 20
GAP = 6


def number(value: float) -> str:
    """A value as the chart prints it: an integer without decimals, else 2 decimals."""
    return f'{int(value):,}' if float(value).is_integer() else f'{value:,.2f}'


def bar_chart(rows: Sequence[tuple[str, float]], title: str, width: int = 720, unit: str = '',
              decimals: Optional[int] = None) -> str:
    """Horizontal bars, one per `(label, value)`, scaled to the largest value.

    Args:
      rows: The bars.
      title: The chart's accessible name.
      width: Its width in pixels.
      unit: Printed after each value.
      decimals: Digits after the point of every value; by default `number`'s.

    Returns:
      An `<svg>` element with a `<title>` (its accessible name).
    """
    def shown(value):
        return number(value) if decimals is None else f'{value:,.{decimals}f}'

    top = max((v for _, v in rows), default=0) or 1
    room = width - LABEL_WIDTH - 90
    height = len(rows) * (BAR_HEIGHT + GAP) + GAP
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" role="img" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}"><title>{escape(title)}</title>']
    for i, (label, value) in enumerate(rows):
        y = GAP + i * (BAR_HEIGHT + GAP)
        bar = max(1.0, room * value / top) if value else 0.0
        out.append(
            f'<text x="{LABEL_WIDTH - 8}" y="{y + 14}" text-anchor="end" class="label">{escape(label)}</text>'
            f'<rect x="{LABEL_WIDTH}" y="{y}" width="{bar:.1f}" height="{BAR_HEIGHT}" class="bar"/>'
            f'<text x="{LABEL_WIDTH + bar + 6:.1f}" y="{y + 14}" class="value">{shown(value)}{escape(unit)}</text>')
    out.append('</svg>')
    return ''.join(out)
