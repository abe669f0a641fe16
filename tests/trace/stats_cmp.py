#!/usr/bin/env python3
"""stats_cmp.py: compares scaffold analyze's record counts with dftracer_stats' (dftracer-utils).

usage: stats_cmp.py DFTRACER_STATS SCAFFOLD INDEX_DIR TRACE...
Runs `dftracer_stats --report categories` and `--report pid_tids` (JSON) on the traces, and
`scaffold analyze --json` on the same traces, and checks that the records per (lower-cased)
category and per pid are the same. Prints one line and exits 0 when they agree, 1 otherwise.
"""
import json
import subprocess
import sys


def stats(exe, idx, traces, report):
    out = subprocess.run([exe, "--index-dir", idx, "--report", report, "--json", "--files", *traces],
                         capture_output=True, text=True, check=True).stdout
    rows = json.loads(out[out.index("["):])  # one object per file
    counts, total = {}, 0
    for row in rows:
        total += row.get("total_events", 0)
        for r in row.get("results", []):  # none for an empty file
            counts[r["name"]] = counts.get(r["name"], 0) + r["count"]
    return counts, total


def main():
    exe, scaffold, idx, traces = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
    cats, total = stats(exe, idx, traces, "categories")
    tids, _ = stats(exe, idx, traces, "pid_tids")
    pids = {}
    for k, v in tids.items():
        pid = k.split(":")[0]
        pids[pid] = pids.get(pid, 0) + v
    r = json.loads(subprocess.run([scaffold, "analyze", "--json", *traces], capture_output=True,
                                  text=True, check=True).stdout)
    ours = r["records"]
    ok = ours["by_category"] == cats and ours["by_pid"] == pids and ours["total"] == total
    print(("agree" if ok else "DIFFER") + f": {total} records; categories {cats}"
          + ("" if ok else f" vs ours {ours['by_category']}; pids {pids} vs ours {ours['by_pid']}"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
