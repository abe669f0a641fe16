#!/usr/bin/env python3
"""The table of bench/train/parity.sh: epochs to the target Dice of scaffold and PyTorch per
configuration, side by side over the seeds both sides finished, with
  - means, medians and the slowest seed of each side (criterion: scaffold's slowest <= PyTorch's
    slowest + 2 epochs),
  - the ratio of mean epochs scaffold / PyTorch and its bootstrap 90% interval (10000 resamples of
    the seeds, paired: a seed's dataset is the same on both sides; percentile interval),
  - a two-sided Mann-Whitney U test of the two epoch distributions (normal approximation with tie
    correction) and a paired sign-flip permutation test of the mean difference,
  - the time-to-target ratio PyTorch / scaffold (median over seeds of the per-seed ratio, and the
    ratio of total times): meaningful only when measured on an idle machine,
  - where the mixed sides ran (wsot: scaffold's weights in PyTorch's order; wtos: the reverse):
    their mean and slowest epochs beside scaffold's and PyTorch's on the same seeds,
  - where the `same` side ran (PyTorch from scaffold's weights in scaffold's order): its epochs
    beside scaffold's and how many seeds agree within one epoch.
A run that did not converge counts with its epoch cap (marked '+').

usage: parity_stats.py RESULTS.csv   (config,seed,side,epochs,converged,time_s)
Needs numpy only."""
import csv
import math
import sys

import numpy as np


def mann_whitney(x, y):
    """Two-sided p of the Mann-Whitney U test, normal approximation with tie correction."""
    n1, n2 = len(x), len(y)
    allv = np.concatenate([x, y])
    order = allv.argsort(kind="mergesort")
    ranks = np.empty(len(allv))
    sv = allv[order]
    i = 0
    while i < len(sv):  # mid-ranks for ties
        j = i
        while j + 1 < len(sv) and sv[j + 1] == sv[i]:
            j += 1
        ranks[order[i:j + 1]] = (i + j) / 2 + 1
        i = j + 1
    u1 = ranks[:n1].sum() - n1 * (n1 + 1) / 2
    _, counts = np.unique(allv, return_counts=True)
    n = n1 + n2
    var = n1 * n2 / 12 * ((n + 1) - (counts ** 3 - counts).sum() / (n * (n - 1)))
    if var <= 0:
        return u1, 1.0
    z = (abs(u1 - n1 * n2 / 2) - 0.5) / math.sqrt(var)  # continuity correction
    return u1, math.erfc(max(z, 0) / math.sqrt(2))


