#!/usr/bin/env python3
"""gen_traces.py: synthetic dftracer-format traces with known answers, for the analyzer's tests
and benchmark.

Writes what our tracer writes: one multi-member .pfw.gz per process in dftracer's 2.x shape
(integer "ph" and "type", no brackets; --shape 1 for the 1.x shape: "[" first, "ph":"X"), JSON
lines sorted by end time (as dftracer serialises at exit), FH/HH/PR metadata before first use, args on
(ret, offset, count, fd, fhash, bytes for fread/fwrite), start/end events, and annotation
categories named like dftracer's AI layer (pipeline: epoch; dataloader: fetch; compute:
forward/backward/step; comm: all_reduce; checkpoint: capture).

Scenarios (each a directory of per-rank traces) and the finding each must produce:
  small_io      4 KiB reads on the training thread     -> wisio.small_reads, drishti.small_requests
  metadata      stat/open storm per sample             -> wisio.excessive_metadata
  random        2 MiB preads at random offsets         -> wisio/drishti.random_operations
  straggler     one rank reads 3x slower               -> drishti.stragglers
  unoverlapped  synchronous loading before compute     -> dfanalyzer.unoverlapped_io, dl.data_loader_stall
  checkpoint    2 GiB rank-0 checkpoint every epoch    -> dl.checkpoint_burst
  clean         prefetching loader, large reads        -> no finding
  compare       replicated runs for `scaffold compare`: base_r*, speedup_r*, fewer_ckpt_r*,
                noise_r*, guard_r*
  bench         --events N over --files F processes (a realistic mix) for the benchmark

usage: gen_traces.py OUTDIR [--scenario NAME]... [--events N] [--files F] [--seed S] [--shape 1|2]
"""
import argparse
import hashlib
import os
import random
import sys
import zlib

US = 1  # timestamps are in microseconds
T0 = 1_760_000_000_000_000  # a fixed epoch start, so runs are reproducible
SHAPE = 2  # dftracer 2.x (integer ph/type, no brackets); 1: the 1.x shape


def type_of(cat):
    """dftracer 2.x "type": 1 its own records, 3 POSIX/STDIO, 2 the C annotation API."""
    return 1 if cat == "dftracer" else 3 if cat in ("POSIX", "STDIO") else 2


def h16(s):
    return hashlib.md5(s.encode()).hexdigest()[:16]


