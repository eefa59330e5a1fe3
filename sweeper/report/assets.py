"""The pages' look and their one script: the inline CSS the report and the cross-sweep index
share, and the few lines of JavaScript that sort a table by a column and copy a row's link (the
pages work offline, so both travel inside them)."""

CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0 auto;max-width:1100px;
  padding:16px 24px;color:#222}
h1{font-size:22px;margin:8px 0}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #ddd;padding-bottom:4px}
.headline{display:grid;grid-template-columns:repeat(auto-fit,minmax(180px,1fr));gap:10px;margin:12px 0}
.card{background:#f6f8fa;border:1px solid #e1e4e8;border-radius:6px;padding:8px 12px}
.card b{display:block;font-size:20px}.card span{color:#555;font-size:12px}
pre{background:#f6f8fa;border:1px solid #e1e4e8;border-radius:6px;padding:10px;overflow-x:auto;white-space:pre-wrap;
  word-break:break-all}
img.chart{max-width:100%;height:auto;display:block;margin:8px 0}
table{border-collapse:collapse;font-size:12px}
th,td{border:1px solid #e1e4e8;padding:3px 6px;text-align:left;vertical-align:top;white-space:nowrap}
th{background:#f6f8fa;cursor:pointer;user-select:none;position:sticky;top:0}th:hover{background:#eaeef2}
td.num{text-align:right;font-variant-numeric:tabular-nums}tr.fail td{color:#8b0000}td.reason{cursor:help}
tr:target td{background:#fff8c5}a.link{color:#888;text-decoration:none;margin-left:4px}a.link:hover{color:#0969da}
pre.diff{word-break:normal;overflow-wrap:anywhere}pre.diff .del{color:#b31d28;background:#ffeef0;display:block}
pre.diff .ins{color:#22863a;background:#f0fff4;display:block}pre.diff .mark{user-select:none}
pre.diff .del,pre.diff .ins{padding-left:2ch;text-indent:-2ch}
.note{background:#fff8c5;border:1px solid #d4a72c;border-radius:6px;padding:6px 10px;margin:6px 0}
.muted{color:#666}details{margin:8px 0}summary{cursor:pointer;color:#0969da}
.tablewrap{max-height:600px;overflow:auto;max-width:100%}
@media print{body{max-width:none;padding:0}.tablewrap{max-height:none;overflow:visible}th{position:static}
h2{break-after:avoid}img.chart{break-inside:avoid}}
"""

SORT_JS = """
document.querySelectorAll('table.sortable').forEach(function(table){
  table.querySelectorAll('th').forEach(function(th, col){
    th.addEventListener('click', function(){
      var body = table.tBodies[0];
      var rows = Array.prototype.slice.call(body.rows);
      var asc = th.getAttribute('aria-sort') !== 'ascending';
      table.querySelectorAll('th').forEach(function(h){ h.removeAttribute('aria-sort'); });
      th.setAttribute('aria-sort', asc ? 'ascending' : 'descending');
      function key(row){ var c = row.cells[col]; var v = c.getAttribute('data-v');
        return v === null ? c.textContent : (v === '' ? NaN : parseFloat(v)); }
      rows.sort(function(a, b){
        var x = key(a), y = key(b);
        var xn = typeof x === 'number', yn = typeof y === 'number';
        if (xn && isNaN(x)) return 1; if (yn && isNaN(y)) return -1;
        var r = (xn && yn) ? x - y : String(x).localeCompare(String(y), undefined, {numeric: true});
        return asc ? r : -r;
      });
      rows.forEach(function(r){ body.appendChild(r); });
    });
  });
});
document.querySelectorAll('a.link').forEach(function(a){
  a.addEventListener('click', function(){
    var url = location.href.split('#')[0] + a.getAttribute('href');
    if (navigator.clipboard) { navigator.clipboard.writeText(url).catch(function(){}); }
  });
});
"""
