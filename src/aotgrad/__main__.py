"""Command line: ``python -m aotgrad explain script.py [--html out.html] [script args...]``.

Runs the script as ``__main__`` (``runpy``, with ``sys.argv`` set to the script and its
arguments) while observing every entry aotgrad compiles (``aot_function``, ``aot_module``,
the ``torch.compile`` backend; :func:`aotgrad.explain.observe_compiles`), then prints the
report and, with ``--html``, writes the page.
"""

from __future__ import annotations

import argparse
import runpy
import sys

from .explain import ExplainReport, entry_report, observe_compiles


def _explain_script(script: str, script_args: list[str], html_path: str | None) -> int:
    saved_argv = sys.argv
    sys.argv = [script, *script_args]
    try:
        with observe_compiles() as seen:
            runpy.run_path(script, run_name="__main__")
    finally:
        sys.argv = saved_argv
    report = ExplainReport(title=f"aotgrad report for {script}")
    report.entries = [entry_report(fn, entry) for fn, entry in seen]
    print(report)
    if html_path:
        report.save_html(html_path)
        print(f"\nHTML report written to {html_path}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m aotgrad", description="aotgrad tools")
    sub = parser.add_subparsers(dest="command", required=True)
    explain = sub.add_parser(
        "explain", help="run a script and report every entry aotgrad compiled while it ran",
        description="Run SCRIPT (with its ARGS) and report every entry aotgrad compiled: metadata, "
        "graphs with source lines, saved tensors, compile time per stage, guards.",
    )
    explain.add_argument("script")
    explain.add_argument("--html", metavar="OUT.html", help="also write the report as one self-contained page")
    explain.add_argument("args", nargs=argparse.REMAINDER, help="the script's own arguments")
    ns = parser.parse_args(argv)
    script_args, html_path = list(ns.args), ns.html
    # ``explain script.py --html out.html args...``: the option right after the script is ours
    while script_args[:1] == ["--html"] and len(script_args) >= 2:
        html_path, script_args = script_args[1], script_args[2:]
    return _explain_script(ns.script, script_args, html_path)


if __name__ == "__main__":
    sys.exit(main())
