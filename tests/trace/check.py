#!/usr/bin/env python3
"""check.py: validates the traces written by libscaffold_trace.so and asserts what a scenario of
prog_io (or python/numpy) must have produced.

Every file is checked the same way: it decodes as a sequence of complete gzip members, each
ending on a line boundary; every line is JSON (in the 1.x shape, TRACE_SHAPE=1: line 1 is "[" and
a closed file ends with "]"; in the default 2.x shape there are no brackets, "ph" is an integer and
every line has an integer "type"); every complete event has the dftracer fields and args (hhash,
p_idx, level); every fhash is defined by an FH line earlier in the same file; a closed file ends
with an "end" event whose num_events counts the events before it.

usage: check.py SCENARIO TRACE_DIR DATA_DIR [ARGS...]   (prints "ok ..." lines, exits 1 on failure)
"""
import json
import os
import sys
import zlib

FAILS = []
SHAPE = int(os.environ.get("TRACE_SHAPE", "2"))
PH_X, PH_M, PH_C = ("X", "M", "C") if SHAPE == 1 else (1, 4, 2)
TYPES = {"POSIX": 3, "STDIO": 3, "MPI": 10, "MPIIO": 10, "dftracer": 1, "sys": 7}


def check(cond, msg):
    if not cond:
        FAILS.append(msg)
        print("FAIL " + msg)
    return cond


def load(path, allow_truncated=False):
    raw = open(path, "rb").read()
    members = []
    while raw:
        d = zlib.decompressobj(wbits=31)
        text = d.decompress(raw)
        if not d.eof:
            check(allow_truncated, f"{path}: last gzip member is truncated")
            break
        members.append(text)
        raw = d.unused_data
    for i, m in enumerate(members):
        check(m.endswith(b"\n"), f"{path}: gzip member {i} does not end on a line boundary")
    text = b"".join(members).decode("utf-8")  # must be valid UTF-8
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if SHAPE == 1:
        check(lines and lines[0] == "[", f"{path}: first line is not '['")
        body = list(enumerate(lines[1:], start=2))
    else:
        check(lines and lines[0].startswith("{"), f"{path}: 2.x shape starts with a JSON line")
        body = list(enumerate(lines, start=1))
    f = {"path": path, "members": len(members), "events": [], "meta": [], "counters": [],
         "closed": False, "fh": {}}
    hh = None
    for i, line in body:
        if line == "]":
            check(SHAPE == 1, f"{path}:{i}: ']' in the 2.x shape")
            check(i == len(lines), f"{path}: ']' is not the last line")
            f["closed"] = True
            continue
        try:
            ev = json.loads(line)
        except ValueError as e:
            check(False, f"{path}:{i}: not JSON ({e}): {line[:120]}")
            continue
        a = ev.get("args", {})
        if SHAPE == 2:
            want = 2 if ev.get("name") == "CM" else TYPES.get(ev.get("cat"), 2)
            check(ev.get("type") == want, f"{path}:{i}: type {ev.get('type')} for cat {ev.get('cat')}, want {want}")
        if ev.get("ph") == PH_M:
            check(all(k in a for k in ("hhash", "name", "value")), f"{path}:{i}: M line args")
            f["meta"].append(ev)
            if ev["name"] == "FH":
                f["fh"][a["value"]] = a["name"]
            if ev["name"] == "HH":
                hh = a["value"]
            continue
        if ev.get("ph") == PH_C:
            check("ts" in ev and ev.get("cat") == "sys", f"{path}:{i}: counter line")
            f["counters"].append(ev)
            continue
        check(ev.get("ph") == PH_X, f"{path}:{i}: ph is not {PH_X!r}, {PH_M!r} or {PH_C!r}")
        for k in ("id", "name", "cat", "pid", "tid", "ts", "dur"):
            check(k in ev, f"{path}:{i}: missing {k}")
        check(a.get("hhash") == hh and hh is not None, f"{path}:{i}: hhash not defined by HH")
        if ev["name"] not in ("start", "end"):
            check("p_idx" in a and "level" in a, f"{path}:{i}: missing level/p_idx")
        for key in ("fhash", "new_fhash", "out_fhash"):
            if key in a:
                check(a[key] in f["fh"], f"{path}:{i}: {key} {a[key]} used before its FH line")
        f["events"].append(ev)
        if SHAPE == 2 and ev["name"] == "end" and ev["cat"] == "dftracer":
            f["closed"] = True
    ev = f["events"]
    check(ev and ev[0]["name"] == "start" and ev[0]["cat"] == "dftracer",
          f"{path}: first event is not start")
    if f["closed"]:
        check(ev[-1]["name"] == "end", f"{path}: closed file does not end with 'end'")
        check(ev[-1]["args"].get("num_events") == len(ev) - 1,
              f"{path}: end.num_events {ev[-1]['args'].get('num_events')} != {len(ev) - 1} events before it")
        if SHAPE == 2:
            cfg = ev[-1]["args"].get("cfg", {})
            check(cfg.get("format") == 2 and "used" in ev[-1]["args"] and "build" in ev[-1]["args"],
                  f"{path}: end record without cfg/build/used")
        check(ev[-1]["args"].get("dropped") == 0, f"{path}: events were dropped")
    return f


