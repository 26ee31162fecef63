"""aotgrad.explain, its HTML page (opened in headless Chromium) and ``python -m aotgrad explain``."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from torch import nn

import aotgrad
from aotgrad.compilers import nop


def _readme_f(buf, x):
    buf.add_(1)                 # mutates an input
    return x.t(), (x * buf).sum()   # a view of an input, and a fresh tensor


def test_readme_example_metadata_saved_bytes_and_source_lines():
    buf, x = torch.zeros(2, 3), torch.randn(2, 3, requires_grad=True)
    ebuf, ex = buf.clone(), x.detach().clone().requires_grad_()
    report = aotgrad.explain(_readme_f, buf, x)
    view, loss = report.result
    eview, eloss = _readme_f(ebuf, ex)
    torch.testing.assert_close(loss, eloss)
    assert view._base is x and torch.equal(buf, ebuf)  # as in eager
    (entry,) = report.entries
    assert entry.kind == "training"
    assert entry.inputs[0]["mutation"] == "data" and entry.inputs[0]["autograd sees it"] is False
    assert entry.inputs[1]["mutation"] == "none"
    assert (entry.outputs[0]["type"], entry.outputs[0]["aliases"]) == ("alias_of_input", "input 1")
    assert (entry.outputs[1]["type"], entry.outputs[1]["aliases"]) == ("non_alias", "")
    # saved bytes, computed independently: the backward graph's non-tangent inputs
    bw = aotgrad.aot_function(_readme_f, nop)
    bw(torch.zeros(2, 3), torch.randn(2, 3, requires_grad=True))
    placeholders = bw.entries[0].graphs["backward"].graph.find_nodes(op="placeholder")
    expected = sum(
        p.meta["val"].numel() * p.meta["val"].element_size()
        for p in placeholders if not p.name.startswith("tangents")
    )
    assert entry.saved_bytes == expected == 2 * 3 * 4  # buf + 1, float32[2, 3]
    (saved,) = entry.saved
    assert (saved.shape, saved.dtype, saved.nbytes) == ((2, 3), "float32", 24)
    assert saved.source.endswith(f"in _readme_f") and saved.code.startswith("buf.add_(1)")
    # every op node of the forward is traced to a line of _readme_f; backward ones to "grad of"
    fw_ops = [n for n in entry.graph("forward").nodes if n.op == "call_function"]
    assert fw_ops and all("_readme_f" in n.source for n in fw_ops)
    bw_ops = [n for n in entry.graph("backward").nodes if n.op == "call_function"]
    assert bw_ops and all(n.source.startswith("grad of") for n in bw_ops)
    assert set(entry.stage_seconds) == {"analysis", "tracing", "partition", "compile forward", "compile backward"}
    text = str(report)
    assert "saved for backward: 1 values, 24 bytes" in text and "alias_of_input" in text


def test_module_and_recompute_and_inference():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    x = torch.randn(5, 4)
    report = aotgrad.explain(
        model, x, fw_compiler=nop, bw_compiler=nop,
    )
    torch.testing.assert_close(report.result, model(x))
    (entry,) = report.entries
    assert entry.kind == "training" and entry.sources_recorded
    assert sum(s.nbytes for s in entry.saved) == entry.saved_bytes > 0
    with torch.no_grad():
        inference = aotgrad.explain(model, x)
    (entry,) = inference.entries
    assert entry.kind == "inference" and [g.kind for g in entry.graphs] == ["inference"]


def test_min_cut_recomputation_is_reported():
    def f(x, w):
        return (x @ w).relu().sin().sum()

    x, w = torch.randn(4, 4), torch.randn(4, 4, requires_grad=True)
    cf = aotgrad.aot_function(f, nop, partition_fn=aotgrad.min_cut_rematerialization_partition)
    cf(x, w)
    plain = aotgrad.explain(cf, x, w)  # already compiled: no source lines, same graphs
    (entry,) = plain.entries
    assert not entry.sources_recorded
    bw_ops = {n.name for n in entry.graph("backward").nodes if n.op == "call_function"}
    fw_ops = {n.name for n in entry.graph("forward").nodes if n.op == "call_function"}
    assert set(entry.recomputed) == bw_ops & fw_ops


def test_already_compiled_function_reports_every_entry_with_reasons():
    cf = aotgrad.aot_function(lambda x: x * 2, nop)
    cf(torch.randn(2))
    report = aotgrad.explain(cf, torch.randn(3))
    assert len(report.entries) == 2
    first, second = report.entries
    assert first.recompile_reasons == () and "shape was (2,), now (3,)" in second.recompile_reasons[0]


CLI_SCRIPT = '''
import sys
import torch
from torch import nn
import aotgrad
from aotgrad.compilers import nop

def step(w, x):
    y = (x @ w).tanh()   # the line the report must name
    return y.sum()

cf = aotgrad.aot_function(step, nop)
w = torch.randn(3, 3, requires_grad=True)
cf(w, torch.randn(2, 3)).backward()
model = aotgrad.aot_module(nn.Linear(3, 1), nop)
model(torch.randn(4, 3)).sum().backward()
dynamo = torch.compile(nn.Linear(3, 2), backend="aotgrad")
dynamo(torch.randn(4, 3)).sum().backward()
print("script args:", sys.argv[1:])
'''


def test_cli_runs_a_script_and_reports_its_entries(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(CLI_SCRIPT))
    out_html = tmp_path / "out.html"
    proc = subprocess.run(
        [sys.executable, "-m", "aotgrad", "explain", str(script), "--html", str(out_html), "--lr", "0.1"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert "script args: ['--lr', '0.1']" in proc.stdout
    assert "3 entries" in proc.stdout  # aot_function, aot_module, torch.compile
    assert "== Linear.forward: training entry" in proc.stdout
    assert f"{script}:9 in step" in proc.stdout  # y = (x @ w).tanh()
    assert "grad of" in proc.stdout
    assert out_html.exists() and "<svg" in out_html.read_text()


def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    return "/usr/bin/chromium" if os.path.exists("/usr/bin/chromium") else None


def test_html_report_loads_in_headless_chromium(tmp_path):
    browser = _chromium()
    if browser is None:
        pytest.skip("no chromium: run tools/install_test_browser.sh (the README's test command does)")
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def train_step(w, b, x, target):
        hidden = nn.functional.linear(x, w, b).relu()
        return nn.functional.mse_loss(hidden.sin(), target)

    cmodel = aotgrad.aot_module(model, nop)
    report = aotgrad.explain(cmodel, torch.randn(4, 6))
    report.result.sum().backward()
    opt.step()
    w, b = torch.randn(3, 6, requires_grad=True), torch.randn(3, requires_grad=True)
    report.entries += aotgrad.explain(train_step, w, b, torch.randn(4, 6), torch.randn(4, 3)).entries
    page = Path(report.save_html(tmp_path / "report.html"))
    flags = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--hide-scrollbars"]
    dom = subprocess.run(
        [browser, *flags, "--virtual-time-budget=5000", "--dump-dom", page.as_uri()],
        capture_output=True, text=True, timeout=120,
    )
    assert dom.returncode == 0, dom.stderr[-2000:]
    status = re.search(r'<div id="report-status"([^>]*)>([^<]*)<', dom.stdout)
    assert status is not None, dom.stdout[:2000]
    attrs = dict(re.findall(r'(data-[a-z]+)="([^"]*)"', status.group(1)))
    assert attrs.get("data-errors") == "0", status.group(2)  # the page's script ran without errors
    assert attrs.get("data-ready") == "1"
    svgs = re.findall(r'<svg class="graph-svg" data-kind="([a-z]+)"', dom.stdout)
    assert {"joint", "forward", "backward"} <= set(svgs)
    assert int(attrs["data-nodes"]) == dom.stdout.count('<g class="node ') > 20
    assert re.search(r'<g class="node node-forward saved"', dom.stdout)  # saved tensors marked
    assert re.search(r'<g class="node node-backward', dom.stdout)
    assert int(attrs["data-tables"]) == dom.stdout.count('<table class="sortable"') > 5
    screenshot = tmp_path / "report.png"
    shot = subprocess.run(
        [browser, *flags, "--window-size=1200,1600", f"--screenshot={screenshot}", page.as_uri()],
        capture_output=True, text=True, timeout=120,
    )
    assert shot.returncode == 0 and screenshot.stat().st_size > 10_000, shot.stderr[-2000:]
    print(f"report: {page}\nscreenshot: {screenshot}")
