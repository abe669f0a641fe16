#!/usr/bin/env python3
"""check_mpi.py: asserts the MPI events of `mpi_calls calls DIR` run on 4 ranks under
libscaffold_trace.so + libscaffold_trace_mpi.so (tests/trace/run.sh, Open MPI and MPICH).

usage: check_mpi.py TRACE_DIR DATA_DIR
Every rank's file must hold every call of mpi_calls.c once (in order), each with the
communicator (an id equal on the 4 ranks, size 4, the rank given by the file's PR line), the
root or peer, the count and the bytes (count x type size), the waits naming the operation they
completed, and MPI-IO events naming DATA_DIR/mpiio.bin with their offsets. Exits 1 on failure.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check  # noqa: E402

D = 8  # sizeof(double)


def expected(r):
    """(name, args that must match) in call order for rank r."""
    right, left = (r + 1) % 4, (r + 3) % 4
    n4 = {"count": 4, "bytes": 4 * D}
    e = [("MPI_Init", {}), ("MPI_Barrier", {"bytes": 0}),
         ("MPI_Bcast", dict(n4, root=0)), ("MPI_Reduce", dict(n4, root=0)),
         ("MPI_Allreduce", n4), ("MPI_Allgather", n4), ("MPI_Allgatherv", n4),
         ("MPI_Alltoall", {"count": 16, "bytes": 16 * D}),
         ("MPI_Alltoallv", {"count": 16, "bytes": 16 * D}),
         ("MPI_Gather", dict(n4, root=0)), ("MPI_Gatherv", dict(n4, root=0)),
         ("MPI_Scatter", dict(n4, root=0)), ("MPI_Scatterv", dict(n4, root=0)),
         ("MPI_Reduce_scatter", {"count": 16, "bytes": 16 * D}),
         ("MPI_Reduce_scatter_block", {"count": 16, "bytes": 16 * D}),
         ("MPI_Scan", n4), ("MPI_Exscan", n4),
         ("MPI_Allreduce", {"count": 2, "bytes": 8}),
         ("MPI_Ibarrier", {"bytes": 0}), ("MPI_Wait", {"req_op": "MPI_Ibarrier", "nreq": 1}),
         ("MPI_Iallreduce", n4), ("MPI_Wait", {"req_op": "MPI_Iallreduce", "bytes": 4 * D}),
         ("MPI_Ibcast", dict(n4, root=1)), ("MPI_Ireduce", dict(n4, root=2)),
         ("MPI_Waitall", {"req_op": "MPI_Ibcast", "nreq": 2, "bytes": 8 * D}),
         ("MPI_Iallgather", n4), ("MPI_Ialltoall", {"count": 16, "bytes": 16 * D}),
         ("MPI_Testall", {"req_op": "MPI_Iallgather", "nreq": 2, "bytes": 20 * D}),
         ("MPI_Igather", dict(n4, root=3)), ("MPI_Iscatter", dict(n4, root=3)),
         ("MPI_Waitany", {"nreq": 1}), ("MPI_Waitany", {"nreq": 1})]
    ring = [("MPI_Send", {"peer": right, "count": 3, "bytes": 3 * D}),
            ("MPI_Recv", {"peer": left, "count": 3, "bytes": 3 * D})]
    e += ring if r % 2 == 0 else ring[::-1]
    e += [("MPI_Sendrecv", {"peer": right, "count": 5, "bytes": 20}),
          ("MPI_Irecv", {"peer": left, "count": 3, "bytes": 3 * D}),
          ("MPI_Isend", {"peer": right, "count": 3, "bytes": 3 * D}),
          ("MPI_Waitall", {"req_op": "MPI_Irecv", "nreq": 2, "bytes": 6 * D}),
          ("MPI_Win_create", {"bytes": 32}), ("MPI_Win_fence", {}),
          ("MPI_Put", {"peer": right, "count": 2, "bytes": 8}), ("MPI_Win_fence", {}),
          ("MPI_Win_lock", {"peer": left}), ("MPI_Get", {"peer": left, "count": 2, "bytes": 8}),
          ("MPI_Win_unlock", {"peer": left}), ("MPI_Win_free", {}),
          ("MPI_File_open", {}),
          ("MPI_File_write_at", {"count": 1024, "bytes": 1024, "offset": r * 1024}),
          ("MPI_File_write_at_all", {"count": 1024, "bytes": 1024, "offset": 4096 + r * 1024}),
          ("MPI_File_sync", {}),
          ("MPI_File_read_at", {"count": 1024, "bytes": 1024, "offset": r * 1024}),
          ("MPI_File_set_view", {"offset": r * 1024}),
          ("MPI_File_read_all", {"count": 512, "bytes": 512}),
          ("MPI_File_close", {}), ("MPI_Barrier", {"bytes": 0}), ("MPI_Finalize", {})]
    return e


def main():
    tdir, data = sys.argv[1], sys.argv[2]
    files = check.load_dir(tdir)
    ranks = {}
    for f in files:
        mpi = [e for e in f["events"] if e["cat"] in ("MPI", "MPIIO")]
        if not mpi:
            continue
        pr = [m["args"]["value"] for m in f["meta"] if m["name"] == "PR" and m["args"]["name"] == "rank"]
        ws = [m["args"]["value"] for m in f["meta"] if m["name"] == "PR" and m["args"]["name"] == "world_size"]
        check.check(pr and ws and ws[-1] == "4", f"{f['path']}: PR rank/world_size lines {pr} {ws}")
        if pr:
            ranks[int(pr[-1])] = (f, sorted(mpi, key=lambda e: (e["ts"], e["id"])))
    check.check(sorted(ranks) == [0, 1, 2, 3], f"MPI events from ranks {sorted(ranks)}, want 0..3")
    comm_ids = set()
    for r, (f, evs) in sorted(ranks.items()):
        want = expected(r)
        got = [e["name"] for e in evs]
        check.check(got == [w[0] for w in want], f"rank {r}: calls {got}")
        for e, (name, args) in zip(evs, want):
            a = e["args"]
            check.check(e["type"] == 10 and e["cat"] == ("MPIIO" if name.startswith("MPI_File") else "MPI"),
                        f"rank {r} {name}: type/cat {e['type']} {e['cat']}")
            check.check(a.get("comm_size") == 4 and a.get("rank") == r,
                        f"rank {r} {name}: comm_size {a.get('comm_size')} rank {a.get('rank')}")
            comm_ids.add(a.get("comm"))
            for k, v in args.items():
                check.check(a.get(k) == v, f"rank {r} {name}: {k} = {a.get(k)}, want {v}")
            if name.startswith("MPI_File"):
                path = f["fh"].get(a.get("fhash"), "")
                check.check(path == os.path.join(os.path.realpath(data), "mpiio.bin"),
                            f"rank {r} {name}: file {path}")
    check.check(len(comm_ids) == 1, f"one communicator id on every rank, got {comm_ids}")
    if check.FAILS:
        sys.exit(1)
    print("ok   MPI calls: %d ranks x %d calls" % (len(ranks), len(expected(0))))


if __name__ == "__main__":
    main()
