// dflow run report: draws every plot as inline SVG from the JSON embedded in
// the page (see report/page_data.hpp for the slim record keys). No network,
// except that a live page (served by dflow train --serve) polls its server.
// When everything is drawn, body[data-rendered] is "ok"; an error sets it to
// "error" and shows the message at the top of the page (tests look for both).
(function () {
  'use strict';
  var D = JSON.parse(document.getElementById('dflow-data').textContent);
  var body = document.body;
  var P = dflowPlot, esc = P.esc, num = P.num, fmt = P.fmt, si = P.si, count = P.count, pct = P.pct, duration = P.duration;
  var extent = P.extent, movingMean = P.movingMean, EVENT_KINDS = P.EVENT_KINDS;
  var PALETTE = ['#2f6fd6', '#d6453d', '#2e9d5b', '#e08a1e', '#8e5bd0', '#1aa3b8', '#c2497f', '#6b7891', '#9c7a12', '#4a3fb5'];

  function fail(message) {
    var box = document.getElementById('errors');
    box.hidden = false;
    box.textContent += message + '\n';
    body.dataset.rendered = 'error';
  }
  window.addEventListener('error', function (e) { fail('script error: ' + e.message + ' (line ' + e.lineno + ')'); });

  function codeify(text) { return esc(text).replace(/`([^`]+)`/g, '<code>$1</code>'); }

  // ---------- series from slim records
  function series() {
    var R = D.records, S = { steps: [], loss: [], gn: [], lr: [], tps: [], pe: [], et: [], acc: [], buckets: [], bucketLoss: {}, bucketGrad: {}, edges: {} };
    var prev = null, prevTel = null;  // a long run keeps telemetry in fewer records than it plots
    R.forEach(function (r) {
      S.steps.push(r.s);
      S.loss.push(num(r.loss));
      S.gn.push(num(r.gn));
      S.lr.push(num(r.lr));
      S.pe.push(num(r.pe));
      S.et.push(num(r.et));
      var dt = prev && r.t > prev.t ? r.t - prev.t : 0;
      S.tps.push(dt > 0 && r.tc >= prev.tc ? (r.tc - prev.tc) / dt : num(r.tps));
      (r.acc || []).forEach(function (a, k) { (S.acc[k] = S.acc[k] || []); });
      S.acc.forEach(function (list, k) { list[S.steps.length - 1] = r.acc && k < r.acc.length ? num(r.acc[k]) : NaN; });
      var ds = prev && r.s > prev.s ? r.s - prev.s : 1;
      (r.bc || []).forEach(function (c, b) {
        S.buckets[b] = S.buckets[b] || [];
        var before = prev && prev.bc && b < prev.bc.length && r.s > prev.s ? prev.bc[b] : 0;
        S.buckets[b][S.steps.length - 1] = (c - before) / ds;
      });
      [['bl', S.bucketLoss], ['bg', S.bucketGrad]].forEach(function (kv) {
        Object.keys(r[kv[0]] || {}).forEach(function (len) {
          (kv[1][len] = kv[1][len] || [])[S.steps.length - 1] = num(r[kv[0]][len]);
        });
      });
      if (r.tel) { edgeSeries(S, r, prevTel); prevTel = r; }
      prev = r;
    });
    S.acc.forEach(function (list) { for (var i = 0; i < S.steps.length; i++) if (list[i] === undefined) list[i] = NaN; });
    S.buckets.forEach(function (list) { for (var i = 0; i < S.steps.length; i++) if (list[i] === undefined) list[i] = NaN; });
    [S.bucketLoss, S.bucketGrad].forEach(function (m) {
      Object.keys(m).forEach(function (len) { for (var i = 0; i < S.steps.length; i++) if (m[len][i] === undefined) m[len][i] = NaN; });
    });
    return S;
  }
  // Mean items waiting between two records (from the time-weighted means) and
  // the share of that time the edge was full or empty.
  function edgeSeries(S, r, prev) {
    var t = r.tel.t, pt = prev && prev.tel ? prev.tel.t : 0;
    Object.keys(r.tel.e).forEach(function (name) {
      var e = r.tel.e[name], p = prev && prev.tel ? prev.tel.e[name] : null;
      var E = S.edges[name] = S.edges[name] || { cap: e[4], token: !!e[5], steps: [], occ: [], blocked: [], starved: [] };
      E.cap = e[4];
      var dt = p && t > pt ? t - pt : 0;
      E.steps.push(r.s);
      if (dt > 0) {
        E.occ.push(Math.max(0, (e[1] * t - p[1] * pt) / dt));
        E.blocked.push(Math.min(1, Math.max(0, (e[2] - p[2]) / dt)));
        E.starved.push(Math.min(1, Math.max(0, (e[3] - p[3]) / dt)));
      } else {
        E.occ.push(t > 0 ? e[1] : e[0]);
        E.blocked.push(t > 0 ? Math.min(1, e[2] / t) : NaN);
        E.starved.push(t > 0 ? Math.min(1, e[3] / t) : NaN);
      }
    });
  }

  // Every plot over steps marks the run's events (evaluations have their own plot).
  function marks() { return D.events.filter(function (e) { return e.kind !== 'eval'; }); }
  function plot(container, spec) { P.plot(container, Object.assign({ events: spec.noEvents ? [] : marks() }, spec)); }

  function shade(k, count) { return 'hsl(' + Math.round(215 - 205 * (count > 1 ? k / (count - 1) : 0)) + ',70%,45%)'; }

  // ---------- page parts
  function drawCards(S) {
    var R = D.records, L = R[R.length - 1], el = document.getElementById('cards');
    if (!L) { el.innerHTML = '<div class="card"><div class="k">steps</div><div class="v">none yet</div></div>'; return; }
    var count = function (kind) { return D.events.filter(function (e) { return e.kind === kind; }).length; };
    var ckpt = D.events.filter(function (e) { return e.kind === 'checkpoint'; }).map(function (e) { return e.s; });
    var cards = [
      ['global step', L.s + (L.tot ? ' / ' + L.tot : ''), L.tot ? pct(L.s / L.tot) + ' of the run' : ''],
      ['epoch', (L.ep + 1) + (L.tot && L.spe ? ' / ' + Math.ceil(L.tot / L.spe) : ''), 'step ' + L.sie + ' / ' + L.spe + ' in epoch'],
      ['loss', fmt(num(L.loss), 4), L.acc && L.acc.length ? 'acc@1 ' + fmt(num(L.acc[0]), 3) : ''],
      ['tokens/s', si(S.tps[S.tps.length - 1]), 'padding efficiency ' + pct(num(L.pe))],
      ['elapsed', duration(num(L.t)), 'ETA ' + duration(num(L.eta))],
      ['guard', String(count('guard')), 'steps skipped, quarantined, rolled back or halted'],
      ['checkpoints', String(ckpt.length), ckpt.length ? 'last at step ' + Math.max.apply(null, ckpt) : 'none yet'],
      ['alarms', String(count('alarm')), 'draining edges and others']];
    el.innerHTML = cards.map(function (c) {
      return '<div class="card"><div class="k">' + esc(c[0]) + '</div><div class="v">' + esc(c[1]) + '</div><div class="d">' + esc(c[2]) + '</div></div>';
    }).join('');
  }

  function drawFindings() {
    var A = D.analysis || {};
    document.getElementById('findings').innerHTML = (A.summary || []).map(function (s) { return '<li>' + codeify(s) + '</li>'; }).join('');
    document.getElementById('warnings').innerHTML = (D.warnings || []).map(function (w) { return '<p class="warn">' + codeify(w) + '</p>'; }).join('');
    document.getElementById('table').textContent = D.table || 'no graph telemetry in the step records';
  }

  function heat(share) { return share >= 0.8 ? '#d6453d' : share >= 0.5 ? '#e08a1e' : '#2f6fd6'; }

  function drawPipeline() {
    var A = D.analysis || {}, byNode = {}, byEdge = {};
    (A.nodes || []).forEach(function (n) { byNode[n.name] = n; });
    (A.edges || []).forEach(function (e) { byEdge[e.name] = e; });
    var hot = A.bottleneck ? A.bottleneck.node : null;
    document.querySelectorAll('svg.pipeline .node').forEach(function (g) {
      var n = byNode[g.dataset.node], bar = g.querySelector('.busy-bar');
      g.classList.toggle('hot', g.dataset.node === hot);
      if (!n || !A.has_telemetry) { g.querySelector('.busy-text').textContent = 'no telemetry'; return; }
      var text = 'busy ' + pct(n.busy_share);
      if (n.replicas > 1 && n.replica_busy_share.length) text += ' (' + n.replica_busy_share.map(pct).join(' / ') + ')';
      if (n.ready_ahead !== undefined)
        text += ' \u00b7 waited ' + pct(n.outside_wait_share) + ' \u00b7 ' + count(n.ready_ahead) + ' files ahead';
      g.querySelector('.busy-text').textContent = text + ' \u00b7 ' + count(n.calls) + ' calls';
      bar.setAttribute('width', (Number(bar.dataset.full) * Math.min(1, n.busy_share)).toFixed(1));
      bar.style.fill = heat(n.busy_share);
    });
    document.querySelectorAll('svg.pipeline .edge').forEach(function (g) {
      var e = byEdge[g.dataset.edge], text = g.querySelector('.edge-occ'), bar = g.querySelector('.occ-bar');
      if (!e || !e.pieces.length) { text.textContent = 'no telemetry'; return; }
      var fill = e.capacity > 0 ? e.mean_occupancy / e.capacity : 0;
      text.textContent = e.token ? 'mean ' + fmt(e.mean_occupancy, 1) + ' / ' + e.capacity + ' waiting'
        : 'mean ' + fmt(e.mean_occupancy, 1) + ' / ' + e.capacity + ' \u00b7 full ' + pct(e.blocked_share) + ' \u00b7 empty ' + pct(e.starved_share);
      bar.setAttribute('width', (Number(bar.dataset.full) * Math.min(1, fill)).toFixed(1));
      bar.style.fill = e.token ? '#9aa3b5' : e.blocked_share >= 0.2 ? '#e08a1e' : e.starved_share >= 0.5 ? '#8b93a5' : '#2f6fd6';
      var tip = g.querySelector('title') || g.appendChild(document.createElementNS(g.namespaceURI, 'title'));
      tip.textContent = e.pieces.map(function (p) {
        return p.name + ': mean ' + fmt(p.mean_occupancy, 2) + ' / ' + p.capacity + ', full ' + pct(p.blocked_share) + ', empty ' + pct(p.starved_share);
      }).join('\n');
    });
  }

  function eventsLegend(id) {
    var names = { checkpoint: 'checkpoint', guard: 'guard skipped/quarantined/rolled back/halted', alarm: 'alarm', other: 'other event' };
    var colors = { checkpoint: '#7d8597', guard: '#d6453d', alarm: '#e08a1e', other: '#8e5bd0' };
    var counts = {};
    marks().forEach(function (e) { var k = EVENT_KINDS.indexOf(e.kind) >= 0 ? e.kind : 'other'; counts[k] = (counts[k] || 0) + 1; });
    document.getElementById(id).innerHTML = 'Marked on every plot: ' + Object.keys(names).map(function (k) {
      return '<span><i style="border-color:' + colors[k] + '"></i>' + names[k] + ' (' + (counts[k] || 0) + ')</span>';
    }).join('');
  }

  function drawTraining(S) {
    var el = document.getElementById('training-plots'), xs = S.steps, x = { xMin: xs[0], xMax: xs[xs.length - 1] };
    el.innerHTML = '';
    function one(spec) { plot(el, Object.assign({}, x, spec)); }
    var lossSeries = [{ name: 'loss', color: '#2f6fd6', xs: xs, ys: S.loss, width: 1 }];
    if (xs.length > 50) lossSeries.push({ name: 'mean of 25 points', color: '#1d2330', xs: xs, ys: movingMean(S.loss, 25), width: 1.8 });
    one({ title: 'Loss', series: lossSeries });
    var gr = extent([S.gn], true);
    one({ title: 'Gradient norm (before clipping)', series: [{ name: 'grad norm', color: '#8e5bd0', xs: xs, ys: S.gn }], logY: gr[1] / gr[0] > 50 });
    one({ title: 'Learning rate', series: [{ name: 'lr', color: '#2e9d5b', xs: xs, ys: S.lr }], yMin: 0 });
    one({ title: 'Tokens per second (real tokens, whole graph)', series: [{ name: 'tokens/s', color: '#1aa3b8', xs: xs, ys: S.tps }], yMin: 0 });
    var k = S.acc.length;
    one({ title: 'Accuracy per block position over steps', yMin: 0, series: S.acc.map(function (ys, i) {
      return { name: 'k=' + (i + 1), color: shade(i, k), xs: xs, ys: ys, width: 1.1 };
    }), legend: k ? '<span><i style="background:' + shade(0, k) + '"></i>k=1</span><span>\u2026</span><span><i style="background:' +
      shade(k - 1, k) + '"></i>k=' + k + ' (block position)</span>' : '' });
    drawAccuracyProfile(el, S);
    var evals = D.events.filter(function (e) { return e.kind === 'eval' && isFinite(e.tau); });
    // Beside it, the tau the training slots' expected acceptance implies
    // (a loss that reads the target's distribution): a gap between the two
    // shows here, during training, rather than in serving.
    var expected = S.et.some(function (v) { return isFinite(v); });
    if (evals.length || expected) {
      var tauSeries = [];
      if (evals.length)
        tauSeries.push({ name: 'tau measured (eval node, held-out prompts)', color: '#c2410c', width: 2,
          xs: evals.map(function (e) { return e.s; }), ys: evals.map(function (e) { return e.tau; }) });
      if (expected)
        tauSeries.push({ name: 'tau expected (training slots, 1 + sum of products of sum min(p, q))', color: '#2f6fd6',
          width: 1.2, xs: xs, ys: S.et });
      one({ title: 'Acceptance length tau: measured on held-out prompts' + (expected ? ', and expected from the training slots' : ''),
        yMin: 0, xMin: evals.length ? Math.min(x.xMin, evals[0].s) : x.xMin, series: tauSeries });
    }
    var totals = D.records.length ? D.records[D.records.length - 1].bc || [] : [], all = totals.reduce(function (a, b) { return a + b; }, 0);
    // A step holds a few micro-batches: a moving mean shows the mix.
    var smooth = Math.max(1, Math.round(xs.length / 40));
    one({ title: 'Batches per step by length bucket' + (smooth > 1 ? ' (mean of ' + smooth + ' points)' : ''), yMin: 0,
      series: S.buckets.map(function (ys, b) {
        return { name: 'bucket ' + b + ': ' + count(totals[b] || 0) + ' batches (' + pct(all ? (totals[b] || 0) / all : 0) + ')',
          color: PALETTE[b % PALETTE.length], xs: xs, ys: movingMean(ys, smooth), width: 1.6 };
      }) });
    // Per length bucket: does one bucket's loss or gradient stand out?
    [[S.bucketLoss, 'Loss by length bucket (steps that trained on it)'],
     [S.bucketGrad, 'Gradient norm by length bucket (single-bucket steps)']].forEach(function (pair) {
      var lens = Object.keys(pair[0]).sort(function (a, b) { return a - b; });
      if (!lens.length) return;
      one({ title: pair[1] + (smooth > 1 ? ' (mean of ' + smooth + ' points)' : ''),
        series: lens.map(function (len, b) {
          return { name: 'bucket ' + len + ' tokens', color: PALETTE[b % PALETTE.length], xs: xs,
            ys: movingMean(pair[0][len], smooth), width: 1.4 };
        }) });
    });
    one({ title: 'Padding efficiency (real / padded tokens)', series: [{ name: 'padding efficiency', color: '#9c7a12', xs: xs, ys: S.pe }], yMin: 0, yMax: 1 });
  }
  // Accuracy against block position, early in the run and now.
  function drawAccuracyProfile(el, S) {
    var n = S.steps.length, part = Math.max(1, Math.floor(n / 10)), positions = S.acc.map(function (_, i) { return i + 1; });
    function mean(from, to) {
      return S.acc.map(function (ys) {
        var sum = 0, c = 0;
        for (var i = from; i < to; i++) if (isFinite(ys[i])) { sum += ys[i]; c++; }
        return c ? sum / c : NaN;
      });
    }
    var series = [{ name: 'last ' + part + ' points', color: '#2f6fd6', xs: positions, ys: mean(n - part, n), width: 2 }];
    if (n > 2 * part) series.push({ name: 'first ' + part + ' points', color: '#8b93a5', xs: positions, ys: mean(0, part), dash: '4 3' });
    plot(el, { title: 'Accuracy by block position (x: position k in the block; not a plot over steps)', series: series,
      yMin: 0, noEvents: true, xTitle: 'position', xTicks: Math.min(8, positions.length) });
  }

  function edgeOrder(S) {
    var names = [], seen = {};
    ((D.analysis || {}).edges || []).forEach(function (e) {
      e.pieces.forEach(function (p) { if (S.edges[p.name] && !seen[p.name]) { names.push(p.name); seen[p.name] = true; } });
    });
    Object.keys(S.edges).forEach(function (name) { if (!seen[name]) names.push(name); });
    return names;
  }

  function drawEdges(S) {
    var el = document.getElementById('edge-plots');
    el.innerHTML = '';
    var names = edgeOrder(S);
    if (!names.length) { el.innerHTML = '<div class="empty">no graph telemetry in the step records</div>'; return; }
    var x = { xMin: S.steps[0], xMax: S.steps[S.steps.length - 1] };
    names.forEach(function (name) {
      var E = S.edges[name];
      plot(el, Object.assign({}, x, {
        title: name + (E.token ? ' (token)' : '') + ' \u00b7 cap ' + E.cap, width: 440, height: 180, yMin: 0, cap: E.cap, xTicks: 4,
        series: [{ name: 'mean waiting', color: '#2f6fd6', xs: E.steps, ys: E.occ, area: true }],
        y2: [{ name: 'blocked', color: '#e08a1e', xs: E.steps, ys: E.blocked, percent: true },
             { name: 'starved', color: '#8b93a5', xs: E.steps, ys: E.starved, dash: '2 2', percent: true }]
      }));
    });
  }

  function drawAll() {
    try {
      var S = series();
      drawCards(S);
      drawFindings();
      drawPipeline();
      eventsLegend('legend-training');
      eventsLegend('legend-edges');
      drawTraining(S);
      drawEdges(S);
      document.getElementById('footer').textContent = 'Generated ' + D.generated + ' by dflow report from ' + D.records.length +
        ' step records' + (D.live ? ' (live: refreshed every ' + D.refresh_ms / 1000 + ' s)' : '') + '.';
      if (body.dataset.rendered !== 'error') body.dataset.rendered = 'ok';
    } catch (e) {
      fail('drawing failed: ' + (e && e.stack ? e.stack : e));
    }
  }

  // ---------- live page: poll the server for new records and a fresh analysis
  function thinRecords() {
    if (D.records.length <= 4000) return;
    D.records = D.records.filter(function (r, i, all) { return i % 2 === 0 || r.g || i === all.length - 1; });
  }
  function poll() {
    var status = document.getElementById('subtitle');
    fetch('records.json?slim=1&since=' + D.cursor).then(function (r) { return r.json(); }).then(function (j) {
      D.records = D.records.concat(j.records);
      D.events = D.events.concat(j.events);
      D.cursor = j.next;
      thinRecords();
      return fetch('summary.json').then(function (r) { return r.json(); });
    }).then(function (s) {
      var undrawn = !document.querySelector('svg.pipeline .node') && s.analysis && s.analysis.nodes && s.analysis.nodes.length;
      if (s.graph_version !== D.graph_version || undrawn) { location.reload(); return; }
      D.analysis = s.analysis;
      D.table = s.table;
      D.warnings = s.warnings;
      drawAll();
      status.textContent = D.run_dir + ' \u00b7 live, updated ' + new Date().toLocaleTimeString();
    }).catch(function (e) {
      status.textContent = D.run_dir + ' \u00b7 live, server unreachable (' + e.message + ')';
    }).then(function () { setTimeout(poll, D.refresh_ms); });
  }

  drawAll();
  if (D.live) setTimeout(poll, D.refresh_ms);
})();
