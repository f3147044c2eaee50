"""tools/report/charts.py — the report's charts and tables, computed from runs read by run_dir.read_run.

Every chart is a plain dict the page's script (report.js) draws with uPlot without computing anything:
  {"id", "title", "x": x-axis label, "y": y-axis label, "data": [xs, ys_1, ..., ys_n] (aligned: None
   where a series has no point at that x), "series": [{"label", "color", "dash", "points"}],
   "markers": [{"x", "color", "kind": "restart" | "skipped"}]}
so the number of series a chart must show is len(series) (the browser test checks it). Series longer
than MAX_POINTS are thinned (thin). A chart with no data in any run is left out. Colors: one per run
(PALETTE, in the order given), train solid, validation dashed with points; a mixture's sources
(losses.tsv kinds val:<source>, tokens:<source>) get a dash pattern each within their run's color.
"""
MAX_POINTS = 4000  # per series: longer ones are thinned to bucket means (thin)
MAX_MARKED = 120  # a series with "points" draws them only up to this many points
DASHED = [6, 4]  # validation, acc_norm, checkpoint writes
SOURCE_DASH = [None, [6, 4], [2, 3], [10, 3, 2, 3]]  # a mixture's sources within one run's color
PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"]


def thin(pts, max_points=MAX_POINTS):
    """[(x, y)] with at most max_points points: past that, consecutive buckets of ceil(len / max_points)
    points each become one point at their mean x and mean y (a moving average; a page of 280k-step runs
    stays a few MB and draws at once). Shorter series come back as they are."""
    if len(pts) <= max_points:
        return pts
    k = -(-len(pts) // max_points)
    out = []
    for i in range(0, len(pts), k):
        b = pts[i:i + k]
        out.append((sum(x for x, _ in b) / len(b), sum(y for _, y in b) / len(b)))
    return out


def _align(columns):
    """[(label-free) [(x, y)] per series] -> [xs, ys_1, ...] over the sorted union of the xs."""
    xs = sorted({x for col in columns for x, _ in col})
    index = {x: i for i, x in enumerate(xs)}
    data = [xs]
    for col in columns:
        ys = [None] * len(xs)
        for x, y in col:
            ys[index[x]] = y
        data.append(ys)
    return data


def _chart(cid, title, x, y, lines, markers=()):
    """lines: [(series dict, [(x, y)])]; None when every line is empty."""
    lines = [(s, pts) for s, pts in lines if pts]
    if not lines:
        return None
    longest = max(len(pts) for _, pts in lines)
    if longest > MAX_POINTS:
        title += f" (means of {-(-longest // MAX_POINTS)} points)"
        lines = [(s, thin(pts)) for s, pts in lines]
    # Points only where they can be told apart; a long series is a line.
    lines = [(dict(s, points=s["points"] and len(pts) <= MAX_MARKED), pts) for s, pts in lines]
    return {"id": cid, "title": title, "x": x, "y": y, "data": _align([pts for _, pts in lines]),
            "series": [s for s, _ in lines], "markers": list(markers)}


def _series(label, color, dash=None, points=False):
    """dash: None (solid) or a canvas dash pattern [on, off, ...] in pixels."""
    return {"label": label, "color": color, "dash": dash, "points": points}


def _by_source(runs, colors, prefix, points):
    """Lines of the losses.tsv kinds "<prefix><source>" (a mixture, docs/data.md "Sources"): with one
    run a color per source; with several the run's color and a dash pattern per source."""
    sources = sorted({k[len(prefix):] for r in runs for k in r["evals"] if k.startswith(prefix)})
    lines = []
    for r, c in zip(runs, colors):
        for i, src in enumerate(sources):
            if len(runs) > 1:
                s = _series(f"{r['name']} {src}", c, SOURCE_DASH[i % len(SOURCE_DASH)], points)
            else:
                s = _series(src, PALETTE[i % len(PALETTE)], None, points)
            lines.append((s, r["evals"].get(prefix + src, [])))
    return lines


def _markers(runs, colors):
    """Vertical lines on the step charts: each resume (at its step) and each skipped step, per run."""
    out = []
    for run, c in zip(runs, colors):
        out += [{"x": step, "color": c, "kind": "restart"} for kind, step, _ in run["starts"] if kind == "resume"]
        out += [{"x": step, "color": c, "kind": "skipped"} for step in run["skipped"]]
    return out


def build_charts(runs):
    """The charts of the report for runs (a list of read_run dicts), in page order; see the file header."""
    colors = [PALETTE[i % len(PALETTE)] for i in range(len(runs))]
    multi = len(runs) > 1
    marks = _markers(runs, colors)

    def name(run, what):
        return f"{run['name']} {what}" if multi else what

    def by_tokens(run, pts):
        tps = run["tokens_per_step"]
        return [(s * tps, v) for s, v in pts] if tps else []

    loss_lines, token_lines = [], []
    for run, c in zip(runs, colors):
        loss_lines += [(_series(name(run, "train"), c), run["train"]),
                       (_series(name(run, "val"), c, dash=DASHED, points=True), run["val"])]
        token_lines += [(_series(name(run, "train"), c), by_tokens(run, run["train"])),
                        (_series(name(run, "val"), c, dash=DASHED, points=True), by_tokens(run, run["val"]))]
    charts = [
        _chart("loss_step", "Loss by step", "step", "loss (nats/token)", loss_lines, marks),
        _chart("loss_tokens", "Loss by tokens", "training tokens", "loss (nats/token)", token_lines),
        _chart("val_sources", "Validation loss by source", "step", "loss (nats/token)",
               _by_source(runs, colors, "val:", points=True)),
        _chart("tokens_sources", "Training tokens by source", "step", "tokens",
               _by_source(runs, colors, "tokens:", points=False)),
        _chart("lr", "Learning rate", "step", "lr", [(_series(r["name"], c), r["lr"]) for r, c in zip(runs, colors)],
               marks),
        _chart("grad_norm", "Gradient norm (before clipping)", "step", "L2 norm",
               [(_series(r["name"], c), r["grad_norm"]) for r, c in zip(runs, colors)], marks),
        _chart("throughput", "Throughput (over each log interval)", "step", "tokens/s",
               [(_series(r["name"], c, points=True), r["throughput"]) for r, c in zip(runs, colors)]),
        _chart("mfu", "Model FLOPs utilization", "step", "MFU (%)",
               [(_series(r["name"], c, points=True), [(s, 100 * v) for s, v in r["mfu"]])
                for r, c in zip(runs, colors)]),
    ]
    eval_kinds = sorted({k for r in runs for k in r["evals"] if not k.startswith(("val:", "tokens:"))})
    hs = [k for k in ("hellaswag", "hellaswag_norm") if k in eval_kinds]
    if hs:
        label = {"hellaswag": "acc", "hellaswag_norm": "acc_norm"}
        dash = {"hellaswag": None, "hellaswag_norm": DASHED}
        charts.append(_chart("hellaswag", "HellaSwag accuracy", "step", "accuracy (%)",
                             [(_series(name(r, label[k]), c, dash=dash[k], points=True),
                               [(s, 100 * v) for s, v in r["evals"].get(k, [])])
                              for r, c in zip(runs, colors) for k in hs]))
    for k in eval_kinds:
        if k not in hs:
            charts.append(_chart(f"eval_{k}", f"Evaluation '{k}'", "step", k,
                                 [(_series(r["name"], c, points=True), r["evals"].get(k, []))
                                  for r, c in zip(runs, colors)]))
    charts.append(_chart("checkpoint_blocked", "Checkpoints: training blocked", "step", "seconds",
                         [(_series(name(r, "blocked"), c, points=True), [(s, b) for s, b, _ in r["checkpoints"]])
                          for r, c in zip(runs, colors)] +
                         [(_series(name(r, "write (slowest rank)"), c, dash=DASHED, points=True),
                           [(s, w) for s, _, w in r["checkpoints"]]) for r, c in zip(runs, colors)]))
    return [c for c in charts if c]


def _last(pts):
    """The y of the last (x, y), or None for no points."""
    return pts[-1][1] if pts else None


def summary_rows(runs):
    """One row per run: the figures a reader compares first (None where the run dir has none)."""
    rows = []
    for r in runs:
        last_step = max([s for s, _ in r["train"]] + [s for s in r["skipped"]] + [0])
        tput = [v for _, v in r["throughput"]]
        rows.append({
            "run": r["name"], "dir": r["path"], "steps": last_step,
            "tokens": last_step * r["tokens_per_step"] if r["tokens_per_step"] else None,
            "final train loss": _last(r["train"]),
            "last val loss": _last(r["val"]),
            "best val loss": min((v for _, v in r["val"]), default=None),
            "HellaSwag acc": _last(r["evals"].get("hellaswag", [])),
            "median tokens/s": sorted(tput)[len(tput) // 2] if tput else None,
            "starts": max(len(r["starts"]), 1),
            "resumed at": ", ".join(str(s) for k, s, _ in r["starts"] if k == "resume") or "-",
            "skipped steps": len(r["skipped"]),
            "checkpoints": len(r["checkpoints"]),
            "max blocked (s)": max((b for _, b, _ in r["checkpoints"]), default=None),
        })
    return rows


def memory_rows(runs):
    """One row per run: the start-up memory by category (MiB), peak device memory and the last peak RSS
    (MiB, the largest rank)."""
    rows = []
    for r in runs:
        row = {"run": r["name"]}
        row.update({f"{k} (MiB)": v for k, v in r["memory"]})
        row["peak device (MiB)"] = max(r["peak_device"].values(), default=None)
        row["peak RSS (MiB)"] = max(r["peak_rss"][-1][1].values(), default=None) if r["peak_rss"] else None
        rows.append(row)
    return rows


# Keys that differ between any two runs without saying anything about the training.
NOT_A_DIFFERENCE = {"run.run_dir"}


def config_differences(runs):
    """The config keys whose values differ between the runs: [(key, [value per run])], sorted by key.
    A key a run's config.toml lacks shows as None. One run: no differences."""
    keys = sorted({k for r in runs for k in r["config"]} - NOT_A_DIFFERENCE)
    out = []
    for k in keys:
        values = [r["config"].get(k) for r in runs]
        if any(v != values[0] for v in values[1:]):
            out.append((k, values))
    return out
