"""Per-layer times of a profiled benchmark step, from scaffold's profile-ranks.cali (stdlib only:
the .cali record format is a line per record, `__rec=KIND,key=v1=v2,...`, '\\' escaping).

usage: layers.py PROFILE-RANKS.CALI
prints one line per (direction, block, layer pass) of the training minibatch:
  "step DIR BLOCK PASS calls_per_step C s_per_step T" (averages over ranks), and
  "steps N" (training minibatches per rank).
"""
import collections
import sys


def split(line):
    out, entry, cur, it = {}, [], "", iter(line.rstrip("\n"))
    for c in it:
        if c == "\\":
            c = next(it, "")
            cur += "\n" if c == "n" else c
        elif c in ",=":
            entry.append(cur)
            cur = ""
            if c == ",":
                out[entry[0]] = entry[1:]
                entry = []
        else:
            cur += c
    entry.append(cur)
    out[entry[0]] = entry[1:]
    return out


def main():
    nodes, names, rows = {}, {}, collections.defaultdict(lambda: [0.0, 0.0, 0])
    with open(sys.argv[1]) as f:
        for line in f:
            r = split(line)
            kind = r["__rec"][0]
            if kind == "node":
                nid, attr = int(r["id"][0]), int(r["attr"][0])
                parent = int(r["parent"][0]) if "parent" in r else None
                nodes[nid] = (attr, r.get("data", [""])[0], parent)
                if attr == 8:
                    names[nid] = r["data"][0]
            elif kind == "ctx":
                path, n = [], int(r["ref"][0])
                while n is not None:
                    attr, data, n = nodes[n]
                    if names.get(attr) in ("region", "mpi.function"):
                        path.append(data)
                vals = {names[int(a)]: v for a, v in zip(r["attr"], r["data"])}
                acc = rows["/".join(reversed(path))]
                acc[0] += float(vals["inclusive#sum#time.duration"])
                acc[1] += float(vals["sum#region.count"])
                acc[2] += 1
    step = "main/benchmark/epoch/batch_loop/minibatch"
    steps = rows[step][1] / rows[step][2]
    print("steps %.0f" % steps)
    for path, (t, calls, ranks) in sorted(rows.items()):
        parts = path.split("/")
        if not path.startswith(step + "/") or len(parts) != 8:
            continue
        direction, block, layer = parts[5], parts[6], parts[7]
        print("step %s %s %s calls_per_step %.2f s_per_step %.6f"
              % (direction, block, layer, calls / ranks / steps, t / ranks / steps))


if __name__ == "__main__":
    main()