def load_dir(d, allow_truncated=False):
    names = sorted(n for n in os.listdir(d) if n.endswith(".pfw.gz"))
    for n in names:
        check(n.startswith("trace-") and n.endswith("-preload.pfw.gz") and len(n) == len(
            "trace-0123456789abcdef-preload.pfw.gz"), f"bad file name {n}")
    return [load(os.path.join(d, n), allow_truncated) for n in names]


def io(f, name_suffix, op=None):
    """Events of file f on the path ending with name_suffix (optionally of one op)."""
    hs = {h for h, p in f["fh"].items() if p.endswith(name_suffix)}
    return [e for e in f["events"] if e["args"].get("fhash") in hs and (op is None or e["name"] == op)]


def summary(f, name_suffix):
    for m in f["meta"]:
        if m["name"] == "FS" and m["args"]["name"].endswith(name_suffix):
            return m["args"]["value"]
    return None


def only(files, what):
    check(len(files) == 1, f"{what}: want 1 trace file, got {len(files)}")
    return files[0] if files else {"events": [], "meta": [], "fh": {}, "closed": False}


# ------------------------------------------------------------------ scenarios
def sc_basic(files, data):
    f = only(files, "basic")
    check(f["closed"], "basic: file not closed")
    w = [(e["name"], e["args"].get("offset"), e["args"]["count"], e["args"]["ret"])
         for e in io(f, "/data.bin") if e["name"] in ("write", "pwrite", "writev")]
    check(w == [("write", 0, 6, 6), ("write", 6, 100, 100), ("pwrite", 8192, 4096, 4096),
                ("writev", 106, 100, 100)], f"basic: writes {w}")
    r = [(e["name"], e["args"].get("fd"), e["args"].get("offset"), e["args"]["count"],
          e["args"]["ret"]) for e in io(f, "/data.bin") if e["name"] in ("read", "pread", "preadv")]
    # Descriptor numbers relative to the first open: a caller may hold low descriptors (flock
    # keeps its lock file on fd 3 for the command it runs).
    opens = io(f, "/data.bin", "open")
    b = opens[0]["args"]["ret"] if opens else 3
    want = [("read", b, 0, 6, 6), ("read", b, 100, 10, 10), ("pread", b, 3, 1, 1),
            ("preadv", b, 0, 100, 100), ("read", b + 1, 110, 1, 1), ("pread", 50, 0, 2, 2),
            ("pread", 60, 0, 3, 3), ("read", b, 0, 1, 1), ("read", b, 1, 0, 0)]
    check(r == want, f"basic: reads {r}")
    names = [e["name"] for e in io(f, "/data.bin")]
    for n in ("open", "close", "lseek", "fsync", "fdatasync", "fstat", "dup", "dup2", "fcntl",
              "mmap", "munmap", "stat", "lstat", "access", "statx", "__xstat", "posix_fadvise", "fopen",
              "fread", "fseek", "ftell", "fclose", "copy_file_range", "sendfile"):
        check(n in names, f"basic: no {n} event on data.bin")
    fr = [(e["args"]["offset"], e["args"]["ret"], e["args"]["size"], e["args"]["bytes"])
          for e in io(f, "/data.bin", "fread")]
    check(fr == [(0, 3, 4, 12), (10, 5, 1, 5)], f"basic: fread {fr}")
    st = [(e["name"], e["args"].get("offset"), e["args"]["ret"], e["args"].get("bytes"))
          for e in io(f, "/text.txt") if e["cat"] == "STDIO"]
    check(st == [("fopen", None, b, None), ("fprintf", 0, 5, None), ("fputs", 5, 1, None),
                 ("fwrite", 11, 5, 10), ("fclose", None, 0, None)], f"basic: stdio {st}")
    rel = io(f, "/rel.txt", "open")
    check(len(rel) == 1 and f["fh"][rel[0]["args"]["fhash"]] == os.path.join(data, "rel.txt"),
          "basic: relative open after chdir not resolved to an absolute path")
    sub = io(f, "/sub.txt", "openat")
    check(len(sub) == 1 and f["fh"][sub[0]["args"]["fhash"]] == os.path.join(data, "sub.txt"),
          "basic: openat(dirfd) not resolved")
    ren = io(f, "/sub.txt", "rename")
    check(len(ren) == 1 and f["fh"].get(ren[0]["args"].get("new_fhash")) ==
          os.path.join(data, "sub2.txt"), "basic: rename target")
    check(len(io(f, "/sub2.txt", "unlink")) == 1, "basic: unlink")
    cp = io(f, "/data.bin", "copy_file_range")
    check(cp and f["fh"].get(cp[0]["args"].get("out_fhash", "")) == os.path.join(data, "copy.bin"),
          "basic: copy_file_range out_fhash")
    bad = [p for p in f["fh"].values() if p.startswith(("/proc", "/dev", "/sys"))]
    check(not bad, f"basic: excluded paths traced: {bad}")
    fail = io(f, "/does-not-exist")
    check([(e["name"], e["args"]["ret"]) for e in fail] == [("open", -1), ("stat", -1), ("fopen", -1)],
          f"basic: failed calls {[(e['name'], e['args']['ret']) for e in fail]}")
    s = summary(f, "/data.bin")
    check(s is not None, "basic: no FS summary for data.bin")
    if s:
        # Golden values from Darshan's definitions (see docs/trace.md).
        check(s["writes"] == 4 and s["bytes_written"] == 4302, f"basic: FS writes {s}")
        check(s["size_write"] == [3, 0, 1, 0, 0, 0, 0, 0, 0, 0], f"basic: size_write {s['size_write']}")
        check(s["seq_writes"] == 2 and s["consec_writes"] == 1,
              f"basic: seq/consec writes {s['seq_writes']}/{s['consec_writes']}")
        check(s["max_byte_written"] == 8192 + 4096 - 1, "basic: max_byte_written")
        rd = [e for e in io(f, "/data.bin") if e["name"] in ("read", "pread", "preadv", "fread",
                                                              "copy_file_range", "sendfile")]
        nbytes = sum(e["args"].get("bytes", e["args"]["ret"]) for e in rd if e["args"]["ret"] > 0)
        check(s["reads"] == len(rd) and s["bytes_read"] == nbytes,
              f"basic: FS reads {s['reads']}/{len(rd)} bytes {s['bytes_read']}/{nbytes}")
        check(s["opens"] == len(io(f, "/data.bin", "open")) + len(io(f, "/data.bin", "fopen")),
              "basic: FS opens")
    ids = [e["id"] for e in f["events"]]
    check(len(ids) == len(set(ids)), "basic: duplicate event ids")
    ts = [e["ts"] for e in f["events"][1:-1]]
    check(ts == sorted(ts), "basic: single-thread events not in time order")


