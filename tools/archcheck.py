#!/usr/bin/env python3
"""tools/archcheck.py [--write]: the module graph of src/ and the size limits, checked.

Modules are the folders of src/ that hold C sources (src/nn/cuda and src/trace/mpi are modules
of their own). An edge A -> B means a file of A includes a header of B ("b/x.h"). The check:

  1. the graph drawn in docs/architecture.md (between the BEGIN/END GRAPH markers) is the graph
     of the sources now (--write redraws it);
  2. no circle between modules;
  3. the layer order: every edge goes from a module to one of an earlier layer or its own
     (LAYERS below: base -> data -> engine -> parallel -> training -> tools -> commands);
  4. size limits: no .c/.cu file in src/ over 1,000 lines and no function over 120 lines,
     except the ones listed in tools/archcheck-allow.txt with their size today, which may
     shrink but not grow (a ratchet: a listed item that now fits must leave the list).

Prints one line per finding and "N passed, N failed"; exit 1 on any failure, 2 on bad usage.
"""
import glob
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOC = os.path.join(ROOT, "docs", "architecture.md")
ALLOW = os.path.join(ROOT, "tools", "archcheck-allow.txt")
BEGIN, END = "<!-- BEGIN GRAPH (tools/archcheck.py --write) -->", "<!-- END GRAPH -->"
FILE_LIMIT, FUNC_LIMIT = 1000, 120

# The layers, lowest first; a module may include headers of its own layer or lower ones.
# Unknown modules fail the check, so that a new folder is placed deliberately.
LAYERS = [
    ("base", {"core", "dist", "mpi", "tracehooks"}),
    ("data", {"fractal", "dataset", "store"}),
    ("engine", {"nn", "nn/cuda"}),
    ("parallel", {"parallel"}),
    ("training", {"train"}),
    ("tools", {"analyze", "trace", "trace/mpi", "tune", "scaling", "tracectl"}),
    ("commands", {"cli"}),
]


def layer_of(m):
    for i, (_, mods) in enumerate(LAYERS):
        if m in mods:
            return i
    return None


def modules():
    mods = set()
    for f in glob.glob(os.path.join(ROOT, "src", "**", "*.[ch]"), recursive=True) + glob.glob(
        os.path.join(ROOT, "src", "**", "*.cu"), recursive=True
    ):
        mods.add(os.path.relpath(os.path.dirname(f), os.path.join(ROOT, "src")))
    return mods


def graph(mods):
    edges = {m: set() for m in mods}
    inc = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
    for m in mods:
        for f in sorted(glob.glob(os.path.join(ROOT, "src", m, "*.[ch]")) + glob.glob(
                os.path.join(ROOT, "src", m, "*.cu"))):
            for line in open(f, errors="replace"):
                g = inc.match(line)
                if not g or "/" not in g.group(1):
                    continue
                target = os.path.dirname(g.group(1))
                if target in mods and target != m:
                    edges[m].add(target)
    return edges


def drawn(edges):
    lines = []
    for name, mods in LAYERS:
        for m in sorted(mods):
            if m in edges:
                deps = ", ".join(sorted(edges[m])) or "(nothing)"
                lines.append(f"{name:9s} {m:11s} -> {deps}")
    for m in sorted(edges):
        if layer_of(m) is None:
            lines.append(f"{'?':9s} {m:11s} -> {', '.join(sorted(edges[m])) or '(nothing)'}")
    return "\n".join(lines)


def cycles(edges):
    found, state = [], {}

    def visit(m, path):
        state[m] = 1
        for d in sorted(edges[m]):
            if state.get(d) == 1:
                found.append(path[path.index(d):] + [d] if d in path else [m, d])
            elif state.get(d) is None:
                visit(d, path + [d])
        state[m] = 2

    for m in sorted(edges):
        if state.get(m) is None:
            visit(m, [m])
    return found


def strip(src):
    src = re.sub(r"/\*.*?\*/", lambda x: "\n" * x.group(0).count("\n"), src, flags=re.S)
    src = re.sub(r'"(\\.|[^"\\\n])*"', '""', src)
    src = re.sub(r"'(\\.|[^'\\\n])+'", "''", src)
    return re.sub(r"//[^\n]*", "", src)