class Trace:
    """One process's trace file."""

    def __init__(self, path, pid, host, rank, member_lines=4000, jitter=None):
        self.path = path
        self.pid = pid
        self.host = host
        self.hh = h16(host)
        self.rank = rank
        self.member_lines = member_lines
        self.ev = []  # (end_ts, seq, line)
        self.meta = []  # (ts_of_first_use, seq, line)
        self.files = {}
        self.seq = 0
        self.fd = 3
        self.jitter = jitter
        self.id = 0
        self.meta_line("HH", host, self.hh, 0)
        self.meta_line("PR", "rank", str(rank), 0)

    def meta_line(self, kind, name, value, ts):
        self.seq += 1
        if SHAPE == 1:
            self.id += 1
            line = ('{"id":%d,"name":"%s","cat":"dftracer","pid":%d,"tid":%d,"ph":"M","args":'
                    '{"hhash":"%s","name":"%s","value":"%s"}}' % (self.id, kind, self.pid, self.pid,
                                                                self.hh, name, value))
        else:
            line = ('{"name":"%s","cat":"dftracer","type":1,"pid":%d,"tid":%d,"ph":4,"args":'
                    '{"hhash":"%s","name":"%s","value":"%s"}}' % (kind, self.pid, self.pid,
                                                                self.hh, name, value))
        self.meta.append((ts, self.seq, line))

    def fh(self, path, ts):
        h = self.files.get(path)
        if h is None:
            h = h16(path)
            self.files[path] = h
            self.meta_line("FH", path, h, ts)
        return h

    def x(self, name, cat, ts, dur, tid=None, **args):
        if self.jitter is not None:
            dur = max(0, int(round(dur * self.jitter)))
        self.id += 1
        self.seq += 1
        a = ['"hhash":"%s"' % self.hh]
        for k, v in args.items():
            a.append('"%s":%s' % (k, ('"%s"' % v) if isinstance(v, str) else int(v)))
        if SHAPE == 1:
            line = ('{"id":%d,"name":"%s","cat":"%s","pid":%d,"tid":%d,"ts":%d,"dur":%d,"ph":"X",'
                    '"args":{%s}}' % (self.id, name, cat, self.pid, tid or self.pid, int(ts),
                                      int(dur), ",".join(a)))
        else:
            line = ('{"id":%d,"name":"%s","cat":"%s","type":%d,"pid":%d,"tid":%d,"ts":%d,"dur":%d,'
                    '"ph":1,"args":{%s}}' % (self.id, name, cat, type_of(cat), self.pid,
                                             tid or self.pid, int(ts), int(dur), ",".join(a)))
        self.ev.append((int(ts) + int(dur), self.seq, line))
        return dur

    # POSIX helpers: return the end time.
    def open(self, path, ts, dur, tid=None, flags=0):
        fh = self.fh(path, ts)
        self.fd += 1
        self.x("open64", "POSIX", ts, dur, tid, fhash=fh, flags=flags, ret=self.fd)
        return ts + dur, self.fd

    def close(self, path, fd, ts, dur, tid=None):
        self.x("close", "POSIX", ts, dur, tid, fhash=self.fh(path, ts), fd=fd, ret=0)
        return ts + dur

    def read(self, path, fd, ts, dur, count, offset=None, tid=None):
        fh = self.fh(path, ts)
        if offset is None:
            self.x("read", "POSIX", ts, dur, tid, fhash=fh, fd=fd, count=count, ret=count)
        else:
            self.x("pread64", "POSIX", ts, dur, tid, fhash=fh, fd=fd, count=count, offset=offset,
                   ret=count)
        return ts + dur

    def write(self, path, fd, ts, dur, count, offset, tid=None):
        self.x("pwrite64", "POSIX", ts, dur, tid, fhash=self.fh(path, ts), fd=fd, count=count,
               offset=offset, ret=count)
        return ts + dur

    def stat(self, path, ts, dur, tid=None):
        self.x("__xstat64", "POSIX", ts, dur, tid, fhash=self.fh(path, ts), ret=0)
        return ts + dur

    def write_file(self):
        # Metadata goes just before the first event that uses it; events in end-time order.
        start = min([e[0] for e in self.ev] + [T0])
        end = max([e[0] for e in self.ev] + [T0])
        self.x("start", "dftracer", start, 0, None)
        n = len(self.ev)  # the events before the end record, start included
        self.x("end", "dftracer", end, 0, None, num_events=n)
        items = [(ts, 0, s, l) for ts, s, l in self.meta] + [(ts, 1, s, l) for ts, s, l in self.ev]
        items.sort()
        lines = (["["] if SHAPE == 1 else []) + [l for _, _, _, l in items]
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        tmp = self.path + ".tmp"
        with open(tmp, "wb") as f:
            for i in range(0, len(lines), self.member_lines):
                chunk = "\n".join(lines[i:i + self.member_lines]) + "\n"
                if i + self.member_lines >= len(lines) and SHAPE == 1:
                    chunk += "]"
                c = zlib.compressobj(1, zlib.DEFLATED, 31)
                f.write(c.compress(chunk.encode()) + c.flush())
        os.replace(tmp, self.path)