def sc_threads(files, data, n, k):
    f = only(files, "threads")
    check(f["closed"], "threads: file not closed")
    tids = set()
    for i in range(n):
        w = io(f, f"/t{i}.bin", "write")
        check([e["args"]["offset"] for e in w] == [64 * j for j in range(k)],
              f"threads: t{i}.bin offsets")
        check(all(e["args"]["ret"] == 64 for e in w), f"threads: t{i}.bin rets")
        tid = {e["tid"] for e in io(f, f"/t{i}.bin")}
        check(len(tid) == 1, f"threads: t{i}.bin written by {len(tid)} tids")
        tids |= tid
        reg = [e for e in f["events"] if e["name"] == "fetch" and e["tid"] in tid]
        check(len(reg) == 1 and reg[0]["cat"] == "dataloader" and reg[0]["args"]["thread"] == i
              and reg[0]["args"]["level"] == 1 and reg[0]["args"]["p_idx"] == -1,
              f"threads: region of thread {i}: {reg}")
        if reg:
            check(all(e["args"]["p_idx"] == reg[0]["id"] and e["args"]["level"] == 2
                      for e in io(f, f"/t{i}.bin")), f"threads: nesting of thread {i}")
            check(all(reg[0]["ts"] <= e["ts"] for e in io(f, f"/t{i}.bin")), "threads: region ts")
    check(len(tids) == n, f"threads: {len(tids)} distinct tids for {n} threads")
    ids = [e["id"] for e in f["events"]]
    check(len(ids) == len(set(ids)), "threads: duplicate event ids")


