"""HTML building blocks of the watchdog's web UI: the page frame, tables, amounts and the usage chart (the
recommendation section is watchdog.views.ui.recommendations). Plain functions returning strings; no template
engine, no JavaScript.

Everything that came from the cluster or the database (job names, labels, summaries, messages) is
user-controlled: it goes through `esc` (text and attributes) or `qs` (query strings) and nowhere else.
"""

from __future__ import annotations

import html
import math
from collections.abc import Iterable, Sequence
from datetime import datetime
from urllib.parse import urlencode

STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:0;color:#1d2329;background:#f6f7f9}
header{background:#1f3b57;color:#fff;padding:8px 16px;display:flex;gap:18px;align-items:baseline}
header a{color:#dbe8f5;text-decoration:none}header b{font-size:16px;margin-right:12px}
main{padding:12px 16px;max-width:1400px}h1{font-size:20px;margin:6px 0 12px}h2{font-size:16px;margin:18px 0 6px}
table{border-collapse:collapse;background:#fff;width:100%}th,td{border-bottom:1px solid #e3e6ea;padding:4px 8px;
text-align:left;vertical-align:top}th{background:#eef1f4;font-weight:600}td.n{text-align:right;
font-variant-numeric:tabular-nums}.firing,.critical{color:#b42318;font-weight:600}.warning{color:#a15c00}
.resolved{color:#2e7d32}.pending{color:#6b7280}.bar{display:inline-block;height:8px;background:#4c8bf5}
.muted{color:#6b7280}pre{background:#fff;border:1px solid #d0d5db;padding:8px;overflow:auto}
form.inline{display:inline}form{margin:8px 0}input,select,button{font:inherit;margin:2px}
.msg{padding:6px 10px;background:#fff4d6;border:1px solid #f2c94c;margin:8px 0}
.err{padding:6px 10px;background:#fde8e8;border:1px solid #f5a3a3;margin:8px 0}
nav.pages a{margin-right:10px}svg{background:#fff;border:1px solid #d0d5db}
"""

NAV = (("/ui/fleet", "Fleet"), ("/ui/queues", "Queues"), ("/ui/jobs", "Jobs"), ("/ui/alerts?state=firing", "Alerts"),
       ("/ui/silences", "Silences"), ("/ui/notifications", "Notifications"), ("/docs", "API"))


def esc(value: object) -> str:
    """Text or attribute value, HTML-escaped (quotes too)."""
    return html.escape("" if value is None else str(value), quote=True)


def qs(path: str, **params: object) -> str:
    """`path?a=b` with the non-empty parameters URL-encoded, escaped for an href."""
    query = urlencode({k: str(v) for k, v in params.items() if v not in (None, "")})
    return esc(f"{path}?{query}" if query else path)


def link(href: str, text: object) -> str:
    """`href` must already be escaped (built with `qs` or `esc`)."""
    return f'<a href="{href}">{esc(text)}</a>'


def page(title: str, body: str, status_line: str = "") -> str:
    nav = "".join(f'<a href="{esc(href)}">{esc(text)}</a>' for href, text in NAV)
    note = f'<div class="msg">{esc(status_line)}</div>' if status_line else ""
    return (f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{esc(title)} · volcano-watchdog'
            f'</title><meta name="viewport" content="width=device-width"><style>{STYLE}</style></head><body>'
            f'<header><b>volcano-watchdog</b>{nav}</header><main><h1>{esc(title)}</h1>{note}{body}</main>'
            "</body></html>")


def table(headers: Sequence[str], rows: Iterable[Sequence[str]], numeric: frozenset[int] = frozenset()) -> str:
    """Cells are HTML already (escape them when building the rows); `numeric`: right-aligned columns."""
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f'<td class="n">{c}</td>' if i in numeric else f"<td>{c}</td>"
                                    for i, c in enumerate(row)) + "</tr>" for row in rows)
    if not body:
        body = f'<tr><td colspan="{len(headers)}" class="muted">nothing here</td></tr>'
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def when(value: datetime | None) -> str:
    return esc(value.strftime("%Y-%m-%d %H:%M:%S") if value is not None else "")


def number(value: float) -> str:
    """Three significant digits, never an exponent: 0.25, 6.53, 442, 2,290."""
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.3g}"


def cores(value: float | None) -> str:
    return "" if value is None else esc(number(value))


def gib(value: float | None) -> str:
    return "" if value is None else esc(f"{number(value / 2**30)} GiB")


def percent(value: float | None) -> str:
    """A ratio as a percentage with a small bar (capped at 100 % wide)."""
    if value is None or not math.isfinite(value):
        return '<span class="muted">&ndash;</span>'
    width = max(0, min(100, round(value * 100)))
    return f'{value * 100:.0f}% <span class="bar" style="width:{width // 2}px"></span>'


def amount(resource: str, value: object) -> str:
    """One amount in base units: memory in GiB, the rest (cores, devices) as numbers; stored JSON may
    hold anything, so what is not a number is shown as it is."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return esc("unlimited" if value is None else value)
    return gib(float(value)) if resource == "memory" else cores(float(value))


def amounts(values: dict[str, float]) -> str:
    """A queue's resource list: cpu in cores, memory in GiB, the rest as counts."""
    parts = [f"{esc(name)}: {amount(name, value)}" for name, value in sorted(values.items())]
    return ", ".join(parts) or '<span class="muted">&ndash;</span>'


def chart(points: Sequence[tuple[datetime, float, float]], unit: str, title: str) -> str:
    """An inline SVG line chart of usage (blue) against request (grey, dashed) over time; `points` are
    (time, used, requested) sorted by time. No JavaScript: it is read as it is drawn."""
    if not points:
        return f'<p class="muted">{esc(title)}: no usage recorded yet</p>'
    w, h, pad = 640, 160, 30
    t0, t1 = points[0][0].timestamp(), points[-1][0].timestamp()
    top = max(max(p[1] for p in points), max(p[2] for p in points)) or 1.0
    span = (t1 - t0) or 1.0

    def xy(t: datetime, v: float) -> str:
        return f"{pad + (t.timestamp() - t0) / span * (w - 2 * pad):.1f},{h - pad - v / top * (h - 2 * pad):.1f}"

    used = " ".join(xy(t, u) for t, u, _ in points)
    asked = " ".join(xy(t, r) for t, _, r in points)
    return (f'<figure><figcaption>{esc(title)} ({esc(unit)}; max {esc(number(top))})</figcaption>'
            f'<svg width="{w}" height="{h}" viewBox="0 0 {w} {h}" role="img" aria-label="{esc(title)}">'
            f'<polyline fill="none" stroke="#9aa3ad" stroke-dasharray="4 3" points="{asked}"/>'
            f'<polyline fill="none" stroke="#2563eb" stroke-width="2" points="{used}"/>'
            f'<text x="{pad}" y="14" font-size="11">used (blue) vs requested (grey)</text>'
            f'<text x="{pad}" y="{h - 8}" font-size="11">{when(points[0][0])}</text>'
            f'<text x="{w - pad}" y="{h - 8}" font-size="11" text-anchor="end">{when(points[-1][0])}</text>'
            "</svg></figure>")