def main(path):
    rows = list(csv.DictReader(open(path)))
    cfgs = []
    for r in rows:
        if r["config"] not in cfgs:
            cfgs.append(r["config"])
    rng = np.random.default_rng(12345)
    verdict = []
    for cfg in cfgs:
        by = {}
        for r in rows:
            if r["config"] == cfg:
                by.setdefault(int(r["seed"]), {})[r["side"]] = r
        seeds = sorted(s for s, v in by.items() if "scaffold" in v and "torch" in v)
        if not seeds:
            continue
        es = np.array([int(by[s]["scaffold"]["epochs"]) for s in seeds], dtype=float)
        et = np.array([int(by[s]["torch"]["epochs"]) for s in seeds], dtype=float)
        ts = np.array([float(by[s]["scaffold"]["time_s"]) for s in seeds])
        tt = np.array([float(by[s]["torch"]["time_s"]) for s in seeds])
        mark = lambda r: "" if r["converged"] == "1" else "+"
        print(f"== {cfg}: epochs to the target Dice over {len(seeds)} seeds "
              f"(each side its own initial weights and sample order; same dataset per seed)")
        has_same = all("same" in by[s] for s in seeds)
        same_h = f" {'same draw':>9}" if has_same else ""
        print(f"{'seed':>5} {'scaffold':>9} {'PyTorch':>8}{same_h} {'scaffold s':>11} "
              f"{'PyTorch s':>10}")
        for s in seeds:
            a, b = by[s]["scaffold"], by[s]["torch"]
            same_c = f" {by[s]['same']['epochs'] + mark(by[s]['same']):>9}" if has_same else ""
            print(f"{s:>5} {a['epochs'] + mark(a):>9} {b['epochs'] + mark(b):>8}{same_c} "
                  f"{float(a['time_s']):>11.2f} {float(b['time_s']):>10.2f}")
        ratio = es.mean() / et.mean()
        idx = rng.integers(0, len(seeds), size=(10000, len(seeds)))
        boot = es[idx].mean(1) / et[idx].mean(1)
        lo, hi = np.percentile(boot, [5, 95])
        _, p_mw = mann_whitney(es, et)
        d = es - et
        flips = rng.choice([-1.0, 1.0], size=(20000, len(seeds)))
        p_perm = float((np.abs((flips * d).mean(1)) >= abs(d.mean()) - 1e-12).mean())
        sd = lambda v: v.std(ddof=1) if len(v) > 1 else 0.0
        print(f"mean      {es.mean():9.2f} {et.mean():8.2f}   (median {np.median(es):g} vs "
              f"{np.median(et):g}; sd {sd(es):.2f} vs {sd(et):.2f})")
        print(f"slowest   {es.max():9.0f} {et.max():8.0f}")
        within = abs(ratio - 1) <= 0.15
        contains = lo <= 1 <= hi
        slow_ok = es.max() <= et.max() + 2
        print(f"ratio of mean epochs scaffold/PyTorch {ratio:.3f}, bootstrap 90% interval "
              f"[{lo:.3f}, {hi:.3f}] ({'contains' if contains else 'excludes'} 1; "
              f"{'within' if within else 'outside'} 15%)")
        print(f"Mann-Whitney U two-sided p = {p_mw:.3f}; paired permutation p = {p_perm:.3f}")
        print(f"slowest seed: scaffold {es.max():.0f} <= PyTorch {et.max():.0f} + 2: "
              f"{'yes' if slow_ok else 'NO'}")
        if has_same:
            em = np.array([int(by[s]["same"]["epochs"]) for s in seeds], dtype=float)
            agree = int((np.abs(em - es) <= 1).sum())
            bm = es[idx].mean(1) / em[idx].mean(1)
            mlo, mhi = np.percentile(bm, [5, 95])
            print(f"same draw (PyTorch from scaffold's weights, in scaffold's order): mean "
                  f"{em.mean():.2f} epochs vs scaffold's {es.mean():.2f} (ratio {es.mean() / em.mean():.3f}, "
                  f"bootstrap 90% [{mlo:.3f}, {mhi:.3f}]); {agree} of {len(seeds)} "
                  f"seeds within one epoch of scaffold, {int((em == es).sum())} equal")
        # The mixed draws (parity.sh SIDES wsot/wtos), over the seeds where they ran: which half
        # of a draw (initial weights or sample order) carries its tail.
        for side, what in (("wsot", "scaffold's weights, PyTorch's order"),
                           ("wtos", "PyTorch's weights, scaffold's order")):
            ms = [s for s in seeds if side in by[s]]
            if not ms:
                continue
            ev = np.array([int(by[s][side]["epochs"]) for s in ms], dtype=float)
            et_m = np.array([int(by[s]["torch"]["epochs"]) for s in ms], dtype=float)
            es_m = np.array([int(by[s]["scaffold"]["epochs"]) for s in ms], dtype=float)
            capped = sum(1 for s in ms if by[s][side]["converged"] != "1")
            print(f"mixed draw, {what}: mean {ev.mean():.2f} epochs over {len(ms)} seeds "
                  f"(scaffold {es_m.mean():.2f}, PyTorch {et_m.mean():.2f} on the same seeds); "
                  f"slowest {ev.max():.0f}, {capped} capped")
        tr = tt / ts
        print(f"time to target PyTorch/scaffold: median per-seed ratio {np.median(tr):.2f}x, "
              f"total {tt.sum():.1f} s / {ts.sum():.1f} s = {tt.sum() / ts.sum():.2f}x "
              f"(valid on an idle machine only)")
        verdict.append(f"{cfg}: mean ratio {ratio:.3f} [{lo:.3f}, {hi:.3f}], "
                       f"{'within 15%' if within else ('interval contains 1' if contains else 'DIFFERENT')}"
                       f", slowest {'ok' if slow_ok else 'NOT ok'}")
        print()
    for v in verdict:
        print(f"parity: {v}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    main(sys.argv[1])