def sc_fork(files, data, child_pid):
    check(len(files) == 2, f"fork: want 2 files, got {len(files)}")
    by_pid = {fl["events"][0]["pid"]: fl for fl in files if fl["events"]}
    child = by_pid.get(child_pid)
    parents = [fl for p, fl in by_pid.items() if p != child_pid]
    if not check(child is not None and len(parents) == 1, "fork: files by pid"):
        return
    parent = parents[0]
    for fl in files:
        check(fl["closed"], f"fork: {fl['path']} not closed")
    check(len(io(child, "/child.bin", "write")) == 2, "fork: child's writes")
    check(not io(child, "/parent_before.bin"), "fork: child repeats the parent's events")
    check(len(io(parent, "/parent_before.bin", "write")) == 3, "fork: parent before")
    check(len(io(parent, "/parent_after.bin", "write")) == 4, "fork: parent after")
    check(not io(parent, "/child.bin"), "fork: parent has the child's events")
    fk = [e for e in parent["events"] if e["name"] == "fork"]
    check(len(fk) == 1 and fk[0]["args"]["ret"] == child_pid, f"fork: fork event {fk}")
    check(all(e["pid"] == child_pid for e in child["events"]), "fork: child pid")
    check(all(e["tid"] == child_pid for e in child["events"] if e["cat"] == "POSIX"),
          "fork: child tid")


def sc_exec(files, data):
    check(len(files) == 3, f"exec: want 3 files (before, after failed exec, new image), got {len(files)}")
    pids = {fl["events"][0]["pid"] for fl in files if fl["events"]}
    check(len(pids) == 1, "exec: files from different pids")
    for fl in files:
        check(fl["closed"], f"exec: {fl['path']} not closed")
    allw = {}
    for fl in files:
        for name in ("pre_exec.bin", "after_failed_exec.bin", "post_exec.bin"):
            allw[name] = allw.get(name, 0) + len(io(fl, "/" + name, "write"))
    check(allw == {"pre_exec.bin": 2, "after_failed_exec.bin": 1, "post_exec.bin": 3},
          f"exec: writes {allw}")
    ex = [e for fl in files for e in fl["events"] if e["name"] == "exec"]
    check(len(ex) == 2, f"exec: {len(ex)} exec events")


