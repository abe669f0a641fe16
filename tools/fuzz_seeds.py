"""Writes the seed corpora of the fuzz harnesses (tests/fuzz/corpus/<harness>/), small valid and
near-valid inputs from which libFuzzer mutates. Deterministic; run from the repository root with
Debian's python3 (numpy) when a harness or a format changes:

    /usr/bin/python3 tools/fuzz_seeds.py

Trace seeds are cut from the in-repository dftracer samples (tests/data/dftracer-samples) and
from scaffold's own annotation events."""
import gzip
import io
import json
import os
import struct
import sys

import numpy as np

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
OUT = os.path.join(ROOT, "tests", "fuzz", "corpus")


def put(harness, name, data):
    d = os.path.join(OUT, harness)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def gz(data, members=1):
    """gzip with `members` members split on line boundaries (as the tracer writes), mtime 0."""
    lines = data.splitlines(keepends=True)
    out = b""
    per = max(1, (len(lines) + members - 1) // members)
    for i in range(0, len(lines), per):
        buf = io.BytesIO()
        with gzip.GzipFile(fileobj=buf, mode="wb", mtime=0) as g:
            g.write(b"".join(lines[i:i + per]))
        out += buf.getvalue()
    return out


def config():
    for src in ("configs/quickstart.yml", "tests/train/tiny.yml"):
        put("config", os.path.basename(src), open(os.path.join(ROOT, src), "rb").read())
    put("config", "lists.yml", "dc_num_shards: [2, 1, 1]\ndc_shard_dims: [2, 3, 4]\n"
        "optimizer: \"SGD\"\nvariance_threshold: 0.15\nT_0: 5\n")
    put("config", "aux.yml", "vol_size: 128\nmachine_name: \"x\"\nscheduler_metadata: {a: 1}\n"
        "restart: false\nrun_dir: \"\"\n")
    put("config", "anchors.yml", "seed: &s 7\nn_categories: *s\njob_name: 'a\\\"b'\n")


def npy():
    r = np.random.default_rng(1)
    for name, a in [("f32_4d.npy", r.standard_normal((3, 4, 4, 4)).astype(np.float32)),
                    ("u16_3d.npy", np.arange(64, dtype=np.uint16).reshape(4, 4, 4)),
                    ("f64_1d.npy", np.linspace(0, 1, 5)),
                    ("fortran.npy", np.asfortranarray(np.ones((3, 4), np.float32))),
                    ("big_endian.npy", np.ones((2, 3), ">f4")),
                    ("bool.npy", np.array([True, False])),
                    ("scalar.npy", np.float32(3.5)),
                    ("empty.npy", np.zeros((0, 3), np.float32)),
                    ("points.npy", r.standard_normal((16, 3)).astype(np.float32))]:
        buf = io.BytesIO()
        np.save(buf, a)
        put("npy", name, buf.getvalue())
    # A version 2.0 header.
    buf = io.BytesIO()
    np.lib.format.write_array(buf, np.ones((2, 2), np.float32), version=(2, 0))
    put("npy", "v2.npy", buf.getvalue())


def safetensors(tensors, meta=None):
    """The safetensors layout: u64 header length, JSON header, data (offsets per tensor)."""
    hdr, data = {}, b""
    for name, dtype, shape, raw in tensors:
        hdr[name] = {"dtype": dtype, "shape": list(shape),
                     "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    if meta:
        hdr["__metadata__"] = meta
    h = json.dumps(hdr, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data


def st():
    r = np.random.default_rng(2)
    w = r.standard_normal((4, 3, 3, 3, 3)).astype(np.float32)
    b = r.standard_normal(4).astype(np.float32)
    put("safetensors", "f32.safetensors", safetensors(
        [("inc.double_conv.0.weight", "F32", w.shape, w.tobytes()),
         ("inc.double_conv.0.bias", "F32", b.shape, b.tobytes())],
        {"epoch": "3", "val_dice": "0.5"}))
    h16 = r.standard_normal((2, 3)).astype(np.float16)
    bf = (r.standard_normal(6).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    f64 = r.standard_normal(3)
    i64 = np.arange(3, dtype=np.int64)
    put("safetensors", "dtypes.safetensors", safetensors(
        [("a", "F16", h16.shape, h16.tobytes()), ("b", "BF16", (6,), bf.tobytes()),
         ("c", "F64", f64.shape, f64.tobytes()), ("d", "I64", i64.shape, i64.tobytes())]))
    put("safetensors", "empty.safetensors", safetensors([], {"k": "v"}))
    put("safetensors", "scalar.safetensors", safetensors([("s", "F32", (), b"\0\0\x80?")]))


def traces():
    src = os.path.join(ROOT, "tests", "data", "dftracer-samples")
    cm1 = gzip.open(os.path.join(src, "cm1-48ranks", "cm1-DEFAULT-3537780-preload.pfw.gz")).read()
    v1 = gzip.open(os.path.join(src, "v1-small.pfw.gz")).read()
    dlio = gzip.open(os.path.join(src, "dlio-v2-threaded.pfw.gz")).read()
    cm1_head = b"".join(cm1.splitlines(keepends=True)[:40])
    v1_head = b"".join(v1.splitlines(keepends=True)[:40])
    dlio_head = b"".join(dlio.splitlines(keepends=True)[:60])
    # scaffold's own annotations (pipeline/compute/checkpoint regions, POSIX I/O with args).
    ours = "\n".join(json.dumps(e, separators=(",", ":")) for e in [
        {"id": 1, "name": "FH", "cat": "dftracer", "pid": 7, "tid": 7, "ph": "M",
         "args": {"name": "/d/vol_0001.npy", "value": 11}},
        {"id": 2, "name": "epoch", "cat": "pipeline", "pid": 7, "tid": 7, "ts": 100,
         "dur": 900, "ph": "X", "args": {"epoch": 1}},
        {"id": 3, "name": "fetch", "cat": "dataloader", "pid": 7, "tid": 7, "ts": 110,
         "dur": 50, "ph": "X", "args": {"batch_size": 1}},
        {"id": 4, "name": "pread64", "cat": "POSIX", "pid": 7, "tid": 8, "ts": 111, "dur": 20,
         "ph": "X", "args": {"fhash": 11, "fd": 5, "count": 4096, "offset": 0, "ret": 4096}},
        {"id": 5, "name": "forward", "cat": "compute", "pid": 7, "tid": 7, "ts": 170,
         "dur": 500, "ph": "X", "args": {"pass": "forward+loss+backward"}},
        {"id": 6, "name": "capture", "cat": "checkpoint", "pid": 7, "tid": 7, "ts": 700,
         "dur": 200, "ph": "X", "args": {"async": 0}},
        {"id": 7, "name": "write", "cat": "POSIX", "pid": 7, "tid": 7, "ts": 710, "dur": 90,
         "ph": "X", "args": {"fd": 6, "count": 65536, "ret": 65536}},
    ]) + "\n"
    for name, text in [("cm1", cm1_head), ("v1", v1_head), ("dlio", dlio_head),
                       ("ours", ours.encode())]:
        for i, line in enumerate(text.splitlines()[:12]):
            put("trace_line", "%s_%02d.json" % (name, i), line)
        put("trace_file", name + ".pfw", text)
        put("trace_file", name + "-2members.pfw.gz", gz(text, 2))
    put("trace_file", "truncated.pfw.gz", gz(cm1_head)[:-9])
    put("trace_line", "no_cat.json", '{"name":"read","pid":1,"tid":1,"ts":1,"dur":1,"ph":"X"}')
    put("trace_line", "escapes.json", '{"id":1,"name":"o\\"pen\\u00e9","cat":"POSIX","pid":1,'
        '"tid":1,"ts":-9000000000000000000,"dur":9000000000000000000,"ph":"X","args":{"fname":'
        '"/a\\\\b"}}')
    put("compare", "ours_vs_cm1", ours.encode() + b"\0" + gz(cm1_head))
    put("compare", "ours_vs_ours", ours.encode() + b"\0" + gz(ours.encode(), 2))
    put("compare", "dlio_vs_v1", gz(dlio_head) + b"\0" + v1_head)
    # dftracer 2.x shape (integer ph/type, no brackets): its own 2.2.0 traces (aggregated records,
    # events without args), and ours (MPI events, counter samples, the end record's cfg/used).
    d22 = os.path.join(ROOT, "tests", "data", "dftracer-2.2")
    for w in ("numpy", "numpyagg", "threads"):
        f = [n for n in sorted(os.listdir(os.path.join(d22, w))) if n.endswith(".pfw.gz")][0]
        text = gzip.open(os.path.join(d22, w, f)).read()
        head = b"".join(text.splitlines(keepends=True)[:60])
        for i, line in enumerate(head.splitlines()[:12]):
            put("trace_line", "d22_%s_%02d.json" % (w, i), line)
        put("trace_file", "d22_%s.pfw" % w, head)
        put("trace_file", "d22_%s-2members.pfw.gz" % w, gz(head, 2))
    ours2 = "\n".join(json.dumps(e, separators=(",", ":")) for e in [
        {"name": "HH", "cat": "dftracer", "type": 1, "pid": 7, "tid": 7, "ph": 4,
         "args": {"hhash": "a1", "name": "node1", "value": "a1"}},
        {"name": "SH", "cat": "dftracer", "type": 1, "pid": 7, "tid": 7, "ph": 4,
         "args": {"hhash": "a1", "name": "mpirun", "value": "e1"}},
        {"id": 0, "name": "start", "cat": "dftracer", "type": 1, "pid": 7, "tid": 7, "ts": 90,
         "dur": 0, "ph": 1, "args": {"hhash": "a1", "exec_hash": "e1", "version": "scaffold-trace-2.1"}},
        {"id": 1, "name": "MPI_Allreduce", "cat": "MPI", "type": 10, "pid": 7, "tid": 7, "ts": 100,
         "dur": 50, "ph": 1, "args": {"hhash": "a1", "p_idx": -1, "level": 1, "comm": "0a0b0c0d",
                                      "comm_size": 4, "rank": 0, "count": 1, "bytes": 8}},
        {"id": 2, "name": "MPI_File_write_at", "cat": "MPIIO", "type": 10, "pid": 7, "tid": 7,
         "ts": 160, "dur": 5, "ph": 1, "args": {"hhash": "a1", "fhash": "f1", "offset": 8,
                                                "bytes": 4096, "comm_size": 4, "comm": "0a0b0c0d"}},
        {"name": "proc", "cat": "sys", "type": 7, "pid": 7, "tid": 0, "ts": 200, "ph": 2,
         "args": {"hhash": "a1", "cpu_user_us": 1500, "cpu_sys_us": 20, "rss_kb": 4096,
                  "read_bytes": 0, "write_bytes": 4096, "vcsw": 3, "ivcsw": 1}},
        {"name": "read", "cat": "POSIX", "type": 3, "pid": 7, "tid": 7, "ts": 1000, "ph": 3,
         "args": {"hhash": "a1", "dft_cnt": 600, "dur_sum": 839, "ret": 928}},
        {"id": 3, "name": "end", "cat": "dftracer", "type": 1, "pid": 7, "tid": 7, "ts": 300,
         "dur": 0, "ph": 1, "args": {"hhash": "a1", "num_events": 3, "cfg": {"format": 2},
                                     "used": {"MPI": 1}}},
    ]) + "\n"
    for i, line in enumerate(ours2.encode().splitlines()):
        put("trace_line", "ours2_%02d.json" % i, line)
    put("trace_file", "ours2.pfw", ours2.encode())
    put("trace_file", "ours2-2members.pfw.gz", gz(ours2.encode(), 2))
    put("trace_line", "out_of_range.json", '{"name":"read","cat":"POSIX","pid":1,"tid":1,"ts":10,'
        '"dur":18446744073709551621,"ph":1,"args":{"ret":1e300}}')


def main():
    config()
    npy()
    st()
    traces()
    total = sum(os.path.getsize(os.path.join(dp, f)) for dp, _, fs in os.walk(OUT) for f in fs)
    print("seed corpora in %s: %d bytes" % (OUT, total))


if __name__ == "__main__":
    sys.exit(main())