def sizes():
    """(kind, name, lines) for files over FILE_LIMIT and functions over FUNC_LIMIT."""
    out = []
    files = sorted(glob.glob(os.path.join(ROOT, "src", "**", "*.c"), recursive=True) + glob.glob(
        os.path.join(ROOT, "src", "**", "*.cu"), recursive=True))
    for f in files:
        rel = os.path.relpath(f, ROOT)
        text = open(f, errors="replace").read()
        n = text.count("\n")
        if n > FILE_LIMIT:
            out.append(("file", rel, n))
        lines = strip(text).split("\n")
        depth, start, name = 0, None, None
        for i, line in enumerate(lines):
            for ch in line:
                if ch == "{":
                    if depth == 0:
                        head = " ".join(lines[max(0, i - 8):i + 1])
                        is_fn = re.search(r"\)\s*(__attribute__\s*\(\(.*\)\)\s*)?\{\s*$", head.rstrip()) \
                            and not re.search(r"=\s*\{\s*$", line)
                        start = i if is_fn else None
                        names = re.findall(r"([A-Za-z_]\w*)\s*\(", head)
                        name = next((x for x in reversed(names) if x not in
                                     ("if", "for", "while", "switch", "sizeof", "__attribute__",
                                      "__target__", "target", "aligned")), "?")
                    depth += 1
                elif ch == "}":
                    depth -= 1
                    if depth == 0 and start is not None:
                        if i - start + 1 > FUNC_LIMIT:
                            out.append(("function", f"{rel}:{name}", i - start + 1))
                        start = None
    return out


def main():
    if len(sys.argv) > 2 or (len(sys.argv) == 2 and sys.argv[1] != "--write"):
        print("usage: tools/archcheck.py [--write]", file=sys.stderr)
        return 2
    mods = modules()
    edges = graph(mods)
    text = drawn(edges)
    doc = open(DOC).read() if os.path.exists(DOC) else ""
    if len(sys.argv) == 2:
        if BEGIN not in doc or END not in doc:
            print(f"archcheck: {DOC}: no {BEGIN} ... {END} block to redraw", file=sys.stderr)
            return 2
        a, b = doc.index(BEGIN) + len(BEGIN), doc.index(END)
        new = doc[:a] + "\n```\n" + text + "\n```\n" + doc[b:]
        tmp = DOC + ".tmp"
        open(tmp, "w").write(new)
        os.replace(tmp, DOC)
        print(f"archcheck: redrew the graph in {os.path.relpath(DOC, ROOT)}")
        return 0
    passed = failed = 0

    def check(ok, what):
        nonlocal passed, failed
        if ok:
            passed += 1
            print(f"ok   {what}")
        else:
            failed += 1
            print(f"FAIL {what}")

    block = doc[doc.index(BEGIN) + len(BEGIN):doc.index(END)].strip().strip("`").strip() \
        if BEGIN in doc and END in doc else None
    check(block == text.strip(), "docs/architecture.md draws the module graph of the sources"
          + ("" if block == text.strip() else " (run tools/archcheck.py --write and read the diff)"))
    cyc = cycles(edges)
    check(not cyc, "no circle between modules" + ("" if not cyc else ": " + "; ".join(
        " -> ".join(c) for c in cyc)))
    for m in sorted(edges):
        lm = layer_of(m)
        if lm is None:
            check(False, f"module {m} has a layer (add it to LAYERS in tools/archcheck.py)")
            continue
        up = [d for d in sorted(edges[m]) if layer_of(d) is None or layer_of(d) > lm]
        check(not up, f"{m} includes only its own layer or lower ones"
              + ("" if not up else f": {', '.join(up)}"))
    allow = {}
    if os.path.exists(ALLOW):
        for line in open(ALLOW):
            line = line.split("#")[0].strip()
            if line:
                kind, name, n = line.split()
                allow[(kind, name)] = int(n)
    seen = set()
    for kind, name, n in sizes():
        limit = FILE_LIMIT if kind == "file" else FUNC_LIMIT
        if (kind, name) in allow:
            seen.add((kind, name))
            check(n <= allow[(kind, name)], f"{kind} {name}: {n} lines, listed at "
                  f"{allow[(kind, name)]} in tools/archcheck-allow.txt (may shrink, not grow)")
        else:
            check(False, f"{kind} {name}: {n} lines (limit {limit})")
    for key in sorted(set(allow) - seen):
        check(False, f"{key[0]} {key[1]} now fits its limit: remove it from tools/archcheck-allow.txt")
    check(True, f"{len(edges)} modules, {sum(len(v) for v in edges.values())} edges")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
