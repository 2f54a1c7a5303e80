// Formatting and hand-written SVG plots for the dflow report page; report.js
// draws the page with them. No library, no network: the page opens from disk.
var dflowPlot = (function () {
  'use strict';
  var EVENT_KINDS = ['checkpoint', 'guard', 'alarm'];

  // ---------- formatting
  function esc(s) {
    return String(s).replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');
  }
  function num(v) {
    if (typeof v === 'number') return v;
    if (v === 'inf' || v === '+inf') return Infinity;
    if (v === '-inf') return -Infinity;
    return NaN;
  }
  function fmt(v, digits) {
    if (v === null || v === undefined || !isFinite(v)) return isNaN(v) ? 'nan' : (v > 0 ? 'inf' : '-inf');
    var a = Math.abs(v);
    if (digits === undefined) digits = a >= 100 ? 0 : a >= 10 ? 1 : a >= 1 ? 2 : 3;
    if (a !== 0 && (a < 1e-3 || a >= 1e6)) return v.toExponential(2);
    return v.toFixed(digits);
  }
  function si(v) {
    if (!isFinite(v)) return fmt(v);
    var a = Math.abs(v);
    if (a >= 1e9) return (v / 1e9).toFixed(2) + 'G';
    if (a >= 1e6) return (v / 1e6).toFixed(2) + 'M';
    if (a >= 1e4) return (v / 1e3).toFixed(1) + 'k';
    return fmt(v);
  }
  // Counts (calls, batches): whole numbers, never "61.0".
  function count(v) {
    if (!isFinite(v) || Math.abs(v) >= 1e4) return si(v);
    return String(Math.round(v));
  }
  // Axis labels: as short as the tick spacing allows (2, not 2.00; 0.0015).
  function tick(v) {
    if (v === 0) return '0';
    var a = Math.abs(v);
    if (a >= 1e4) return si(v);
    if (a < 1e-3) return v.toExponential(1);
    return String(parseFloat(v.toPrecision(4)));
  }
  function pct(x) { return isFinite(x) ? Math.round(100 * x) + '%' : '-'; }
  function duration(s) {
    if (!isFinite(s) || s < 0) return '-';
    s = Math.round(s);
    if (s >= 3600) return Math.floor(s / 3600) + 'h' + String(Math.floor(s % 3600 / 60)).padStart(2, '0') + 'm';
    if (s >= 60) return Math.floor(s / 60) + 'm' + String(s % 60).padStart(2, '0') + 's';
    return s + 's';
  }

  // ---------- plots
  function niceStep(span, count) {
    var raw = span / Math.max(1, count), mag = Math.pow(10, Math.floor(Math.log10(raw))), f = raw / mag;
    return (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * mag;
  }
  function ticks(lo, hi, count) {
    var step = niceStep(hi - lo, count), out = [];
    for (var v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) out.push(Math.abs(v) < step * 1e-9 ? 0 : v);
    return out;
  }
  function extent(list, positiveOnly) {
    var lo = Infinity, hi = -Infinity;
    list.forEach(function (ys) {
      ys.forEach(function (y) { if (isFinite(y) && (!positiveOnly || y > 0)) { lo = Math.min(lo, y); hi = Math.max(hi, y); } });
    });
    return [lo, hi];
  }
  function pathOf(xs, ys, X, Y) {
    var d = '', pen = false;
    for (var i = 0; i < xs.length; i++) {
      var y = Y(ys[i]);
      if (!isFinite(y) || !isFinite(xs[i])) { pen = false; continue; }
      d += (pen ? 'L' : 'M') + X(xs[i]).toFixed(1) + ',' + y.toFixed(1);
      pen = true;
    }
    return d;
  }
  function eventLines(events, x0, x1, X, top, bottom) {
    var out = '';
    events.forEach(function (ev) {
      if (!(ev.s >= x0 && ev.s <= x1)) return;
      var kind = EVENT_KINDS.indexOf(ev.kind) >= 0 ? ev.kind : 'other', x = X(ev.s).toFixed(1);
      out += '<line class="ev-' + kind + '" x1="' + x + '" x2="' + x + '" y1="' + top + '" y2="' + bottom + '"><title>step ' +
        ev.s + ': ' + esc(ev.label) + '</title></line>';
    });
    return out;
  }

  // spec: {title, series: [{name, color, xs, ys, dash, area, width, percent, dots, noReadout}], y2: [...same, values 0..1], logY,
  //        xMin, xMax, yMin, yMax, cap (dashed line), xTitle, xTicks, width, height, legend (html),
  //        events: [{s, kind, label}] marked as vertical lines}
  function plot(container, spec) {
    var W = spec.width || 600, H = spec.height || 210, M = { l: 52, r: spec.y2 ? 40 : 14, t: 8, b: 26 };
    var div = document.createElement('div');
    div.className = 'plot';
    container.appendChild(div);
    var all = spec.series.concat(spec.y2 || []);
    var legend = spec.legend || all.map(function (s) {
      return '<span><i style="background:' + s.color + '"></i>' + esc(s.name) + '</span>';
    }).join('');
    div.innerHTML = '<div class="ptitle"><span>' + esc(spec.title) + '</span><span class="readout"></span></div>' +
      '<div class="legend">' + legend + '</div>';
    var xs0 = [].concat.apply([], all.map(function (s) { return s.xs.filter(isFinite); }));
    var yr = extent(spec.series.map(function (s) { return s.ys; }), spec.logY);
    if (!xs0.length || !isFinite(yr[0])) {
      div.insertAdjacentHTML('beforeend', '<div class="empty">no data</div>');
      return;
    }
    var x0 = spec.xMin !== undefined ? spec.xMin : Math.min.apply(null, xs0);
    var x1 = spec.xMax !== undefined ? spec.xMax : Math.max.apply(null, xs0);
    if (x1 === x0) { x0 -= 1; x1 += 1; }
    var lo = spec.yMin !== undefined ? spec.yMin : yr[0], hi = spec.yMax !== undefined ? spec.yMax : yr[1];
    if (spec.cap !== undefined) hi = Math.max(hi, spec.cap);
    var T = spec.logY ? Math.log10 : function (v) { return v; };
    lo = T(lo); hi = T(hi);
    if (hi === lo) { hi += 1; if (spec.yMin === undefined) lo -= 1; }
    var pad = (hi - lo) * 0.06;
    if (spec.yMin === undefined) lo -= pad;
    hi += pad;
    var X = function (v) { return M.l + (v - x0) / (x1 - x0) * (W - M.l - M.r); };
    var Y = function (v) { return spec.logY && !(v > 0) ? NaN : H - M.b - (T(v) - lo) / (hi - lo) * (H - M.t - M.b); };
    var Y2 = function (v) { return H - M.b - v / 1.06 * (H - M.t - M.b); };
    var svg = '<svg viewBox="0 0 ' + W + ' ' + H + '">';
    ticks(lo, hi, 4).forEach(function (t) {
      var y = H - M.b - (t - lo) / (hi - lo) * (H - M.t - M.b), v = spec.logY ? Math.pow(10, t) : t;
      svg += '<line class="gridline" x1="' + M.l + '" x2="' + (W - M.r) + '" y1="' + y.toFixed(1) + '" y2="' + y.toFixed(1) + '"/>' +
        '<text x="' + (M.l - 5) + '" y="' + (y + 3.5).toFixed(1) + '" text-anchor="end">' + tick(v) + '</text>';
    });
    ticks(x0, x1, spec.xTicks || 6).forEach(function (t) {
      svg += '<text x="' + X(t).toFixed(1) + '" y="' + (H - M.b + 15) + '" text-anchor="middle">' + tick(t) + '</text>';
    });
    if (spec.y2) [0, 0.5, 1].forEach(function (v) {
      svg += '<text x="' + (W - M.r + 4) + '" y="' + (Y2(v) + 3.5).toFixed(1) + '">' + pct(v) + '</text>';
    });
    svg += '<line class="axis" x1="' + M.l + '" x2="' + M.l + '" y1="' + M.t + '" y2="' + (H - M.b) + '"/>' +
      '<line class="axis" x1="' + M.l + '" x2="' + (W - M.r) + '" y1="' + (H - M.b) + '" y2="' + (H - M.b) + '"/>';
    svg += eventLines(spec.events || [], x0, x1, X, M.t, H - M.b);
    if (spec.cap !== undefined) {
      var yc = Y(spec.cap).toFixed(1);
      svg += '<line x1="' + M.l + '" x2="' + (W - M.r) + '" y1="' + yc + '" y2="' + yc + '" stroke="#d6453d" stroke-dasharray="5 3"/>';
    }
    function draw(s, Yf) {
      var d = pathOf(s.xs, s.ys, X, Yf);
      if (!d) return;
      if (s.area) svg += '<path d="' + d + 'L' + X(s.xs[s.xs.length - 1]).toFixed(1) + ',' + (H - M.b) + 'L' +
        X(s.xs[0]).toFixed(1) + ',' + (H - M.b) + 'Z" fill="' + s.color + '" fill-opacity="0.14" stroke="none"/>';
      svg += '<path d="' + d + '" fill="none" stroke="' + s.color + '" stroke-width="' + (s.width || 1.4) + '"' +
        (s.dash ? ' stroke-dasharray="' + s.dash + '"' : '') + '/>';
      if (s.dots) s.xs.forEach(function (x, i) {  // sparse points (evaluations): one alone draws no line
        var y = Yf(s.ys[i]);
        if (isFinite(x) && isFinite(y)) svg += '<circle cx="' + X(x).toFixed(1) + '" cy="' + y.toFixed(1) + '" r="2.6" fill="' + s.color + '"/>';
      });
    }
    (spec.y2 || []).forEach(function (s) { draw(s, Y2); });
    spec.series.forEach(function (s) { draw(s, Y); });
    svg += '<line class="cursor" y1="' + M.t + '" y2="' + (H - M.b) + '" x1="-9" x2="-9"/>' +
      '<rect x="' + M.l + '" y="' + M.t + '" width="' + (W - M.l - M.r) + '" height="' + (H - M.t - M.b) + '" fill="transparent"/></svg>';
    div.insertAdjacentHTML('beforeend', svg);
    readout(div, spec, all, W, M, x0, x1);
  }
  // Hovering shows the values at the nearest point.
  function readout(div, spec, all, W, M, x0, x1) {
    var el = div.querySelector('svg'), out = div.querySelector('.readout'), cursor = div.querySelector('.cursor');
    el.addEventListener('mousemove', function (e) {
      var box = el.getBoundingClientRect(), vx = (e.clientX - box.left) / box.width * W;
      var x = x0 + (vx - M.l) / (W - M.l - M.r) * (x1 - x0), text = [], at = null;
      all.filter(function (s) { return !s.noReadout; }).slice(0, 4).forEach(function (s) {
        var best = -1;
        for (var i = 0; i < s.xs.length; i++) if (best < 0 || Math.abs(s.xs[i] - x) < Math.abs(s.xs[best] - x)) best = i;
        if (best < 0) return;
        at = s.xs[best];
        text.push(s.name + ' ' + (s.percent ? pct(s.ys[best]) : fmt(s.ys[best])));
      });
      if (at === null) return;
      out.textContent = (spec.xTitle || 'step') + ' ' + at + ': ' + text.join(', ');
      var px = (M.l + (at - x0) / (x1 - x0) * (W - M.l - M.r)).toFixed(1);
      cursor.setAttribute('x1', px);
      cursor.setAttribute('x2', px);
    });
    el.addEventListener('mouseleave', function () { out.textContent = ''; cursor.setAttribute('x1', -9); cursor.setAttribute('x2', -9); });
  }

  function movingMean(ys, width) {
    var out = [], sum = 0, n = 0, q = [];
    ys.forEach(function (y) {
      q.push(y);
      if (isFinite(y)) { sum += y; n++; }
      if (q.length > width) { var old = q.shift(); if (isFinite(old)) { sum -= old; n--; } }
      out.push(n ? sum / n : NaN);
    });
    return out;
  }

  return { EVENT_KINDS: EVENT_KINDS, esc: esc, num: num, fmt: fmt, si: si, count: count, pct: pct, duration: duration, extent: extent,
    plot: plot, movingMean: movingMean };
})();
