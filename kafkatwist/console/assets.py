"""
The console's stylesheet and script, served by the broker itself (no build
step, nothing fetched from elsewhere).
"""

CSS = """
:root { --bg:#f5f6f8; --panel:#fff; --ink:#1d2330; --muted:#6b7385; --line:#e3e6ec;
  --accent:#2f6fed; --side:#161b26; --side-ink:#c9cfdb; --ok:#1f9d55; --warn:#d98a00; --bad:#d64545; }
* { box-sizing: border-box; }
body { margin:0; font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,Helvetica,Arial,sans-serif;
  color:var(--ink); background:var(--bg); display:flex; min-height:100vh; }
nav.side { width:210px; background:var(--side); color:var(--side-ink); padding:18px 0; flex:none; }
nav.side .brand { font-weight:700; font-size:17px; color:#fff; padding:0 20px 4px; letter-spacing:.2px; }
nav.side .cluster { font-size:11px; color:#8a93a6; padding:0 20px 18px; word-break:break-all; }
nav.side a { display:block; color:var(--side-ink); text-decoration:none; padding:8px 20px; border-left:3px solid transparent; }
nav.side a:hover { background:#1f2633; color:#fff; }
nav.side a.on { background:#222a39; color:#fff; border-left-color:var(--accent); }
nav.side .who { font-size:12px; color:#8a93a6; padding:18px 20px 0; word-break:break-all; }
main { flex:1; padding:22px 28px 40px; min-width:0; }
h1 { font-size:21px; margin:0 0 4px; font-weight:650; word-break:break-all; }
h2 { font-size:15px; margin:26px 0 10px; font-weight:650; }
.sub { color:var(--muted); margin-bottom:18px; }
.crumbs { color:var(--muted); font-size:12px; margin-bottom:6px; }
.crumbs a { color:var(--muted); }
a { color:var(--accent); }
.cards { display:grid; grid-template-columns:repeat(auto-fill,minmax(160px,1fr)); gap:12px; margin:14px 0 6px; }
.card { background:var(--panel); border:1px solid var(--line); border-radius:8px; padding:12px 14px; }
.card .k { color:var(--muted); font-size:12px; text-transform:uppercase; letter-spacing:.4px; }
.card .v { font-size:22px; font-weight:650; margin-top:2px; font-variant-numeric:tabular-nums; }
.card .v.bad { color:var(--bad); } .card .v.ok { color:var(--ok); }
table { width:100%; border-collapse:collapse; background:var(--panel); border:1px solid var(--line);
  border-radius:8px; overflow:hidden; }
th, td { text-align:left; padding:7px 10px; border-bottom:1px solid var(--line); vertical-align:middle; }
th { background:#fafbfc; font-size:12px; color:var(--muted); font-weight:600; text-transform:uppercase; letter-spacing:.3px; }
td.n, th.n { text-align:right; font-variant-numeric:tabular-nums; }
tr:last-child td { border-bottom:none; }
tbody tr:hover { background:#f8faff; }
code, .mono { font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace; font-size:12.5px; }
.badge { display:inline-block; padding:1px 7px; border-radius:10px; font-size:11.5px; font-weight:600;
  background:#eef1f6; color:#4a5366; white-space:nowrap; }
.badge.ok { background:#e3f5ea; color:var(--ok); } .badge.warn { background:#fff3dc; color:#a36800; }
.badge.bad { background:#fde8e8; color:var(--bad); } .badge.blue { background:#e6eefe; color:var(--accent); }
.toolbar { display:flex; gap:10px; align-items:center; margin:10px 0 12px; flex-wrap:wrap; }
input[type=search], input[type=text], input[type=number], select, textarea { font:inherit; padding:6px 9px;
  border:1px solid #cfd4de; border-radius:6px; background:#fff; }
input[type=search] { width:280px; }
button, .btn { font:inherit; padding:6px 12px; border:1px solid #cfd4de; border-radius:6px; background:#fff;
  cursor:pointer; text-decoration:none; color:var(--ink); }
button.primary { background:var(--accent); border-color:var(--accent); color:#fff; }
button.danger { background:#fff; border-color:var(--bad); color:var(--bad); }
.muted { color:var(--muted); }
tr.uncommitted td { color:var(--muted); font-style:italic; }
.empty { padding:26px; text-align:center; color:var(--muted); background:var(--panel); border:1px dashed var(--line); border-radius:8px; }
.err { background:#fde8e8; color:#8c2323; border:1px solid #f4c7c7; padding:12px 14px; border-radius:8px; }
.note { background:#eef4ff; border:1px solid #d3e1fd; padding:10px 14px; border-radius:8px; color:#28427a; }
.grid2 { display:grid; grid-template-columns:1fr 1fr; gap:16px; }
.chart { background:var(--panel); border:1px solid var(--line); border-radius:8px; padding:10px 12px; }
.chart .t { font-size:12px; color:var(--muted); text-transform:uppercase; letter-spacing:.3px; }
.chart .last { float:right; font-weight:650; color:var(--ink); text-transform:none; }
.chart svg { width:100%; height:90px; display:block; margin-top:6px; background:linear-gradient(#fff,#fbfcfe); }
.chart .legend { font-size:12px; display:flex; gap:12px; flex-wrap:wrap; margin-top:2px; }
.chart .legend b { color:var(--ink); font-weight:600; }
.chart text.nodata { fill:#9aa3b5; font-size:12px; }
.charts { display:grid; grid-template-columns:repeat(auto-fill,minmax(300px,1fr)); gap:14px; margin-top:10px; }
.small { font-size:12px; font-weight:400; }
.cards .chart.wide { grid-column:span 2; padding:8px 12px; }
td.nowrap, .nowrap { white-space:nowrap; }
td.k { max-width:220px; } td.v { max-width:520px; } td.hd { max-width:260px; font-size:12.5px; }
td.hd .hdr { margin-bottom:3px; } td.hd .hdr code { color:var(--muted); } td.hd pre.val { display:inline; }
tr.control td { background:#fbfbf6; }
pre.val { font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace; font-size:12.5px; margin:0; white-space:pre-wrap; word-break:break-all; max-height:16em; overflow:auto; }
details summary { cursor:pointer; color:var(--muted); }
.flash { padding:10px 14px; border-radius:8px; margin-bottom:16px; }
.flash.ok { background:#e3f5ea; border:1px solid #bfe6cd; color:#17663a; }
.flash.err { background:#fde8e8; border:1px solid #f4c7c7; color:#8c2323; }
.actions { display:grid; grid-template-columns:repeat(auto-fill,minmax(300px,1fr)); gap:14px; align-items:start; }
.panel { background:var(--panel); border:1px solid var(--line); border-radius:8px; padding:12px 14px; }
details.panel { margin-top:18px; } details.panel summary { font-weight:600; color:var(--ink); }
form.stack { display:flex; flex-direction:column; gap:8px; }
form.stack label { display:flex; flex-direction:column; gap:3px; font-size:12.5px; color:var(--muted); }
form.stack label input[type=checkbox] { align-self:flex-start; }
form.stack input, form.stack select, form.stack textarea { color:var(--ink); font-size:13.5px; }
details form.stack { max-width:460px; margin-top:10px; }
.login { max-width:380px; margin:70px auto; }
.login h1 { margin-bottom:6px; } .login .err { margin:10px 0; }
form.logout { margin-top:8px; } form.logout button { padding:3px 10px; font-size:12px; background:#222a39; color:#c9cfdb; border-color:#3a4356; }
.bar { height:6px; background:#eef1f6; border-radius:3px; overflow:hidden; min-width:60px; }
.bar span { display:block; height:100%; background:var(--warn); }
"""