def sc_signal(files, data, n, killed):
    f = only(files, "signal")
    check(len(io(f, "/sig.bin", "write")) == n,
          f"signal: {len(io(f, '/sig.bin', 'write'))} of {n} writes survived")
    if killed:
        check(not f["closed"], "sigkill: file unexpectedly closed")
    else:
        check(f["closed"], "sigterm: file not closed by the signal handler")


def sc_annot(files, data):
    f = only(files, "annot")
    ev = {e["name"]: e for e in f["events"]}
    ep, tr, fw, cap, inner = (ev.get(k) for k in ("epoch", "train", "forward", "capture", "inner"))
    if not check(all((ep, tr, fw, cap, inner)), f"annot: regions missing: {list(ev)}"):
        return
    check(ep["cat"] == "pipeline" and ep["args"]["epoch"] == 3 and ep["args"]["neg"] == -42
          and ep["args"]["level"] == 1 and ep["args"]["p_idx"] == -1, f"annot: epoch {ep}")
    check(tr["args"]["level"] == 2 and tr["args"]["p_idx"] == ep["id"], "annot: train nesting")
    check(fw["cat"] == "compute" and fw["args"]["level"] == 3 and fw["args"]["p_idx"] == tr["id"],
          "annot: forward nesting")
    check(fw["args"].get("note") == 'quote" back\\ nl\n tab\t \u00ff end',
          f"annot: string arg {fw['args'].get('note')!r}")
    w = io(f, "/inside.bin", "write")
    check(len(w) == 1 and w[0]["args"]["level"] == 4 and w[0]["args"]["p_idx"] == fw["id"],
          "annot: I/O inside a region")
    check(cap["cat"] == "checkpoint" and cap["args"]["level"] == 2 and cap["args"]["p_idx"] == ep["id"],
          "annot: capture")
    check(inner["args"]["p_idx"] == cap["id"] and inner["args"]["level"] == 3,
          "annot: an unclosed inner region is closed by its parent's END")
    check(ep["ts"] <= tr["ts"] <= fw["ts"] and fw["ts"] + fw["dur"] <= ep["ts"] + ep["dur"] + 1,
          "annot: region times")
    cm = [m for m in f["meta"] if m["name"] == "CM"]
    check(len(cm) == 1 and cm[0]["args"]["name"] == "config" and cm[0]["args"]["value"] == 'unet-"small"',
          f"annot: metadata {cm}")


def sc_escape(files, data):
    f = only(files, "escape")
    want = os.path.join(data, 'we"ird\\na\nme\u00ff-\u00e9.bin')
    check(want in f["fh"].values(), f"escape: FH names {list(f['fh'].values())}")


def sc_numpy(files, data, size):
    check(len(files) >= 1, "numpy: no trace")
    ev = [e for fl in files for e in io(fl, "/x.npy")]
    names = [e["name"] for e in ev]
    check("open" in names or "openat" in names, f"numpy: no open of x.npy: {names}")
    # Every byte of the file was read by some read/pread/fread (numpy mixes them).
    covered = [False] * size
    for e in ev:
        a = e["args"]
        n = a.get("bytes", a.get("ret", 0)) if e["name"] in ("read", "pread", "readv", "preadv", "fread") else 0
        if n > 0 and a.get("offset", -1) >= 0:
            for i in range(a["offset"], min(size, a["offset"] + n)):
                covered[i] = True
    check(all(covered), f"numpy: {covered.count(False)} of {size} bytes never read per the trace")
    py = [p for fl in files for p in fl["fh"].values() if "/lib/python" in p]
    check(not py, f"numpy: Python library paths traced: {py[:3]}")


