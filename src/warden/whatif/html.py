"""The what-if report as one self-contained HTML page (``warden whatif --html``).

Everything is inline: a ``<style>`` block and charts drawn here as ``<svg>`` elements
(no script, no font, no image, no network). Every text from the report is escaped.
Charts: faithfulness (reproduced / marked / not reproduced / not checked), the old → new
matrix as stacked bars per old decision (and as a table), and changes by rule, tool,
agent and wire as horizontal bars split into loosened and tightened.
"""

from __future__ import annotations

from html import escape
from typing import Any

DECISIONS = ("allow", "modify", "defer", "ask", "deny")
COLOURS = {
    "allow": "#2e7d32",
    "modify": "#0277bd",
    "defer": "#8e24aa",
    "ask": "#f9a825",
    "deny": "#c62828",
    "loosened": "#e65100",
    "tightened": "#1565c0",
    "rules": "#757575",
    "reproduced": "#2e7d32",
    "marked": "#f9a825",
    "unreproduced": "#c62828",
    "not_checked": "#9e9e9e",
}

_STYLE = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:2rem;color:#212121;
max-width:72rem}
h1{font-size:1.4rem}h2{font-size:1.1rem;margin-top:2rem;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:.5rem 0}td,th{border:1px solid #ddd;padding:.25rem .5rem;
text-align:right;font-variant-numeric:tabular-nums}th{background:#f5f5f5}td.l,th.l{text-align:left}
.bad{color:#c62828;font-weight:600}.good{color:#2e7d32;font-weight:600}
svg text{font-size:12px;fill:#212121}.legend span{display:inline-block;width:.8rem;height:.8rem;
margin:0 .3rem 0 1rem;vertical-align:middle}code{font-size:.85rem}
"""


def _bar_chart(title: str, rows: list[tuple[str, dict[str, int]]], series: tuple[str, ...]) -> str:
    """Horizontal stacked bars: one row per label, one segment per series value."""
    if not rows:
        return f'<p class="empty">{escape(title)}: nothing to show.</p>'
    width, label_w, row_h = 720, 220, 22
    top = max(1, max(sum(v.get(s, 0) for s in series) for _, v in rows))
    height = row_h * len(rows) + 10
    parts = [
        f'<svg role="img" aria-label="{escape(title)}" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" xmlns="http://www.w3.org/2000/svg">',
        f"<title>{escape(title)}</title>",
    ]
    span = width - label_w - 60
    for i, (label, values) in enumerate(rows):
        y = i * row_h + 4
        shown = label if len(label) <= 30 else label[:29] + "…"
        parts.append(f'<text x="0" y="{y + 14}">{escape(shown)}</text>')
        x = float(label_w)
        total = 0
        for s in series:
            n = values.get(s, 0)
            if not n:
                continue
            w = span * n / top
            parts.append(
                f'<rect class="bar {escape(s)}" x="{x:.1f}" y="{y}" width="{max(w, 1):.1f}" '
                f'height="{row_h - 6}" fill="{COLOURS.get(s, "#607d8b")}">'
                f"<title>{escape(label)}: {n} {escape(s)}</title></rect>"
            )
            x += w
            total += n
        parts.append(f'<text x="{x + 4:.1f}" y="{y + 14}">{total}</text>')
    parts.append("</svg>")
    legend = "".join(
        f'<span style="background:{COLOURS.get(s, "#607d8b")}"></span>{escape(s)}' for s in series
    )
    return (
        f"<figure><figcaption>{escape(title)}</figcaption>{''.join(parts)}"
        f'<div class="legend">{legend}</div></figure>'
    )


def _examples(items: list[dict[str, Any]]) -> str:
    if not items:
        return "<p>none</p>"

    def rules(o: dict[str, Any]) -> str:
        return f"{escape(o['decision'])} <code>{escape(', '.join(o['rules']) or 'default')}</code>"

    rows = [
        "<tr><th>leaf</th><th class=l>time</th><th class=l>agent</th><th class=l>wire:tool</th>"
        "<th class=l>old</th><th class=l>new</th><th class=l>mark</th></tr>"
    ]
    for ex in items:
        old, new = ex["old"], ex["new"]
        rows.append(
            f"<tr><td>{escape(str(ex.get('log_index')))}</td>"
            f"<td class=l>{escape(ex['timestamp'])}</td><td class=l>{escape(ex['agent'])}</td>"
            f"<td class=l>{escape(ex['wire'])}:{escape(ex['tool'])}</td>"
            f"<td class=l>{rules(old)}</td><td class=l>{rules(new)}</td>"
            f"<td class=l>{escape(ex.get('mark') or '')}</td></tr>"
        )
    return "<table>" + "".join(rows) + "</table>"


def render_html(doc: dict[str, Any]) -> str:
    """The page for a ``warden whatif`` (or ``--shadow``) report document."""
    c = doc["candidate"]
    f = doc["faithfulness"]
    ch = doc["changes"]
    shadow = "shadow_candidates" in doc
    title = (
        "Shadow divergences"
        if shadow
        else f"What if {c['id']}@{c['version']} had decided the recorded history"
    )
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{escape(title)}</title><style>{_STYLE}</style></head><body>",
        f"<h1>{escape(title)}</h1>",
        f"<p>Candidate <code>{escape(c['digest'])}</code>; source {escape(doc['source']['kind'])} "
        f"<code>{escape(doc['source']['where'])}</code>; {doc['decisions']} decisions"
        + (f" at {doc['decisions_per_second']} decisions/s" if doc["decisions_per_second"] else "")
        + ".</p>",
    ]
    if doc["fail_on"] is None:
        gate = "No gate (--fail-on not given)"
    else:
        verdict = (
            '<span class="bad">FAILED</span>' if not doc["ok"] else '<span class="good">ok</span>'
        )
        gate = f"Gate (--fail-on {escape(doc['fail_on'])}): {verdict}"
    out.append(
        f"<p id=summary>{gate}. "
        f"<span id=loosened>{ch['loosened']}</span> loosened, "
        f"<span id=tightened>{ch['tightened']}</span> tightened, {ch['rules_only']} with "
        "other rules only.</p>"
    )
    for warning in doc.get("warnings") or ():
        out.append(f'<p class="bad">Warning: {escape(warning)}</p>')
    if f is not None:
        faithful = (
            '<span class="good">faithful</span>'
            if f["faithful"]
            else '<span class="bad">not faithful</span>'
        )
        out.append(f"<h2>Faithfulness: the recorded bundles run again</h2><p>{faithful}</p>")
        marked = sum(f["marked"].values())
        out.append(
            _bar_chart(
                "recorded decisions",
                [
                    (
                        "decisions",
                        {
                            "reproduced": f["reproduced"] - marked,
                            "marked": marked,
                            "unreproduced": f["unreproduced"],
                            "not_checked": f["not_checked"],
                        },
                    )
                ],
                ("reproduced", "marked", "unreproduced", "not_checked"),
            )
        )
        if f["examples"]:
            out.append("<h3>Not reproduced</h3>" + _examples(f["examples"]))
    out.append("<h2>Old → new decisions</h2>")
    matrix = doc["matrix"]
    rows = [f"<tr><th class=l>old \\ new</th>{''.join(f'<th>{d}</th>' for d in DECISIONS)}</tr>"]
    for old in DECISIONS:
        if old in matrix:
            cells = "".join(f"<td>{matrix[old].get(new, 0)}</td>" for new in DECISIONS)
            rows.append(f"<tr><th class=l>{old}</th>{cells}</tr>")
    out.append('<table id="matrix">' + "".join(rows) + "</table>")
    out.append(
        _bar_chart(
            "new decisions per old decision",
            [(old, matrix[old]) for old in DECISIONS if old in matrix],
            DECISIONS,
        )
    )
    out.append("<h2>Loosened (deny/ask → allow first)</h2>" + _examples(doc["loosened"]))
    out.append("<h2>Tightened</h2>" + _examples(doc["tightened"]))
    for name in ("rule", "tool", "agent", "wire"):
        groups = doc[f"by_{name}"]
        out.append(f"<h2>Changes by {name}</h2>")
        out.append(
            _bar_chart(
                f"changes by {name}",
                [
                    (
                        key,
                        {
                            "loosened": g["loosened"],
                            "tightened": g["tightened"],
                            "rules": g["changes"] - g["loosened"] - g["tightened"],
                        },
                    )
                    for key, g in list(groups.items())[:25]
                ],
                ("loosened", "tightened", "rules"),
            )
        )
    if not shadow:
        never = doc["never_fired"]
        out.append(
            "<h2>Candidate rules that never fired</h2><p id=never>"
            + (", ".join(f"<code>{escape(r)}</code>" for r in never) or "none")
            + "</p>"
        )
    out.append("</body></html>\n")
    return "\n".join(out)
