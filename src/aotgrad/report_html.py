"""The explain report as one self-contained HTML page: inline CSS and JS, no network.

Each graph is drawn as an inline SVG laid out here in layers (a node's layer is one more
than the deepest node it reads; nodes within a layer side by side), forward nodes in blue,
backward in orange, saved tensors outlined red and recomputed nodes dashed. Tables sort by
clicking a header. The page's script reports its own failures into ``#report-status``
(``data-errors``), which the browser test reads.
"""

from __future__ import annotations

import html
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .explain import EntryReport, ExplainReport, GraphReport

__all__ = ["render"]

_NODE_W, _NODE_H, _GAP_X, _GAP_Y = 150, 34, 16, 34

_CSS = """
body { font-family: system-ui, sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.4em; } h2 { font-size: 1.2em; border-bottom: 1px solid #ccc; } h3 { font-size: 1.05em; }
table { border-collapse: collapse; margin: .5em 0 1em; font-size: .85em; }
th, td { border: 1px solid #ccc; padding: 2px 6px; text-align: left; vertical-align: top; }
th { background: #eee; cursor: pointer; user-select: none; }
th.asc::after { content: " \\25B2"; } th.desc::after { content: " \\25BC"; }
.graph { overflow: auto; max-height: 640px; border: 1px solid #ddd; margin-bottom: 1em; }
svg text { font: 10px monospace; pointer-events: none; }
.node-forward rect { fill: #dbe9ff; stroke: #3b6fc4; } .node-backward rect { fill: #ffe3c7; stroke: #d07a1f; }
.node-inference rect { fill: #dff3df; stroke: #3c8f3c; } .node-input rect { fill: #f4f4f4; stroke: #888; }
.node-output rect { fill: #fff; stroke: #444; }
.saved rect { stroke: #d11; stroke-width: 3px; } .recomputed rect { stroke-dasharray: 4 2; }
.edge { stroke: #999; fill: none; }
.legend span { display: inline-block; padding: 1px 6px; margin-right: 6px; border: 1px solid #999; font-size: .8em; }
pre { background: #f7f7f7; padding: .5em; overflow: auto; font-size: .8em; }
#report-status { font-size: .8em; color: #666; }
"""

_JS = """
(function () {
  var status = document.getElementById('report-status');
  var errors = [];
  function fail(message) {
    errors.push(String(message));
    status.setAttribute('data-errors', String(errors.length));
    status.textContent = 'script errors: ' + errors.join(' | ');
  }
  window.onerror = function (message) { fail(message); };
  window.addEventListener('unhandledrejection', function (e) { fail(e.reason); });
  try {
    function cellValue(row, k) {
      var text = row.cells[k] ? row.cells[k].textContent.trim() : '';
      var num = parseFloat(text);
      return (text !== '' && !isNaN(num) && /^-?[0-9.]/.test(text)) ? num : text.toLowerCase();
    }
    var tables = document.querySelectorAll('table.sortable');
    tables.forEach(function (table) {
      var headers = table.tHead.rows[0].cells;
      Array.prototype.forEach.call(headers, function (th, k) {
        th.addEventListener('click', function () {
          var asc = !th.classList.contains('asc');
          Array.prototype.forEach.call(headers, function (h) { h.classList.remove('asc', 'desc'); });
          th.classList.add(asc ? 'asc' : 'desc');
          var body = table.tBodies[0];
          var rows = Array.prototype.slice.call(body.rows);
          rows.sort(function (a, b) {
            var x = cellValue(a, k), y = cellValue(b, k);
            return (x < y ? -1 : x > y ? 1 : 0) * (asc ? 1 : -1);
          });
          rows.forEach(function (r) { body.appendChild(r); });
        });
      });
    });
    // hovering a node highlights the edges into and out of it
    document.querySelectorAll('svg.graph-svg g.node').forEach(function (g) {
      g.addEventListener('mouseenter', function () { g.querySelector('rect').style.fillOpacity = 0.5; });
      g.addEventListener('mouseleave', function () { g.querySelector('rect').style.fillOpacity = ''; });
    });
    var nodes = document.querySelectorAll('svg.graph-svg g.node').length;
    status.setAttribute('data-ready', '1');
    status.setAttribute('data-nodes', String(nodes));
    status.setAttribute('data-tables', String(tables.length));
    if (!errors.length) {
      status.setAttribute('data-errors', '0');
      status.textContent = 'ready: ' + nodes + ' graph nodes, ' + tables.length + ' tables';
    }
  } catch (e) { fail(e && e.stack ? e.stack : e); }
})();
"""


def _e(x: Any) -> str:
    return html.escape(str(x), quote=True)


def _table(rows: list[dict[str, Any]], caption: str = "") -> str:
    if not rows:
        return f"<p>{_e(caption)}: none</p>" if caption else ""
    head = "".join(f"<th>{_e(k)}</th>" for k in rows[0])
    body = "".join("<tr>" + "".join(f"<td>{_e(v)}</td>" for v in row.values()) + "</tr>" for row in rows)
    cap = f"<caption>{_e(caption)}</caption>" if caption else ""
    return f'<table class="sortable">{cap}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _node_class(kind: str, op: str, source: str) -> str:
    if op == "placeholder":
        return "node-input"
    if op == "output":
        return "node-output"
    if kind == "joint":
        return "node-backward" if source.startswith("grad of") else "node-forward"
    return f"node-{kind}"