def sc_loop(files, data, n):
    f = only(files, "loop")
    p = io(f, "/loop.bin", "pread")
    check(len(p) == n, f"loop: {len(p)} of {n} preads")
    check(f["closed"], "loop: not closed")
    check(f["members"] >= 2, f"loop: {f['members']} gzip member(s); want several flushes")
    s = summary(f, "/loop.bin")
    check(s and s["reads"] == n and s["bytes_read"] == n, "loop: summary")


def sc_stress(files, data, t, n):
    f = only(files, "stress")
    for i in range(t):
        p = io(f, f"/s{i}.bin", "pread")
        check(len(p) == n, f"stress: thread {i}: {len(p)} of {n} preads")
        ts = [e["ts"] for e in p]
        check(ts == sorted(ts), f"stress: thread {i}: timestamps run backwards")
    ids = [e["id"] for e in f["events"]]
    check(len(ids) == len(set(ids)), "stress: duplicate event ids")


def sc_killed(files, data, t):
    """A process killed during a storm: whole members only, every present event well formed."""
    f = only(files, "killed")
    check(not f["closed"], "killed: file unexpectedly closed")
    got = sum(len(io(f, f"/s{i}.bin", "pread")) for i in range(t))
    check(got > 0, "killed: no pread survived")


def sc_fs(files, data):
    """Every FH line names the file-system type of its path (the mount table's)."""
    f = only(files, "fs")
    mounts = []
    for line in open("/proc/self/mounts"):
        dev, mnt, typ = line.split()[:3]
        mounts.append((mnt.encode().decode("unicode_escape"), typ))
    def fstype(p):
        best, bl = "unknown", -1
        for mnt, typ in mounts:
            m = "" if mnt == "/" else mnt
            if (p == m or p.startswith(m + "/")) and len(m) >= bl:
                best, bl = typ, len(m)
        return best
    fh = [m for m in f["meta"] if m["name"] == "FH"]
    check(fh and all("fs" in m["args"] for m in fh), "fs: FH lines without fs")
    bad = [(m["args"]["name"], m["args"].get("fs"), fstype(m["args"]["name"])) for m in fh
           if m["args"].get("fs") != fstype(m["args"]["name"])]
    check(not bad, f"fs: wrong types {bad[:3]}")


def sc_valid(files, data, count):
    check(len(files) == int(count), f"valid: want {count} files, got {len(files)}")


def main():
    sc, tdir, data = sys.argv[1], sys.argv[2], sys.argv[3]
    rest = sys.argv[4:]
    files = load_dir(tdir)
    {
        "basic": lambda: sc_basic(files, data),
        "threads": lambda: sc_threads(files, data, int(rest[0]), int(rest[1])),
        "fork": lambda: sc_fork(files, data, int(rest[0])),
        "exec": lambda: sc_exec(files, data),
        "sigterm": lambda: sc_signal(files, data, int(rest[0]), False),
        "sigkill": lambda: sc_signal(files, data, int(rest[0]), True),
        "annot": lambda: sc_annot(files, data),
        "escape": lambda: sc_escape(files, data),
        "numpy": lambda: sc_numpy(files, data, int(rest[0])),
        "loop": lambda: sc_loop(files, data, int(rest[0])),
        "stress": lambda: sc_stress(files, data, int(rest[0]), int(rest[1])),
        "killed": lambda: sc_killed(files, data, int(rest[0])),
        "fs": lambda: sc_fs(files, data),
        "valid": lambda: sc_valid(files, data, rest[0]),
    }[sc]()
    if FAILS:
        sys.exit(1)
    print(f"ok {sc}: {len(files)} file(s), {sum(len(f['events']) for f in files)} events")


if __name__ == "__main__":
    main()
