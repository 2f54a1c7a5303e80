// dflow compare page: every run's loss and tau overlaid, over steps and over
// wall time, drawn with the report's plots (report_plot.js) from the JSON
// embedded in the page. body[data-rendered] is "ok" when everything is drawn,
// "error" (with the message at the top) when something failed.
(function () {
  'use strict';
  var D = JSON.parse(document.getElementById('dflow-compare-data').textContent);
  var P = dflowPlot, body = document.body;

  function fail(message) {
    var box = document.getElementById('errors');
    box.hidden = false;
    box.textContent += message + '\n';
    body.dataset.rendered = 'error';
  }
  window.addEventListener('error', function (e) { fail('script error: ' + e.message + ' (line ' + e.lineno + ')'); });

  // JSON has no NaN: a value the run did not record arrives as null.
  function numbers(list) { return list.map(function (v) { return v === null ? NaN : P.num(v); }); }

  function legend() {
    return D.runs.map(function (r) { return '<span><i style="background:' + r.color + '"></i>' + P.esc(r.name) + '</span>'; }).join('');
  }

  // Loss is noisy: each step faint, and a moving mean in the run's color.
  function seriesOf(run, plot) {
    var curve = run[plot.y], xs = numbers(curve[plot.x]), ys = numbers(curve.v);
    if (plot.y === 'tau') return [{ name: run.name, color: run.color, xs: xs, ys: ys, width: 2, dots: true }];
    if (ys.length <= 50) return [{ name: run.name, color: run.color, xs: xs, ys: ys, width: 1.4 }];
    var width = Math.max(5, Math.round(ys.length / 40));
    return [{ name: run.name + ' (each step)', color: run.color + '40', xs: xs, ys: ys, width: 0.8, noReadout: true },
            { name: run.name + ' (mean of ' + width + ')', color: run.color, xs: xs, ys: P.movingMean(ys, width), width: 1.8 }];
  }

  function drawPlots() {
    var el = document.getElementById('compare-plots');
    el.innerHTML = '';
    D.plots.forEach(function (plot) {
      var series = [];
      D.runs.forEach(function (run) { series = series.concat(seriesOf(run, plot)); });
      P.plot(el, { title: plot.title, series: series, legend: legend(), xTitle: plot.xTitle, yMin: plot.y === 'tau' ? 0 : undefined });
    });
  }

  try {
    drawPlots();
    document.getElementById('footer').textContent = 'Generated ' + D.generated + ' by dflow compare from ' + D.runs.length + ' runs.';
    if (body.dataset.rendered !== 'error') body.dataset.rendered = 'ok';
  } catch (e) {
    fail('drawing failed: ' + (e && e.stack ? e.stack : e));
  }
})();
