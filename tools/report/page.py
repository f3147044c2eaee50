"""tools/report/page.py — the report's one self-contained HTML page: tables written here, charts drawn in
the browser by report.js with uPlot, both inline, so the page needs no network and no other file.

render(runs, title) -> the page's text. The charts' data travel as JSON in <script id="report-data">
(charts.py's dicts); uPlot (MIT, tools/report/vendor/uPlot.LICENSE) is copied into the page whole.
"""
import datetime
import html
import json
import os

import charts

HERE = os.path.dirname(os.path.abspath(__file__))
VENDOR = os.path.join(HERE, "vendor")

STYLE = """
body { font: 14px/1.4 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif; color: #222;
       margin: 0 auto; padding: 16px 24px; max-width: 1240px; background: #fff; }
h1 { font-size: 22px; margin: 0 0 4px; }
h2 { font-size: 16px; margin: 22px 0 8px; border-bottom: 1px solid #ddd; padding-bottom: 3px; }
.sub { color: #666; font-size: 12px; margin-bottom: 8px; }
.runs span { display: inline-block; margin-right: 16px; }
.swatch { display: inline-block; width: 12px; height: 12px; border-radius: 2px; margin-right: 5px;
          vertical-align: -1px; }
table { border-collapse: collapse; font-size: 12.5px; margin: 4px 0; }
th, td { border: 1px solid #ddd; padding: 3px 8px; text-align: right; white-space: nowrap; }
th { background: #f4f4f4; font-weight: 600; white-space: normal; vertical-align: bottom; }
td:first-child, th:first-child { text-align: left; }
td.text, th.text { text-align: left; white-space: normal; }
td.path, th.path { text-align: left; white-space: normal; overflow-wrap: anywhere; min-width: 10em; }
.grid { display: grid; grid-template-columns: repeat(2, minmax(0, 1fr)); gap: 12px 20px; }
.chart { min-height: 300px; }
.uplot .u-title { font-size: 14px; font-weight: 600; }
.uplot .u-legend { font-size: 12px; }
.note { color: #555; font-size: 12px; }
"""


def _fmt(v):
    """A table cell: floats to 4 significant digits, large integers with separators, None as '-'."""
    if v is None:
        return "-"
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        return f"{v:,.0f}" if abs(v) >= 1e4 else f"{v:.4g}"
    if v == "":
        return '""'
    if isinstance(v, dict):  # an array-of-tables entry, e.g. one of data.sources
        return "{" + ", ".join(f"{k} = {_fmt(x)}" for k, x in v.items()) + "}"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_fmt(x) for x in v) + "]"
    return str(v)


def _table(columns, rows, text_columns=(), path_columns=()):
    """An HTML table of rows (dicts) over columns; cells escaped; text_columns left-aligned and wrapping
    at spaces, path_columns anywhere."""
    def _cls(c):
        return " class=text" if c in text_columns else " class=path" if c in path_columns else ""

    head = "".join(f"<th{_cls(c)}>{html.escape(c)}</th>" for c in columns)
    body = []
    for r in rows:
        cells = "".join(f"<td{_cls(c)}>{html.escape(_fmt(r.get(c)))}</td>" for c in columns)
        body.append(f"<tr>{cells}</tr>")
    return f"<table><tr>{head}</tr>{''.join(body)}</table>"


def _columns(rows):
    """The union of the rows' keys, in first-seen order."""
    cols = []
    for r in rows:
        cols += [k for k in r if k not in cols]
    return cols


def _script_json(data):
    """JSON safe inside <script>: no '</' can end the element early."""
    return json.dumps(data, separators=(",", ":"), allow_nan=False).replace("</", "<\\/")


def render(runs, title="llmtrain report"):
    """The whole page for runs (run_dir.read_run dicts, in the order given); see the file header."""
    chart_list = charts.build_charts(runs)
    colors = [charts.PALETTE[i % len(charts.PALETTE)] for i in range(len(runs))]
    with open(os.path.join(VENDOR, "uPlot.min.css"), encoding="utf-8") as f:
        uplot_css = f.read()
    with open(os.path.join(VENDOR, "uPlot.iife.min.js"), encoding="utf-8") as f:
        uplot_js = f.read()
    with open(os.path.join(HERE, "report.js"), encoding="utf-8") as f:
        report_js = f.read()

    run_list = "".join(f'<span><span class="swatch" style="background:{c}"></span><b>{html.escape(r["name"])}</b> '
                       f'<span class="note">{html.escape(r["path"])}</span></span>' for r, c in zip(runs, colors))
    summary = charts.summary_rows(runs)
    memory = charts.memory_rows(runs)
    diffs = charts.config_differences(runs)
    if len(runs) < 2:
        diff_html = '<p class="note">One run: nothing to compare.</p>'
    elif not diffs:
        diff_html = '<p class="note">The runs\' config.toml files agree on every key (run.run_dir aside).</p>'
    else:
        names = [r["name"] for r in runs]
        rows = [dict([("key", k)] + list(zip(names, vs))) for k, vs in diffs]
        diff_html = _table(["key"] + names, rows, text_columns=names)
    starts = [{"run": r["name"], "start": kind, "at step": step, "log line": text}
              for r in runs for kind, step, text in r["starts"]]
    has_markers = any(c["markers"] for c in chart_list)
    chart_divs = "".join(f'<div class="chart" id="chart-{c["id"]}"></div>' for c in chart_list)
    generated = datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{html.escape(title)}</title>
<style>{uplot_css}</style>
<style>{STYLE}</style>
</head>
<body>
<h1>{html.escape(title)}</h1>
<div class="sub">{len(runs)} run{'s' if len(runs) != 1 else ''}, written by llmtrain-report on {generated}
 (docs/report.md)</div>
<div class="runs">{run_list}</div>
<h2>Summary</h2>
{_table(_columns(summary), summary, path_columns=("dir",))}
<h2>Curves</h2>
<p class="note">Solid: training; dashed with points: validation (or, for HellaSwag, acc_norm; for checkpoints,
the slowest rank's write).{' Vertical lines on the step charts: dashed, a resume from a checkpoint; dotted, a'
 ' step skipped (non-finite loss or gradient norm).' if has_markers else ''} Drag across a chart to zoom,
double-click to zoom out.</p>
<div class="grid">{chart_divs}</div>
<h2>Config differences</h2>
{diff_html}
<h2>Memory</h2>
{_table(_columns(memory), memory)}
<p class="note">At start-up by category, this rank (rank 0); peak device memory and peak RSS: the largest
rank.</p>
<h2>Starts</h2>
{_table(["run", "start", "at step", "log line"], starts, text_columns=("log line",))}
<script type="application/json" id="report-data">{_script_json({"charts": chart_list})}</script>
<script>{uplot_js}</script>
<script>{report_js}</script>
</body>
</html>
"""