def _svg(graph: GraphReport) -> str:
    """The graph laid out in layers (longest path from the inputs), as inline SVG."""
    layer: dict[str, int] = {}
    for n in graph.nodes:
        layer[n.name] = 1 + max((layer[a] for a in n.args if a in layer), default=-1)
    rows: dict[int, list[Any]] = {}
    for n in graph.nodes:
        rows.setdefault(layer[n.name], []).append(n)
    pos: dict[str, tuple[float, float]] = {}
    width = max(len(r) for r in rows.values()) * (_NODE_W + _GAP_X) + _GAP_X
    for depth, members in rows.items():
        for k, n in enumerate(members):
            pos[n.name] = (_GAP_X + k * (_NODE_W + _GAP_X), _GAP_Y / 2 + depth * (_NODE_H + _GAP_Y))
    height = (max(rows) + 1) * (_NODE_H + _GAP_Y)
    edges, boxes = [], []
    for n in graph.nodes:
        x, y = pos[n.name]
        for a in n.args:
            if a in pos:
                ax, ay = pos[a]
                x1, y1, x2, y2 = ax + _NODE_W / 2, ay + _NODE_H, x + _NODE_W / 2, y
                edges.append(f'<path class="edge" d="M{x1:.0f},{y1:.0f} C{x1:.0f},{y1 + 20:.0f} {x2:.0f},{y2 - 20:.0f} {x2:.0f},{y2:.0f}"/>')
        classes = ["node", _node_class(graph.kind, n.op, n.source)]
        if n.saved:
            classes.append("saved")
        if n.recomputed:
            classes.append("recomputed")
        tip = f"{n.name} = {n.target}({', '.join(n.args)}) {n.dtype}{n.shape}" + (f"\n{n.source}: {n.code}" if n.source else "")
        label = n.target if n.op == "call_function" else n.name
        boxes.append(
            f'<g class="{" ".join(classes)}" data-name="{_e(n.name)}"><title>{_e(tip)}</title>'
            f'<rect x="{x:.0f}" y="{y:.0f}" width="{_NODE_W}" height="{_NODE_H}" rx="4"/>'
            f'<text x="{x + 4:.0f}" y="{y + 13:.0f}">{_e(n.name[:22])}</text>'
            f'<text x="{x + 4:.0f}" y="{y + 26:.0f}">{_e(label[:22])} {_e(n.shape[:14])}</text></g>'
        )
    return (
        f'<div class="graph"><svg class="graph-svg" data-kind="{_e(graph.kind)}" xmlns="http://www.w3.org/2000/svg" '
        f'width="{width:.0f}" height="{height:.0f}">{"".join(edges)}{"".join(boxes)}</svg></div>'
    )


def _entry(k: int, e: EntryReport) -> str:
    parts = [f'<section class="entry" id="entry-{k}"><h2>Entry {k}: {_e(e.function)} ({_e(e.kind)})</h2>']
    parts.append(_table(
        [{"stage": s, "ms": round(v * 1000, 3)} for s, v in e.stage_seconds.items()]
        + [{"stage": "total", "ms": round(e.compile_seconds * 1000, 3)}], "compile time per stage"))
    parts.append(f"<h3>Guard</h3><pre>{_e(e.guard)}</pre>")
    if e.recompile_reasons:
        parts.append("<h3>Why it was compiled</h3><pre>" + _e("\n".join(e.recompile_reasons)) + "</pre>")
    parts.append("<h3>Inputs</h3>" + _table(list(e.inputs)))
    parts.append("<h3>Outputs</h3>" + _table(list(e.outputs)))
    if e.kind == "training":
        parts.append(f"<h3>Saved for backward: {len(e.saved)} values, {e.saved_bytes} bytes</h3>")
        parts.append(_table([
            {"name": s.name, "shape": list(s.shape), "dtype": s.dtype, "bytes": s.nbytes, "source": s.source, "code": s.code}
            for s in e.saved
        ]))
        parts.append(f"<p>Recomputed in the backward: {_e(', '.join(e.recomputed) or 'nothing')}</p>")
    if not e.sources_recorded:
        parts.append("<p>No source lines were recorded (compile through aotgrad.explain to see them).</p>")
    for g in e.graphs:
        parts.append(f"<h3>{_e(g.kind.capitalize())} graph ({g.num_ops} ops)</h3>")
        parts.append(_svg(g))
        parts.append(_table([
            {"node": n.name, "op": n.target, "inputs": ", ".join(n.args), "dtype": n.dtype, "shape": n.shape,
             "saved": "yes" if n.saved else "", "recomputed": "yes" if n.recomputed else "", "source": n.source, "code": n.code}
            for n in g.nodes if n.op != "output"
        ]))
        parts.append(f"<details><summary>code</summary><pre>{_e(g.code)}</pre></details>")
    parts.append(f"<details><summary>metadata</summary><pre>{_e(e.metadata_text)}\n\n{_e(e.signature_text)}</pre></details>")
    parts.append("</section>")
    return "".join(parts)


def render(report: ExplainReport) -> str:
    """The page for ``report``."""
    legend = (
        '<p class="legend"><span style="background:#dbe9ff">forward</span><span style="background:#ffe3c7">backward</span>'
        '<span style="background:#dff3df">inference</span><span style="border:3px solid #d11">saved for backward</span>'
        '<span style="border-style:dashed">recomputed in backward</span></p>'
    )
    toc = "".join(f'<li><a href="#entry-{k}">{_e(e.function)} ({_e(e.kind)})</a></li>' for k, e in enumerate(report.entries))
    body = "".join(_entry(k, e) for k, e in enumerate(report.entries)) or "<p>No entry was compiled.</p>"
    return (
        '<!DOCTYPE html><html><head><meta charset="utf-8">'
        f"<title>{_e(report.title)}</title><style>{_CSS}</style></head><body>"
        f'<h1>{_e(report.title)}</h1><div id="report-status" data-errors="" data-ready="0">script did not run</div>'
        f"{legend}<ul>{toc}</ul>{body}<script>{_JS}</script></body></html>"
    )
