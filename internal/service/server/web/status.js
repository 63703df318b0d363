// The status page's live part: it polls v1/status every second and redraws
// the tiles, the charts, the store panel and the denied keys. The page is
// complete without it (the server renders the same numbers), so that it
// reads with JavaScript off. Paths follow page.go's, point for point.
(function () {
  'use strict';
  // localShare describes the share of decisions that never reached Redis,
  // as the page renders it on the server (localShare in page.go).
  function localShare(l) {
    return (100 * l.share).toFixed(1) + '% of ' + l.decisions.toLocaleString('en') + ' decisions';
  }

  var OUTCOMES = ['allowed', 'denied', 'shadow_denied', 'degraded'];
  var CLASS = {allowed: 'allowed', denied: 'denied', shadow_denied: 'shadow', degraded: 'degraded'};
  var main = document.getElementById('main');
  var live = document.getElementById('live');
  var cards = {};
  document.querySelectorAll('.card[data-limit]').forEach(function (c) { cards[c.dataset.limit] = c; });
  live.hidden = false;

  // niceMax returns the smallest of 1, 2 or 5 times a power of ten that is
  // at least m (and at least 1), the top of a chart's scale.
  function niceMax(m) {
    var p = 1;
    for (;;) {
      if (m <= p) return p;
      if (m <= 2 * p) return 2 * p;
      if (m <= 5 * p) return 5 * p;
      p *= 10;
    }
  }

  function y(v, max) {
    var t = 1000 - Math.round(v * 1000 / max);
    return t % 10 === 0 ? String(t / 10) : (t / 10).toFixed(1);
  }

  // linePath draws vals over x = 0..299, empty when every value is 0.
  function linePath(vals, max) {
    var any = false, d = '';
    for (var i = 0; i < vals.length; i++) {
      if (vals[i] > 0) any = true;
      d += (i === 0 ? 'M' : 'L') + i + ',' + y(vals[i], max);
    }
    return any ? d : '';
  }

  function sum(a, from) {
    var s = 0;
    for (var i = from || 0; i < a.length; i++) s += a[i];
    return s;
  }

  function fmtRate(n) { // n decisions over 10 s, as a rate with one decimal
    return (n % 10 === 0) ? String(n / 10) : (Math.floor(n / 10) + '.' + (n % 10));
  }

  function health(st) {
    if (st.status === 'partly unreachable') return ['store partly unreachable', 'warn'];
    if (st.status === 'unreachable' || st.circuit === 'open') return ['store unreachable', 'bad'];
    if (st.circuit === 'half-open') return ['store recovering', 'warn'];
    return ['healthy', 'ok'];
  }

  function text(sel, value) {
    var el = typeof sel === 'string' ? document.querySelector(sel) : sel;
    if (el && el.textContent !== value) el.textContent = value;
  }

  function render(s) {
    var names = s.limits.map(function (l) { return l.name; });
    var known = Object.keys(cards);
    if (names.length !== known.length || names.some(function (n) { return !cards[n]; })) {
      location.reload(); // the configuration changed its limits
      return;
    }
    var last10 = {}, minute = {};
    OUTCOMES.forEach(function (o) { last10[o] = 0; minute[o] = 0; });
    s.limits.forEach(function (l) {
      var card = cards[l.name], max = 0, total = 0;
      OUTCOMES.forEach(function (o) {
        var vals = l.series[o];
        for (var i = 0; i < vals.length; i++) if (vals[i] > max) max = vals[i];
        total += sum(vals);
        last10[o] += sum(vals, vals.length - 10);
        minute[o] += l.last_minute[o];
        text(card.querySelector('[data-minute="' + o + '"]'), String(l.last_minute[o]));
      });
      max = niceMax(max);
      OUTCOMES.forEach(function (o) {
        var p = card.querySelector('path[data-series="' + o + '"]');
        var d = linePath(l.series[o], max);
        if (p.getAttribute('d') !== d) p.setAttribute('d', d);
        if (o === 'allowed') {
          card.querySelector('path[data-area]').setAttribute('d', d ? d + 'L299,100L0,100Z' : '');
        }
      });
      text(card.querySelector('[data-ymax]'), max + '/s');
      card.querySelector('svg').setAttribute('data-total', String(total));
    });
    OUTCOMES.forEach(function (o) {
      var v = document.querySelector('[data-tile="' + o + '"]');
      v.firstChild.textContent = fmtRate(last10[o]);
      v.parentNode.classList.toggle('zero', last10[o] === 0);
      text('[data-tile-minute="' + o + '"]', minute[o] + ' in the last minute');
    });
    var decided = minute.allowed + minute.denied;
    text('#ratio', decided === 0 ? '–' : fmtRate(Math.round(minute.denied * 1000 / decided)) + '%');

    var h = health(s.store), pill = document.getElementById('health');
    text(pill, h[0]);
    pill.className = 'pill ' + h[1];
    pill.dataset.status = s.store.status;
    document.title = 'Sluice · ' + h[0];
    var status = document.querySelector('[data-store="status"]');
    if (status) {
      status.innerHTML = '';
      var dot = document.createElement('span');
      dot.className = 'dot ' + h[1];
      status.appendChild(dot);
      status.appendChild(document.createTextNode(s.store.status));
    }
    if (s.store.circuit) text('[data-store="circuit"]', s.store.circuit);
    if (s.store.keys !== undefined) text('[data-store="keys"]', s.store.keys.toLocaleString('en'));
    if (s.store.local_refusals) text('[data-store="local"]', localShare(s.store.local_refusals));

    var tbody = document.querySelector('#denied tbody');
    var rows = document.createDocumentFragment();
    s.top_denied.forEach(function (e) {
      var tr = document.createElement('tr');
      var lim = document.createElement('td'); lim.textContent = e.limit;
      var key = document.createElement('td'); key.className = 'key'; key.textContent = e.key + (e.cut ? '…' : '');
      var n = document.createElement('td'); n.className = 'num'; n.textContent = String(e.count);
      if (e.error) {
        var err = document.createElement('span'); err.className = 'muted'; err.textContent = ' ±' + e.error;
        n.appendChild(err);
      }
      var block = document.createElement('td'); block.className = 'block'; block.textContent = e.block || '';
      tr.appendChild(lim); tr.appendChild(key); tr.appendChild(n); tr.appendChild(block);
      rows.appendChild(tr);
    });
    if (!s.top_denied.length) {
      var tr = document.createElement('tr'), td = document.createElement('td');
      tr.className = 'none'; td.colSpan = 4; td.textContent = 'No denials recently.';
      tr.appendChild(td); rows.appendChild(tr);
    }
    tbody.replaceChildren(rows);

    var upd = document.getElementById('updated');
    upd.textContent = new Date(s.now).toLocaleTimeString();
    upd.dataset.now = String(s.now);
    main.dataset.updated = String(s.now);
  }

  function tick() {
    fetch('v1/status', {cache: 'no-store', credentials: 'same-origin'})
      .then(function (r) {
        if (!r.ok) throw new Error('status ' + r.status);
        return r.json();
      })
      .then(function (s) {
        render(s);
        live.classList.remove('stale');
        live.textContent = 'live';
      })
      .catch(function () {
        live.classList.add('stale');
        live.textContent = 'disconnected';
      })
      .then(function () { setTimeout(tick, 1000); });
  }
  tick();

  // Explain: ask v1/explain and show its answer under the form.
  var form = document.getElementById('explain'), out = document.getElementById('explain-out');
  form.addEventListener('submit', function (ev) {
    ev.preventDefault();
    var q = new URLSearchParams(new FormData(form));
    fetch('v1/explain?' + q.toString(), {cache: 'no-store', credentials: 'same-origin'})
      .then(function (r) { return r.json(); })
      .then(function (e) {
        out.hidden = false;
        out.replaceChildren();
        var p = document.createElement('p');
        if (e.error) {
          out.className = 'explain-out denied';
          p.textContent = e.error;
          out.appendChild(p);
          return;
        }
        out.className = 'explain-out ' + (e.allowed ? 'allowed' : 'denied');
        p.textContent = e.summary;
        out.appendChild(p);
        var dl = document.createElement('dl');
        function row(k, v) {
          if (v === undefined || v === '') return;
          var dt = document.createElement('dt'), dd = document.createElement('dd');
          dt.textContent = k; dd.textContent = String(v);
          dl.appendChild(dt); dl.appendChild(dd);
        }
        row('algorithm', e.algorithm);
        Object.keys(e.state).forEach(function (k) { row(k, e.state[k]); });
        row('remaining', e.remaining);
        row('retry_after_ms', e.retry_after_ms);
        row('reset_after_ms', e.reset_after_ms);
        row('debt', e.debt);
        row('debt_repaid_at', e.debt_repaid_at);
        row('at', e.at);
        out.appendChild(dl);
      });
  });
})();
