#!/usr/bin/env python3
"""Checks the shipped Grafana dashboard (packaging/grafana/myriad.json): it is a dashboard
Grafana imports (a Prometheus data source input, panels with unique ids and a place on the
grid), every query is PromQL that Prometheus parses (each is written as a recording rule
and checked with `promtool check rules`; a broken query is shown to fail first, so the
check can fail), and every metric a query names is one docs/metrics.md documents (a
renamed family breaks the dashboard, and this check, not a user's screen).

Usage: scripts/check-grafana.py [DASHBOARD]   (run from the project root; needs promtool)
"""

import json
import pathlib
import re
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
SUFFIXES = ("_bucket", "_count", "_sum", "_total")


def fail(msg):
    print(f"check-grafana: {msg}", file=sys.stderr)
    sys.exit(1)


def promtool_accepts(exprs):
    """Whether promtool parses every expression (as recording rules); its output."""
    rules = {"groups": [{"name": "dashboard", "rules": [
        {"record": f"dashboard:query_{i}", "expr": e} for i, e in enumerate(exprs)]}]}
    with tempfile.NamedTemporaryFile("w", suffix=".yml", delete=False) as f:
        json.dump(rules, f)  # JSON is YAML
        path = f.name
    try:
        out = subprocess.run(["promtool", "check", "rules", path],
                             capture_output=True, text=True, timeout=60)
    finally:
        pathlib.Path(path).unlink()
    return out.returncode == 0, out.stdout + out.stderr


def family(name):
    for s in SUFFIXES:
        if name.endswith(s):
            return name[: -len(s)]
    return name


def panels_of(dash):
    for p in dash.get("panels", []):
        yield p
        yield from p.get("panels", [])


def main():
    path = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "packaging/grafana/myriad.json"
    dash = json.loads(path.read_text())
    if not any(i.get("pluginId") == "prometheus" for i in dash.get("__inputs", [])):
        fail("no Prometheus data source input (__inputs): Grafana's import would not ask for one")
    if not dash.get("uid") or not dash.get("title"):
        fail("the dashboard needs a uid and a title")
    ids, exprs = set(), []
    for p in panels_of(dash):
        if p.get("id") in ids:
            fail(f"panel id {p.get('id')} used twice")
        ids.add(p.get("id"))
        grid = p.get("gridPos", {})
        if not all(isinstance(grid.get(k), int) for k in ("h", "w", "x", "y")):
            fail(f"panel {p.get('title')!r} has no place on the grid")
        if p.get("type") == "row":
            continue
        targets = p.get("targets") or []
        if not targets:
            fail(f"panel {p.get('title')!r} has no query")
        for t in targets:
            if not t.get("expr"):
                fail(f"panel {p.get('title')!r}: a target without an expression")
            exprs.append(t["expr"])

    ok, out = promtool_accepts(["rate(myriad_requests_total[5m]"])
    if ok:
        fail("promtool accepted a broken query: this check would not catch one")
    ok, out = promtool_accepts(exprs)
    if not ok:
        fail(f"promtool refused a query of the dashboard:\n{out}")

    docs = (ROOT / "docs/metrics.md").read_text()
    documented = {family(n) for n in re.findall(r"myriad_[a-z0-9_]+", docs)}
    for e in exprs:
        for name in re.findall(r"myriad_[a-z0-9_]+", e):
            if family(name) not in documented:
                fail(f"{name} (in {e!r}) is not a metric docs/metrics.md documents")
    print(f"check-grafana: {len(exprs)} queries parse and name documented metrics")


if __name__ == "__main__":
    main()
