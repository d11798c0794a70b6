// laminardb dashboard: polls /api/metrics every second and /api/graph when the catalog
// changes; draws the pipeline as inline SVG in columns (sources -> streams/views -> sinks).
// Plain JS, no libraries. Stable hooks for tests: [data-node], [data-edge], #rate-A-B,
// #count-NAME, #src-rows-NAME, #src-wm-NAME, #src-lag-NAME, each with data-value.
(function () {
  'use strict';

  var POLL_MS = 1000;
  var GRAPH_EVERY = 5;        // re-read the graph every few polls (DDL may change it)
  var COL_W = 290, ROW_H = 96, BOX_W = 168, BOX_H = 58, PAD = 24, LANE = 18;
  var SVGNS = 'http://www.w3.org/2000/svg';
  var token = new URLSearchParams(window.location.search).get('token');

  var graph = null;
  var graphKey = '';
  var polls = 0;

  function api(path) {
    var headers = {};
    if (token) { headers.Authorization = 'Bearer ' + token; }
    return fetch(path, { headers: headers, cache: 'no-store' }).then(function (r) {
      if (!r.ok) { return r.text().then(function (t) { throw new Error(r.status + ' ' + t); }); }
      return r.json();
    });
  }

  function h(tag, attrs, text) {
    var e = document.createElement(tag);
    setAttrs(e, attrs);
    if (text !== undefined && text !== null) { e.textContent = String(text); }
    return e;
  }

  function s(tag, attrs, text) {
    var e = document.createElementNS(SVGNS, tag);
    setAttrs(e, attrs);
    if (text !== undefined && text !== null) { e.textContent = String(text); }
    return e;
  }

  function setAttrs(e, attrs) {
    if (!attrs) { return; }
    Object.keys(attrs).forEach(function (k) { e.setAttribute(k, attrs[k]); });
  }

  function byId(id) { return document.getElementById(id); }

  function fmtNum(n) {
    if (n === null || n === undefined) { return '—'; }
    var a = Math.abs(n);
    if (a >= 1e9) { return (n / 1e9).toFixed(2) + 'G'; }
    if (a >= 1e6) { return (n / 1e6).toFixed(2) + 'M'; }
    if (a >= 1e4) { return (n / 1e3).toFixed(1) + 'k'; }
    return Number.isInteger(n) ? String(n) : n.toFixed(1);
  }

  function fmtRate(r) { return r === null || r === undefined ? '— rows/s' : fmtNum(r) + ' rows/s'; }

  function fmtMs(ms) {
    if (ms === null || ms === undefined) { return '—'; }
    var a = Math.abs(ms), sign = ms < 0 ? '-' : '';
    if (a < 1000) { return sign + Math.round(a) + ' ms'; }
    if (a < 120000) { return sign + (a / 1000).toFixed(1) + ' s'; }
    if (a < 7200000) { return sign + (a / 60000).toFixed(1) + ' min'; }
    if (a < 172800000) { return sign + (a / 3600000).toFixed(1) + ' h'; }
    return sign + (a / 86400000).toFixed(1) + ' d';
  }

  function fmtWatermark(ms) {
    if (ms === null || ms === undefined) { return 'none yet'; }
    if (ms > 1e11 && ms < 1e14) {  // looks like wall-clock epoch ms: show it as a time
      return new Date(ms).toISOString().replace('T', ' ').replace('Z', '');
    }
    return String(ms);
  }

  function cssId(name) { return String(name).replace(/[^A-Za-z0-9_.-]/g, '_'); }

  // ---------------------------------------------------------------- graph
  function nodePos(n) {
    return { x: PAD + n.column * COL_W, y: PAD + n.row * ROW_H };
  }

  function renderGraph(g) {
    var svg = byId('graph');
    while (svg.firstChild) { svg.removeChild(svg.firstChild); }
    var rows = 1;
    g.nodes.forEach(function (n) { rows = Math.max(rows, n.row + 1); });
    var width = PAD * 2 + Math.max(1, g.columns) * COL_W - (COL_W - BOX_W);
    var height = PAD * 2 + rows * ROW_H - (ROW_H - BOX_H) + LANE + 8;
    setAttrs(svg, { width: width, height: height, viewBox: '0 0 ' + width + ' ' + height });
    var defs = s('defs');
    var marker = s('marker', { id: 'arrow', viewBox: '0 0 10 10', refX: 9, refY: 5,
      markerWidth: 7, markerHeight: 7, orient: 'auto-start-reverse' });
    marker.appendChild(s('path', { d: 'M 0 0 L 10 5 L 0 10 z' }));
    defs.appendChild(marker);
    svg.appendChild(defs);
    var byName = {};
    g.nodes.forEach(function (n) { byName[n.name] = n; });
    var edges = s('g', { 'class': 'edges' });
    var labels = s('g', { 'class': 'labels' });
    g.edges.forEach(function (e) {
      var a = byName[e.from], b = byName[e.to];
      if (!a || !b) { return; }
      var pa = nodePos(a), pb = nodePos(b);
      var x1 = pa.x + BOX_W, y1 = pa.y + BOX_H / 2, x2 = pb.x - 2, y2 = pb.y + BOX_H / 2;
      var mx = (x1 + x2) / 2;
      var key = e.from + '->' + e.to;
      var d, ly;
      if (b.column - a.column > 1) {
        // skips a column: run along a lane under the boxes instead of through the ones between
        var lane = Math.max(y1, y2) + BOX_H / 2 + LANE;
        d = 'M ' + x1 + ' ' + y1 + ' C ' + (x1 + 40) + ' ' + y1 + ', ' + (x1 + 20) + ' ' + lane + ', ' + (x1 + 60) + ' ' + lane +
          ' L ' + (x2 - 60) + ' ' + lane + ' C ' + (x2 - 20) + ' ' + lane + ', ' + (x2 - 40) + ' ' + y2 + ', ' + x2 + ' ' + y2;
        mx = x2 - (COL_W - BOX_W) / 2 - 2;
        ly = lane + 4;
      } else {
        d = 'M ' + x1 + ' ' + y1 + ' C ' + mx + ' ' + y1 + ', ' + mx + ' ' + y2 + ', ' + x2 + ' ' + y2;
        ly = (y1 + y2) / 2 - 6;
      }
      edges.appendChild(s('path', { 'class': 'edge', 'data-edge': key, id: 'edge-' + cssId(e.from) + '-' + cssId(e.to),
        d: d, 'marker-end': 'url(#arrow)' }));
      labels.appendChild(s('rect', { 'class': 'rate-bg', x: mx - 40, y: ly - 11, width: 80, height: 15, rx: 3 }));
      labels.appendChild(s('text', { 'class': 'rate', id: 'rate-' + cssId(e.from) + '-' + cssId(e.to),
        'data-edge': key, 'data-value': '', x: mx, y: ly, 'text-anchor': 'middle' }, '— rows/s'));
    });
    svg.appendChild(edges);
    var nodes = s('g', { 'class': 'nodes' });
    g.nodes.forEach(function (n) {
      var p = nodePos(n);
      var box = s('g', { 'data-node': n.name, 'data-kind': n.kind, transform: 'translate(' + p.x + ',' + p.y + ')' });
      box.appendChild(s('title', null, n.kind + ' ' + n.name + (n.sql ? '\n' + n.sql : '')));
      box.appendChild(s('rect', { 'class': 'box', width: BOX_W, height: BOX_H, rx: 6 }));
      box.appendChild(s('text', { x: 10, y: 18 }, n.name.length > 22 ? n.name.slice(0, 21) + '…' : n.name));
      box.appendChild(s('text', { 'class': 'kind', x: BOX_W - 8, y: 18, 'text-anchor': 'end' }, n.kind));
      box.appendChild(s('text', { 'class': 'count', id: 'count-' + cssId(n.name), 'data-value': '', x: 10, y: 44 }, '—'));
      nodes.appendChild(box);
    });
    svg.appendChild(nodes);
    svg.appendChild(labels);
  }

  function refreshGraph() {
    return api('/api/graph').then(function (g) {
      var key = JSON.stringify(g);
      if (key !== graphKey) { graph = g; graphKey = key; renderGraph(g); }
    });
  }

  // ---------------------------------------------------------------- numbers
  function sparkline(values, cls) {
    var w = 120, hgt = 24;
    var svg = s('svg', { 'class': 'spark ' + (cls || ''), viewBox: '0 0 ' + w + ' ' + hgt, preserveAspectRatio: 'none' });
    var pts = [];
    var vals = values.filter(function (v) { return v !== null && v !== undefined; });
    if (vals.length < 2) { return svg; }
    var lo = Math.min.apply(null, vals), hi = Math.max.apply(null, vals);
    if (hi === lo) { hi = lo + 1; }
    var n = values.length;
    values.forEach(function (v, i) {
      if (v === null || v === undefined) { return; }
      var x = n > 1 ? (i / (n - 1)) * w : 0;
      var y = hgt - 2 - ((v - lo) / (hi - lo)) * (hgt - 4);
      pts.push(x.toFixed(1) + ',' + y.toFixed(1));
    });
    svg.appendChild(s('polyline', { points: pts.join(' ') }));
    return svg;
  }

  function setValue(id, value, text) {
    var e = byId(id);
    if (!e) { return; }
    e.setAttribute('data-value', value === null || value === undefined ? '' : String(value));
    e.textContent = text;
  }

  function updateGraph(sm) {
    if (!graph) { return; }
    graph.nodes.forEach(function (n) {
      var c = sm.counters[n.name];
      setValue('count-' + cssId(n.name), c, fmtNum(c));
    });
    graph.edges.forEach(function (e) {
      var r = sm.rates[e.from];
      setValue('rate-' + cssId(e.from) + '-' + cssId(e.to), r, fmtRate(r));
      var path = byId('edge-' + cssId(e.from) + '-' + cssId(e.to));
      if (path) { path.setAttribute('class', r > 0 ? 'edge active' : 'edge'); }
    });
  }

  function updateSources(sm, health) {
    var tbody = document.querySelector('#sources-table tbody');
    while (tbody.firstChild) { tbody.removeChild(tbody.firstChild); }
    var names = Object.keys(sm.sources);
    if (!names.length) {
      var tr0 = h('tr'); var td0 = h('td', { colspan: 9, 'class': 'na' }, 'no sources yet');
      tr0.appendChild(td0); tbody.appendChild(tr0); return;
    }
    names.forEach(function (name) {
      var src = sm.sources[name], id = cssId(name);
      var tr = h('tr', { 'data-source': name });
      tr.appendChild(h('td', null, name));
      tr.appendChild(h('td', { 'class': 'num', id: 'src-rows-' + id, 'data-value': sm.counters[name] }, fmtNum(sm.counters[name])));
      var rate = sm.rates[name];
      tr.appendChild(h('td', { 'class': 'num', id: 'src-rate-' + id, 'data-value': rate === null ? '' : rate }, fmtRate(rate)));
      var c1 = h('td'); c1.appendChild(sparkline(sm.rate_history[name] || [], 'rate')); tr.appendChild(c1);
      tr.appendChild(h('td', { id: 'src-wm-' + id, 'data-value': src.watermark_ms === null ? '' : src.watermark_ms }, fmtWatermark(src.watermark_ms)));
      tr.appendChild(h('td', { 'class': 'num', id: 'src-lag-' + id, 'data-value': src.lag_ms === null ? '' : src.lag_ms }, fmtMs(src.lag_ms)));
      var c2 = h('td'); c2.appendChild(sparkline(src.lag_history || [], 'lag')); tr.appendChild(c2);
      tr.appendChild(h('td', { 'class': 'num' }, src.kafka_lag === null ? '—' : fmtNum(src.kafka_lag)));
      // connector health from metrics(): a dead broker shows here within a poll or two
      var hs = health[name] || {};
      var state = hs.status || 'ok';
      var text = hs.errors ? state + ' (' + hs.errors + ' errors' + (hs.last_error ? ': ' + hs.last_error : '') + ')' : state;
      tr.appendChild(h('td', { id: 'src-status-' + id, 'data-value': state, 'class': 'status-' + state }, text));
      tbody.appendChild(tr);
    });
  }

  function dl(target, pairs) {
    while (target.firstChild) { target.removeChild(target.firstChild); }
    pairs.forEach(function (p) {
      target.appendChild(h('dt', null, p[0]));
      target.appendChild(h('dd', p[2] ? { id: p[2], 'data-value': p[1] === null ? '' : p[1] } : null,
        typeof p[1] === 'number' ? fmtNum(p[1]) : (p[1] === null || p[1] === undefined ? '—' : String(p[1]))));
    });
  }

  function updateTotals(m) {
    dl(byId('totals-list'), [
      ['events ingested', m.events_ingested, 'total-ingested'],
      ['events emitted', m.events_emitted, 'total-emitted'],
      ['late rows dropped', m.late_events_dropped, 'total-late-dropped'],
      ['late rows routed', m.late_events_routed, 'total-late-routed']
    ]);
  }

  function notAvailable(box, what) {
    box.className = 'na';
    box.textContent = what || 'not available';
  }

  function updateCheckpoints(m) {
    var box = byId('checkpoints-body');
    var cp = m.checkpoints || (m.cluster && m.cluster.checkpoints);
    if (!cp) { notAvailable(box, 'not available (an in-memory database keeps no checkpoints)'); return; }
    box.className = '';
    var list = h('dl');
    var rec = cp.recovery;
    var recText = rec ? (typeof rec === 'object' ? Object.keys(rec).map(function (k) { return k + ' ' + rec[k]; }).join(', ') : String(rec)) : 'none since open';
    dl(list, [
      ['checkpoints', cp.checkpoints, 'cp-count'],
      ['last epoch', cp.last_epoch, 'cp-epoch'],
      ['last duration', cp.last_duration_s === null || cp.last_duration_s === undefined ? null : fmtMs(cp.last_duration_s * 1000)],
      ['failures', cp.failures, 'cp-failures'],
      ['last error', cp.last_error || 'none'],
      ['interval', cp.interval_s === undefined ? null : cp.interval_s + ' s'],
      ['WAL bytes', cp.wal_bytes],
      ['recovery', recText, 'cp-recovery']
    ]);
    box.replaceChildren(list);
  }

  function updateCluster(m) {
    var box = byId('cluster-body');
    var c = m.cluster;
    if (!c) { notAvailable(box, 'not available (embedded database)'); return; }
    box.className = '';
    var raft = c.raft, leader = c.raft_leader, term = c.raft_term;
    if (raft && typeof raft === 'object') { leader = leader || raft.leader; term = term === undefined ? raft.term : term; }
    var members = c.members || [];
    var list = h('dl');
    dl(list, [
      ['actors', c.actors, 'cluster-actors'],
      ['dead actors', Object.keys(c.dead || {}).length, 'cluster-dead'],
      ['ownership', raft ? 'Raft' : 'planned in-process (no Raft)'],
      ['Raft leader', leader === undefined || leader === null ? 'not available' : (typeof leader === 'object' ? (leader.raft || leader.id) : leader), 'raft-leader'],
      ['Raft term', term === undefined || term === null ? 'not available' : term, 'raft-term']
    ]);
    var frag = document.createDocumentFragment();
    frag.appendChild(list);
    var total = members.reduce(function (a, mb) { return a + (mb.vnodes || 0); }, 0);
    if (total > 0) {
      var bar = s('svg', { 'class': 'vnodes-bar', width: '100%', height: 14, viewBox: '0 0 ' + total + ' 1', preserveAspectRatio: 'none' });
      var x = 0, colors = ['#4c9aff', '#3fb68b', '#b58cff', '#f0a040', '#e06c75', '#56c2d6'];
      members.forEach(function (mb, i) {
        bar.appendChild(s('rect', { x: x, y: 0, width: mb.vnodes || 0, height: 1, fill: colors[i % colors.length] }));
        x += mb.vnodes || 0;
      });
      frag.appendChild(bar);
    }
    var table = h('table', { id: 'cluster-members' });
    var head = h('tr');
    ['actor', 'where', 'vnodes', 'max epoch', 'rows in', 'busy s'].forEach(function (t) { head.appendChild(h('th', null, t)); });
    table.appendChild(head);
    members.forEach(function (mb, i) {
      var tr = h('tr', { 'data-member': mb.member || i });
      var dead = c.dead && (c.dead[i] || c.dead[String(i)]);
      tr.appendChild(h('td', null, (mb.member || ('actor ' + i)) + (dead ? ' (dead)' : '')));
      tr.appendChild(h('td', null, [mb.node_id ? 'node ' + String(mb.node_id).slice(0, 8) : null, mb.pid ? 'pid ' + mb.pid : null,
        mb.core !== undefined ? 'core ' + mb.core : null].filter(Boolean).join(' / ')));
      tr.appendChild(h('td', { 'class': 'num', 'data-value': mb.vnodes }, mb.vnodes));
      tr.appendChild(h('td', { 'class': 'num' }, mb.max_epoch));
      tr.appendChild(h('td', { 'class': 'num' }, c.rows_per_actor ? fmtNum(c.rows_per_actor[i]) : '—'));
      tr.appendChild(h('td', { 'class': 'num' }, c.busy_s_per_actor ? c.busy_s_per_actor[i] : '—'));
      table.appendChild(tr);
    });
    frag.appendChild(table);
    box.replaceChildren(frag);
  }

  function setStatus(state, text) {
    var st = byId('status');
    st.setAttribute('data-state', state);
    st.textContent = text;
  }

  function update(payload) {
    var sm = payload.sampler, m = payload.metrics || {};
    var names = Object.keys(sm.counters).sort().join(',');
    var known = graph ? graph.nodes.map(function (n) { return n.name; }).sort().join(',') : null;
    var next = (!graph || polls % GRAPH_EVERY === 0 || names !== known) ? refreshGraph() : Promise.resolve();
    return next.then(function () {
      updateGraph(sm);
      updateSources(sm, m.sources || {});
      updateTotals(m);
      updateCheckpoints(m);
      updateCluster(m);
      polls += 1;
      setValue('updated', payload.ts, 'updated ' + new Date(payload.ts * 1000).toLocaleTimeString());
      byId('updated').setAttribute('data-polls', String(polls));
      setStatus('live', 'live');
    });
  }

  function poll() {
    api('/api/metrics').then(update).catch(function (err) {
      setStatus('error', 'error: ' + err.message.slice(0, 120));
    }).then(function () { window.setTimeout(poll, POLL_MS); });
  }

  poll();
}());