JS = r"""
(function () {
  // Filter a table's rows as one types (search boxes with data-filter="<table id>").
  document.querySelectorAll('input[data-filter]').forEach(function (box) {
    var table = document.getElementById(box.getAttribute('data-filter'));
    if (!table) return;
    box.addEventListener('input', function () {
      var q = box.value.toLowerCase();
      table.querySelectorAll('tbody tr').forEach(function (row) {
        var key = (row.getAttribute('data-key') || row.textContent).toLowerCase();
        row.style.display = key.indexOf(q) >= 0 ? '' : 'none';
      });
    });
  });
  // Live charts: redraw every chart from /api/history each interval.
  var COLORS = ['#2f6fed', '#d98a00', '#1f9d55', '#d64545'];
  function fmt(v, unit) {
    if (v === null || v === undefined) return '\u2014';
    if (unit === 'B/s') {
      var units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'], i = 0;
      while (Math.abs(v) >= 1024 && i < units.length - 1) { v /= 1024; i++; }
      return (i ? v.toFixed(1) : v.toFixed(0)) + ' ' + units[i] + '/s';
    }
    if (unit === 'ms') return v.toFixed(1) + ' ms';
    if (unit === '/s') return v.toFixed(1) + '/s';
    return String(v);
  }
  function svg(series) {
    var W = 300, H = 90, pts = [];
    series.forEach(function (s) { s.values.forEach(function (p) { if (p[1] !== null) pts.push(p); }); });
    if (pts.length < 2) {
      return '<svg viewBox="0 0 300 90" preserveAspectRatio="none"><text x="4" y="45" class="nodata">collecting\u2026</text></svg>';
    }
    var t0 = Math.min.apply(null, pts.map(function (p) { return p[0]; }));
    var t1 = Math.max.apply(null, pts.map(function (p) { return p[0]; }));
    var top = (Math.max.apply(null, pts.map(function (p) { return p[1]; })) || 1) * 1.15, span = (t1 - t0) || 1;
    var out = '';
    series.forEach(function (s, i) {
      var c = s.values.filter(function (p) { return p[1] !== null; }).map(function (p) {
        return ((p[0] - t0) / span * W).toFixed(1) + ',' + (H - 4 - p[1] / top * (H - 8)).toFixed(1);
      }).join(' ');
      out += '<polyline fill="none" stroke="' + COLORS[i % 4] + '" stroke-width="1.6" points="' + c + '"/>';
    });
    return '<svg viewBox="0 0 300 90" preserveAspectRatio="none">' + out + '</svg>';
  }
  var charts = Array.prototype.slice.call(document.querySelectorAll('.chart[data-keys]'));
  function refresh() {
    var byUrl = {};
    charts.forEach(function (el) {
      var g = el.getAttribute('data-group');
      var url = '/api/history' + (g !== null ? '?group=' + encodeURIComponent(g) : '');
      (byUrl[url] = byUrl[url] || []).push(el);
    });
    Object.keys(byUrl).forEach(function (url) {
      fetch(url, {credentials: 'same-origin'}).then(function (r) { return r.ok ? r.json() : null; }).then(function (data) {
        if (!data) return;
        byUrl[url].forEach(function (el) {
          var unit = el.getAttribute('data-unit');
          var keys = el.getAttribute('data-keys').split(',');
          var names = Array.prototype.map.call(el.querySelectorAll('.legend span'), function (s) {
            return s.firstChild.textContent.replace('\u25cf', '').trim();
          });
          var series = keys.map(function (k, i) {
            var values = data.lag && k === 'lag' ? data.lag : (data.series || []).map(function (r) { return [r.at, r[k]]; });
            return {name: names[i] || k, values: values};
          });
          el.querySelector('.plot').innerHTML = svg(series);
          var spans = el.querySelectorAll('.legend span b');
          series.forEach(function (s, i) {
            var n = s.values.length, text = fmt(n ? s.values[n - 1][1] : null, unit);
            if (unit === 'ms' && n && data.interval) {
              var endAt = s.values[n - 1][0];
              text = 'no requests in the last ' + Math.round(endAt - s.values[0][0] + data.interval) + ' s';
              for (var j = n - 1; j >= 0; j--) {
                if (s.values[j][1] !== null && s.values[j][1] !== undefined) {
                  var age = Math.round(endAt - s.values[j][0]);
                  text = fmt(s.values[j][1], unit) + (age ? ', ' + age + ' s ago' : '');
                  break;
                }
              }
            }
            if (spans[i]) spans[i].textContent = text;
          });
        });
      }).catch(function () {});
    });
  }
  if (charts.length) setInterval(refresh, 5000);
})();
"""
