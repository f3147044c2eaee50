// tools/report/report.js — the report page's script: draws every chart of the page's JSON (charts.py's
// dicts, in <script id="report-data">) with uPlot, which the page holds inline (tools/report/vendor).
// Nothing is computed here beyond axis labels: the data arrive aligned, one column per series.
// Exposes window.llmtrainReport = {spec: the charts' dicts, plots: {id: uPlot instance}} for the browser
// test (tests/report/browser_test.py) and for a reader's console.
(function () {
  "use strict";
  const report = JSON.parse(document.getElementById("report-data").textContent);

  // 1234567 -> "1.23M": axis values of any magnitude in a few characters.
  function short(v) {
    if (v == null) return "";
    const a = Math.abs(v);
    if (a >= 1e9) return +(v / 1e9).toPrecision(3) + "G";
    if (a >= 1e6) return +(v / 1e6).toPrecision(3) + "M";
    if (a >= 1e4) return +(v / 1e3).toPrecision(3) + "k";
    if (a > 0 && a < 1e-2) return v.toExponential(1);
    return +v.toPrecision(4) + "";
  }

  // Vertical lines at the resumes (dashed) and skipped steps (dotted) of the step charts.
  function markersPlugin(markers) {
    return {
      hooks: {
        draw: [function (u) {
          const ctx = u.ctx, top = u.bbox.top, bottom = u.bbox.top + u.bbox.height;
          ctx.save();
          ctx.lineWidth = 1.5 * devicePixelRatio;
          for (const m of markers) {
            const x = Math.round(u.valToPos(m.x, "x", true));
            if (x < u.bbox.left || x > u.bbox.left + u.bbox.width) continue;
            ctx.strokeStyle = m.color;
            ctx.globalAlpha = 0.55;
            ctx.setLineDash(m.kind === "restart" ? [8, 5] : [2, 3]);
            ctx.beginPath();
            ctx.moveTo(x, top);
            ctx.lineTo(x, bottom);
            ctx.stroke();
          }
          ctx.restore();
        }],
      },
    };
  }

  function options(c, width) {
    const axis = (label) => ({label: label, values: (u, vals) => vals.map(short), size: 56,
                              grid: {stroke: "#e4e4e4", width: 1}});
    return {
      title: c.title,
      width: width,
      height: 260,
      legend: {live: false},
      cursor: {drag: {x: true, y: false}},
      scales: {x: {time: false}},
      axes: [axis(c.x), axis(c.y)],
      plugins: [markersPlugin(c.markers)],
      series: [{label: c.x}].concat(c.series.map((s) => ({
        label: s.label,
        stroke: s.color,
        width: 1.6,
        dash: s.dash || undefined,
        spanGaps: true,
        points: {show: s.points, size: 5, fill: s.color, stroke: s.color},
      }))),
    };
  }

  const plots = {};
  for (const c of report.charts) {
    const el = document.getElementById("chart-" + c.id);
    plots[c.id] = new uPlot(options(c, Math.max(el.clientWidth, 320)), c.data, el);
  }
  window.llmtrainReport = {spec: report.charts, plots: plots};
})();
