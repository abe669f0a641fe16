#!/usr/bin/env python3
"""py_reader.py: the baseline, a straightforward Python reader of dftracer traces (gzip + json),
as DFAnalyzer's per-batch loader does it before building dataframes: decompress, skip the
bracket lines, json.loads every line, keep the events.
usage: py_reader.py REPEATS TRACE... -> events=N median_s=S events_per_s=R"""
import gzip
import json
import statistics
import sys
import time


def load(paths):
    events = []
    for p in paths:
        op = gzip.open if p.endswith(".gz") else open
        with op(p, "rt", errors="replace") as f:
            for line in f:
                line = line.strip()
                if not line or line[0] in "[]":
                    continue
                ev = json.loads(line)
                if ev.get("ph") in ("X", 1):  # 1.x letter, 2.x integer
                    events.append(ev)
    return len(events)


def main():
    reps = int(sys.argv[1])
    paths = sys.argv[2:]
    times = []
    n = 0
    for _ in range(reps):
        t0 = time.perf_counter()
        n = load(paths)
        times.append(time.perf_counter() - t0)
    med = statistics.median(times)
    print("events=%d median_s=%.3f events_per_s=%.0f" % (n, med, n / med))


if __name__ == "__main__":
    main()
