#!/usr/bin/env python3
"""Medians of bench/suite.sh runs, as a Markdown table per directory.

    bench/median.py OUT_DIR [OUT_DIR ...]

Each OUT_DIR holds SCENARIO.RUN.json files; every figure is the median over
the runs, and `of /healthz` divides by the median `baseline` of the same
directory.
"""
import glob
import json
import os
import statistics
import sys


def runs(directory):
    found = {}
    for path in sorted(glob.glob(os.path.join(directory, "*.json"))):
        name = os.path.basename(path).rsplit(".", 2)[0]
        with open(path) as f:
            found.setdefault(name, []).append(json.load(f))
    return found


def table(directory):
    found = runs(directory)
    reports = {
        name: [r for doc in docs for r in doc.get("reports", []) if r["scenario"] == name]
        for name, docs in found.items()
    }
    median = lambda name, key: statistics.median(r[key] for r in reports[name])
    base = median("baseline", "calls_per_s") if reports.get("baseline") else None
    print(f"\n{directory}\n")
    print("| scenario | runs | calls/s | p50 ms | p95 ms | p99 ms | errors | of /healthz |")
    print("|---|---|---|---|---|---|---|---|")
    for name in sorted(reports):
        rs = reports[name]
        if not rs:
            continue
        rate = median(name, "calls_per_s")
        ratio = f"{100 * rate / base:.1f} %" if base and rate else ""
        print(
            f"| `{name}` | {len(rs)} | {rate:,.0f} | {median(name, 'p50_ms'):.2f} | "
            f"{median(name, 'p95_ms'):.2f} | {median(name, 'p99_ms'):.2f} | "
            f"{sum(r['errors'] for r in rs)} | {ratio} |"
        )
        for r in rs:
            extra = r.get("extra", {})
            if extra.get("double_claims") or extra.get("holder_mismatches"):
                print(f"| `{name}` | DOUBLE CLAIMS: {extra} |")
    for name, docs in sorted(found.items()):
        if docs and "reports" not in docs[0]:
            key = next(iter(docs[0]))
            value = statistics.median(d[key] for d in docs)
            print(f"\n{key}: median {value / 1024:.1f} MiB over {len(docs)} runs")


for d in sys.argv[1:]:
    table(d)
