"""Checks `scaffold benchmark --profile` output with the tools its users read it with.

usage: check_profile.py RUN1 RUN2  (run folders of the same tiny benchmark at 1 and 2 ranks)

- caliper-reader reads profile.cali and profile-ranks.cali (records, globals);
- Hatchet's GraphFrame.from_caliperreader builds the region tree of profile-ranks.cali with
  every rank, the expected regions, and times that add up (children <= parent, exclusive >= 0,
  exclusive <= inclusive); the per-rank minibatch count equals train_stats.csv's steps;
- Thicket.from_caliperreader of both runs: one profile per run, the Adiak globals in its
  metadata table;
- profile.json is Chrome trace-event JSON: complete events with ts/dur, a process per rank and
  a named track per thread, slices properly nested per thread.
Prints one "ok"/"FAIL" line per check and exits 1 on any failure.
"""
import collections
import csv
import json
import math
import os
import sys
import warnings

warnings.filterwarnings("ignore")
failures = 0


def check(name, cond, detail=""):
    global failures
    if cond:
        print("ok   " + name)
    else:
        failures += 1
        print("FAIL " + name + (": " + str(detail) if detail else ""))


def region_paths(records):
    return {tuple(r["path"]) for r in records if "path" in r}


def main():
    import caliperreader
    import hatchet as ht
    import thicket as tt

    runs = sys.argv[1:3]
    prof = [os.path.join(r, "profile") for r in runs]

    # --- caliper-reader ---------------------------------------------------------------------
    for p, nranks in zip(prof, (1, 2)):
        r = caliperreader.CaliperReader()
        r.read(os.path.join(p, "profile.cali"))
        paths = region_paths(r.records)
        need = [("main",), ("main", "benchmark"), ("main", "benchmark", "epoch", "batch_loop", "minibatch")]
        check("caliperreader: profile.cali regions (%d rank)" % nranks,
              all(n in paths for n in need), sorted(paths)[:8])
        mb = [x for x in r.records if x.get("path") == list(need[2])]
        check("caliperreader: metrics per region",
              mb and float(mb[0]["min#inclusive#sum#time.duration"]) <= float(mb[0]["avg#inclusive#sum#time.duration"]) <= float(mb[0]["max#inclusive#sum#time.duration"]),
              mb[:1])
        check("caliperreader: jobsize global", r.globals.get("jobsize") == str(nranks), r.globals.get("jobsize"))
        rr = caliperreader.CaliperReader()
        rr.read(os.path.join(p, "profile-ranks.cali"))
        ranks = {int(x["mpi.rank"]) for x in rr.records}
        check("caliperreader: profile-ranks.cali has every rank", ranks == set(range(nranks)), ranks)
        mpi = [x for x in rr.records if "mpi.function" in x]
        if nranks > 1:
            check("MPI calls are regions (mpi.function)", mpi and any(x["mpi.function"] == "MPI_Allreduce" for x in mpi))

    # --- Hatchet ----------------------------------------------------------------------------
    gf = ht.GraphFrame.from_caliperreader(os.path.join(prof[1], "profile-ranks.cali"))
    df = gf.dataframe
    check("hatchet: (node, rank) index", list(df.index.names) == ["node", "rank"], df.index.names)
    check("hatchet: time and time (inc) columns", "time" in df.columns and "time (inc)" in df.columns, list(df.columns))
    names = set(df["name"])
    # no maxpool_fwd: on the CPU without checkpointing the pool is made inside the GroupNorm
    # before it (gnrelu_fwd, docs/profile.md)
    expected = ["main", "benchmark", "setup", "warmup", "epoch", "batch_loop", "loader_wait",
                "minibatch", "forward", "loss", "backward", "all_reduce", "optimizer",
                "update_loss", "validation", "checkpoint", "capture", "write", "down_list.0",
                "up_list.0", "conv3d_fwd", "conv3d_bwd_data", "conv3d_bwd_weight", "gnrelu_fwd",
                "gnrelu_bwd", "maxpool_bwd", "convt3d_fwd", "convt3d_bwd_data",
                "convt3d_bwd_weight", "conv1_fwd", "conv1_bwd", "MPI_Allreduce", "MPI_Waitall"]
    missing = [n for n in expected if n not in names]
    check("hatchet: the tree has the regions", not missing, missing)
    # A root listed as a path gets a second, empty row in Hatchet's reader (its own quirk with
    # Caliper's files too): per (node, rank) take the row with the time.
    inc = df.groupby(level=[0, 1])["time (inc)"].max()
    exc = df.groupby(level=[0, 1])["time"].max()
    bad_sum, bad_exc, n_checked = [], [], 0
    for node in gf.graph.traverse():
        for rank in (0, 1):
            p = inc.get((node, rank), 0.0)
            kids = sum(inc.get((c, rank), 0.0) for c in node.children)
            n_checked += 1
            if kids > p * (1 + 1e-9) + 1e-6:
                bad_sum.append((node.frame["name"], rank, kids, p))
            e = exc.get((node, rank), 0.0)
            if e < -1e-9 or e > p + 1e-6:
                bad_exc.append((node.frame["name"], rank, e, p))
    check("hatchet: children <= parent on every rank (%d nodes x ranks)" % n_checked, not bad_sum, bad_sum[:3])
    check("hatchet: 0 <= exclusive <= inclusive", not bad_exc, bad_exc[:3])
    # the minibatch count per rank against train_stats.csv (steps per replica)
    with open(os.path.join(runs[1], "train_stats.csv")) as f:
        steps = sum(int(row["optimizer_steps"]) for row in csv.DictReader(f))
    calls = [x for x in caliperreader.read_caliper_contents(os.path.join(prof[1], "profile-ranks.cali"))[0]
             if x.get("path") == ["main", "benchmark", "epoch", "batch_loop", "minibatch"]]
    check("minibatch calls per rank = train_stats.csv optimizer steps (%d)" % steps,
          len(calls) == 2 and all(int(x["sum#region.count"]) == steps for x in calls),
          [(x["mpi.rank"], x["sum#region.count"]) for x in calls])
    gfa = ht.GraphFrame.from_caliperreader(os.path.join(prof[0], "profile.cali"))
    check("hatchet: profile.cali (spot) loads with its aliases",
          "Avg time/rank" in gfa.dataframe.columns and "Calls/rank (avg)" in gfa.dataframe.columns,
          list(gfa.dataframe.columns))

    # --- Thicket ----------------------------------------------------------------------------
    tk = tt.Thicket.from_caliperreader([os.path.join(p, "profile.cali") for p in prof], disable_tqdm=True)
    meta = tk.metadata
    check("thicket: one profile per run", len(meta) == 2, len(meta))
    adiak = ["user", "launchdate", "cmdline", "hostname", "cluster", "jobsize", "numhosts",
             "mpi_version", "mpi_library", "scaffold_version", "compiler", "threads_per_rank",
             "cpu_model", "isa_path", "precision", "problem_scale", "unet_base_channels",
             "dc_num_shards", "global_batch_size", "ddp_ranks", "total_shards",
             "num_spatial_dims", "minibatch_time_s", "final_epochs", "total_optimizer_steps",
             "training_wall_s", "epochs", "seed", "local_batch_size"]
    missing = [k for k in adiak if k not in meta.columns]
    check("thicket: metadata table holds the Adiak globals", not missing, missing)
    if not missing:
        check("thicket: jobsize 1 and 2", sorted(meta["jobsize"].tolist()) == [1, 2], meta["jobsize"].tolist())
        check("thicket: minibatch_time_s > 0", all(v > 0 for v in meta["minibatch_time_s"]), meta["minibatch_time_s"].tolist())
        check("thicket: problem_scale and dc_num_shards", all(v == 4 for v in meta["problem_scale"]) and
              all(list(map(str, v)) == ["1", "1", "1"] for v in meta["dc_num_shards"]), meta["dc_num_shards"].tolist())
        check("thicket: cmdline is the command line", all("benchmark" in v for v in meta["cmdline"]), meta["cmdline"].tolist()[:1])
    check("thicket: performance data of both runs", len(tk.dataframe.index.get_level_values("profile").unique()) == 2)

    # --- Chrome trace-event JSON --------------------------------------------------------------
    for p, nranks in zip(prof, (1, 2)):
        with open(os.path.join(p, "profile.json")) as f:
            doc = json.load(f)
        ev = doc["traceEvents"]
        xs = [e for e in ev if e.get("ph") == "X"]
        be = [e for e in ev if e.get("ph") in ("B", "E")]
        check("json: complete events, no B/E left open (%d rank)" % nranks, xs and not be, len(be))
        check("json: ts and dur", all(isinstance(e["ts"], (int, float)) and e["dur"] >= 0 and e["ts"] >= 0 for e in xs))
        pids = {e["pid"] for e in xs}
        check("json: one process per rank", pids == set(range(nranks)), pids)
        pnames = {e["pid"] for e in ev if e.get("ph") == "M" and e["name"] == "process_name"}
        tnames = {(e["pid"], e["tid"]) for e in ev if e.get("ph") == "M" and e["name"] == "thread_name"}
        tracks = {(e["pid"], e["tid"]) for e in xs}
        check("json: every process and thread track is named", pids <= pnames and tracks <= tnames, (pnames, tnames, tracks))
        bad = []
        by_track = collections.defaultdict(list)
        for e in xs:
            by_track[(e["pid"], e["tid"])].append(e)
        for key, es in by_track.items():
            es.sort(key=lambda e: (e["ts"], -e["dur"]))
            stack = []
            for e in es:
                end = e["ts"] + e["dur"]
                while stack and e["ts"] >= stack[-1] - 1e-3:
                    stack.pop()
                if stack and end > stack[-1] + 1e-3:
                    bad.append((key, e["name"], e["ts"], end, stack[-1]))
                stack.append(end)
        check("json: slices nest per thread", not bad, bad[:3])
        if nranks == 2:
            names = {e["name"] for e in xs}
            check("json: the step's regions are slices", {"minibatch", "forward", "backward", "conv3d_bwd_weight", "MPI_Waitall"} <= names)
            check("json: the async checkpoint writer has its track",
                  any(e["name"] == "checkpoint_writer" for e in xs) and
                  any(e.get("args", {}).get("name") == "checkpoint_writer" for e in ev if e.get("ph") == "M"))

    print("%d failed" % failures)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