def trace_for(outdir, rank, jitter=None):
    pid = 40000 + rank * 17
    host = "node%02d" % (rank // 4)
    return Trace(os.path.join(outdir, "trace-%s-app.pfw.gz" % h16("scaffold-%s-%d" % (host, pid))),
                 pid, host, rank, jitter=jitter)


MiB = 1 << 20


def run(outdir, ranks=4, epochs=3, steps=20, compute_us=100_000, loader="thread",
        sample_bytes=8 * MiB, read_size=4 * MiB, read_us_per_mib=500, slow_rank=None,
        slow_factor=3.0, meta_storm=False, random_reads=0, random_read_size=2 * MiB,
        ckpt_every=1, ckpt_bytes=32 * MiB, ckpt_write=4 * MiB, ckpt_us_per_mib=1000,
        seed=1, jitter_sd=0.0, data_dir="/p/lustre/scaffold/datasets"):
    """Simulates a data-parallel training run, one trace per rank. All ranks start each step
    together (the all_reduce synchronises them), as in DDP."""
    rng = random.Random(seed)
    traces = []
    for r in range(ranks):
        j = None
        if jitter_sd > 0:
            j = max(0.5, rng.gauss(1.0, jitter_sd))
        traces.append(trace_for(outdir, r, jitter=j))
    t = T0 + 1_000_000
    sample = 0
    for ep in range(epochs):
        ep_start = t
        for st in range(steps):
            step_end = []
            for r, tr in enumerate(traces):
                main = tr.pid
                loader_tid = tr.pid + 1
                slow = slow_factor if slow_rank == r else 1.0
                sample_id = (sample + r * 7919) % 5000
                path = "%s/sample_%05d.npy" % (data_dir, sample_id)
                cur = t
                io_tid = loader_tid if loader == "thread" else main

                def load(at):
                    c = at
                    if meta_storm:
                        for _ in range(4):
                            c = tr.stat(path, c, 2000, io_tid)
                        c, fd = tr.open(path, c, 5000, io_tid)
                    else:
                        c, fd = tr.open(path, c, 50, io_tid)
                    if random_reads:
                        big = data_dir + "/dataset.bin"
                        c2, fd2 = tr.open(big, c, 50, io_tid)
                        c = c2
                        for _ in range(random_reads):
                            off = rng.randrange(0, 4096) * random_read_size
                            c = tr.read(big, fd2, c, int(random_read_size / MiB * read_us_per_mib * slow),
                                        random_read_size, off, io_tid)
                        c = tr.close(big, fd2, c, 20, io_tid)
                    else:
                        off = 0
                        while off < sample_bytes:
                            n = min(read_size, sample_bytes - off)
                            d = max(5, int(n / MiB * read_us_per_mib * slow))
                            if read_size < 64 * 1024:
                                d = int(40 * slow)
                            c = tr.read(path, fd, c, d, n, None, io_tid)
                            off += n
                    c = tr.close(path, fd, c, 1000 if meta_storm else 20, io_tid)
                    return c

                if loader == "thread":
                    # The loader prefetches the next sample while this step computes; the
                    # training thread only waits 1 ms for the ready batch.
                    tr.x("fetch", "dataloader", cur, 1000, main, step=st, epoch=ep)
                    cur += 1000
                    load(cur + 500)
                else:
                    end = load(cur + 10)
                    tr.x("fetch", "dataloader", cur, end - cur + 10, main, step=st, epoch=ep)
                    cur = end + 10
                for name, frac in (("forward", 0.3), ("backward", 0.6), ("step", 0.1)):
                    d = tr.x(name, "compute", cur, int(compute_us * frac), main, step=st, epoch=ep)
                    cur += d
                step_end.append(cur)
            done = max(step_end)
            for r, tr in enumerate(traces):
                tr.x("all_reduce", "comm", step_end[r], done - step_end[r] + 3000, tr.pid)
            t = done + 3000
            sample += 1
        # Checkpoint at the end of the epoch, written by rank 0; the others wait in a barrier.
        if ckpt_every and (ep + 1) % ckpt_every == 0 and ckpt_bytes:
            tr = traces[0]
            path = "/p/lustre/scaffold/runs/checkpoint_%d.safetensors.tmp" % ep
            c, fd = tr.open(path, t, 200, None, flags=0o101)
            off = 0
            while off < ckpt_bytes:
                n = min(ckpt_write, ckpt_bytes - off)
                c = tr.write(path, fd, c, max(5, int(n / MiB * ckpt_us_per_mib)), n, off)
                off += n
            tr.x("fsync", "POSIX", c, 5000, None, fhash=tr.fh(path, c), fd=fd, ret=0)
            c += 5000
            c = tr.close(path, fd, c, 50)
            tr.x("rename", "POSIX", c, 300, None, fhash=tr.fh(path, c), ret=0)
            c += 300
            tr.x("capture", "checkpoint", t, c - t, None, epoch=ep)
            for other in traces[1:]:
                other.x("barrier", "comm", t, c - t + 1000, other.pid)
            t = c + 1000
        for tr in traces:
            tr.x("epoch", "pipeline", ep_start, t - ep_start, tr.pid, epoch=ep)
    for tr in traces:
        tr.write_file()


SCENARIOS = {
    "clean": dict(ranks=4),
    "small_io": dict(ranks=2, loader="main", sample_bytes=1 * MiB, read_size=4096, steps=20),
    "metadata": dict(ranks=2, loader="main", meta_storm=True, sample_bytes=4 * MiB),
    "random": dict(ranks=2, loader="main", random_reads=8, steps=50),
    "straggler": dict(ranks=4, loader="main", slow_rank=2, slow_factor=3.0, sample_bytes=32 * MiB,
                      read_us_per_mib=1000, compute_us=60_000),
    "unoverlapped": dict(ranks=2, loader="main", sample_bytes=32 * MiB, read_us_per_mib=2500,
                         compute_us=60_000),
    "checkpoint": dict(ranks=2, ckpt_bytes=2048 * MiB, ckpt_write=16 * MiB, ckpt_us_per_mib=2000),
}


def compare_set(out):
    base = dict(ranks=2, loader="main", sample_bytes=16 * MiB, read_us_per_mib=2500,
                compute_us=60_000, ckpt_bytes=256 * MiB, ckpt_write=16 * MiB, epochs=4)
    for i in range(3):
        run(os.path.join(out, "base_r%d" % i), seed=10 + i, jitter_sd=0.004, **base)
    # A real speedup: the same work with a prefetching loader thread.
    for i in range(3):
        run(os.path.join(out, "speedup_r%d" % i), seed=20 + i, jitter_sd=0.004,
            **dict(base, loader="thread"))
    # "Faster" by writing fewer checkpoints (every 2 epochs): does less.
    for i in range(2):
        run(os.path.join(out, "fewer_ckpt_r%d" % i), seed=30 + i, jitter_sd=0.004,
            **dict(base, ckpt_every=2))
    # The same configuration again: within noise.
    for i in range(3):
        run(os.path.join(out, "noise_r%d" % i), seed=40 + i, jitter_sd=0.004, **base)
    # Faster storage (I/O time halves) but compute 20% slower: system gain, app regression.
    for i in range(2):
        run(os.path.join(out, "guard_r%d" % i), seed=50 + i, jitter_sd=0.004,
            **dict(base, read_us_per_mib=1250, compute_us=int(60_000 * 1.9)))


def bench_set(out, events, files, seed):
    """A realistic mix at scale: per process, a training loop whose loader reads 256 KiB chunks
    of per-sample files (DLIO-like), with metadata, compute and checkpoint annotations."""
    rng = random.Random(seed)
    per = events // files
    for r in range(files):
        tr = trace_for(out, r)
        tr.member_lines = 60000
        t = T0 + 1_000_000
        n = 0
        step = 0
        while n < per:
            path = "/p/lustre/bench/data/img_%05d_of_10000.npy" % rng.randrange(10000)
            c, fd = tr.open(path, t, 40 + rng.randrange(40), tr.pid + 1)
            off = 0
            for _ in range(16):
                c = tr.read(path, fd, c, 200 + rng.randrange(300), 262144, off, tr.pid + 1)
                off += 262144
            c = tr.close(path, fd, c, 10, tr.pid + 1)
            tr.x("fetch", "dataloader", t, 800, tr.pid, step=step)
            tr.x("forward", "compute", t + 800, 3000, tr.pid, step=step)
            tr.x("backward", "compute", t + 3800, 6000, tr.pid, step=step)
            t = max(c, t + 9800) + 100
            step += 1
            n += 21
        tr.write_file()
        sys.stderr.write("bench: wrote %s (%d events)\n" % (tr.path, n))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("outdir")
    ap.add_argument("--scenario", action="append", default=None,
                    help="one of %s, compare, bench (repeatable; default: all but bench)"
                    % ", ".join(SCENARIOS))
    ap.add_argument("--events", type=int, default=5_000_000)
    ap.add_argument("--files", type=int, default=16)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--shape", type=int, choices=(1, 2), default=2,
                    help="dftracer trace shape: 2 (integer ph/type, no brackets) or 1")
    a = ap.parse_args()
    global SHAPE
    SHAPE = a.shape
    names = a.scenario or list(SCENARIOS) + ["compare"]
    for s in names:
        d = os.path.join(a.outdir, s)
        if s in SCENARIOS:
            run(d, seed=a.seed, **SCENARIOS[s])
        elif s == "compare":
            compare_set(d)
        elif s == "bench":
            bench_set(d, a.events, a.files, a.seed)
        else:
            sys.exit("gen_traces.py: unknown scenario '%s' (known: %s, compare, bench)"
                     % (s, ", ".join(SCENARIOS)))


if __name__ == "__main__":
    main()
