#!/usr/bin/env bash
# The layers (docs/architecture.md, "Layers"), checked on every tracked C++/CUDA source and header from
# their `#include "..."` lines, in seconds:
#   1. no include cycle between files, a .cc/.cu and its header (same path, other extension) counted as
#      one, so a loop through a header and the other's source counts too;
#   2. every arrow from one folder (component) to another is in ALLOW below, the architecture as drawn,
#      not as it happens to be. No exceptions: an include outside it fails, and the way out is to move
#      the declaration down (see kernels/cpu_gemm.h) or to change the table with the drawing.
# "moe/v1/..." is generated from proto/ and counts as proto. Includes of headers outside the repository
# (absl/, cutlass/, ...) are not arrows. tests/ and bench/ are top layers and may include anything.
set -euo pipefail
cd "$(dirname "$0")/.."
py=/usr/bin/python3
[ -x "$py" ] || py=$(command -v python3) ||
  { echo "layers: python3 is missing (scripts/install-deps.sh build installs it)" >&2; exit 2; }
exec "$py" - <<'PY'
import collections, os, re, subprocess, sys

# Component -> the components it may include (besides itself); "-" for none, "*" for any. A file's
# component is the longest folder listed here that holds it (a new subfolder belongs to its nearest
# listed parent until it gets its own row). Bottom first.
ALLOW = """
proto                      -
common                     proto
planner                    common
kernels                    common
kernels/cpu                common kernels
kernels/cuda               common kernels
kernels/cuda/sm90a         common kernels kernels/cuda
worker/engine              common kernels
worker/engine/data         common kernels worker/engine
worker/engine/parallel     common kernels worker/engine worker/engine/data
worker/engine/model        common kernels worker/engine worker/engine/data worker/engine/parallel
worker/engine/checkpoint   common kernels worker/engine worker/engine/data worker/engine/parallel worker/engine/model
worker/engine/train        common kernels worker/engine worker/engine/data worker/engine/parallel worker/engine/model worker/engine/checkpoint
worker/engine/tools        common kernels worker/engine worker/engine/data worker/engine/parallel worker/engine/model worker/engine/checkpoint worker/engine/train
worker/agent               common proto
controller                 common proto planner
cli                        common proto planner
tests                      *
bench                      *
"""

SOURCES = ["*.h", "*.cc", "*.cu", "*.cuh", "*.hpp", "*.cpp"]
SKIP = re.compile(r"(^|/)(third_party|third-party|external|vendor|_deps)/")
INCLUDE = re.compile(r'\s*#\s*include\s*(?:"([^"]+)"|<([^>]+)>)')


def table(text):
    rows = [line.split() for line in text.strip().splitlines()]
    return {row[0]: row[1:] for row in rows if row and not row[0].startswith("#")}


def component(path):
    if path.startswith("moe/v1/"):
        return "proto"
    folder = os.path.dirname(path)
    while folder:
        if folder in ALLOWED:
            return folder
        folder = os.path.dirname(folder)
    return path.split("/")[0] if "/" in path else "(root)"


def allowed(src, dst):
    may = ALLOWED.get(src, [])
    return src == dst or "*" in may or dst in may


def read_includes(files):
    """(file, line number, included path) for each include of a tracked file or of moe/v1/."""
    tracked = set(files)
    edges = []
    for f in files:
        with open(f, encoding="utf-8", errors="replace") as text:
            for number, line in enumerate(text, 1):
                m = INCLUDE.match(line)
                if not m:
                    continue
                target = m.group(1) or m.group(2)
                local = os.path.normpath(os.path.join(os.path.dirname(f), target))
                if m.group(1) and local in tracked:
                    target = local  # "x.h" is looked for next to the including file first
                if target in tracked or target.startswith("moe/v1/"):
                    edges.append((f, number, target))
    return edges


def find_cycle(edges):
    """A list of (file, included) making a loop between units, or None. Iterative depth-first search."""
    unit = lambda p: os.path.splitext(p)[0]
    graph = collections.defaultdict(dict)
    for f, _, target in edges:
        if unit(f) != unit(target):
            graph[unit(f)].setdefault(unit(target), (f, target))
    state, parent = {}, {}  # state: 1 on the current path, 2 done
    for root in sorted(graph):
        if root in state:
            continue
        state[root], stack = 1, [(root, iter(sorted(graph[root])))]
        while stack:
            node, children = stack[-1]
            child = next(children, None)
            if child is None:
                state[node] = 2
                stack.pop()
            elif state.get(child) == 1:  # back to a unit on the path: the loop is child .. node, child
                path = [u for u, _ in stack]
                loop = path[path.index(child):] + [child]
                return [graph[a][b] for a, b in zip(loop, loop[1:])]
            elif child not in state:
                state[child] = 1
                stack.append((child, iter(sorted(graph[child]))))
    return None


def check_arrows(edges):
    """(arrows, errors): the folder arrows and the includes outside ALLOW."""
    arrows, errors = set(), []
    for f, number, target in edges:
        src, dst = component(f), component(target)
        if src == dst:
            continue
        arrows.add((src, dst))
        if allowed(src, dst):
            continue
        if src not in ALLOWED:
            why = f"{src} has no row in ALLOW"
        else:
            why = f"{src} may include only: {' '.join(ALLOWED[src]) or 'nothing'}"
        errors.append(f"{f}:{number} includes {target}: arrow {src} -> {dst} is outside the layers ({why})")
    return arrows, errors


def source_files():
    """The tracked sources; outside a git work tree (an exported copy), every source file below here
    but the build directories."""
    listed = subprocess.run(["git", "ls-files", "--", *SOURCES], capture_output=True, text=True)
    if listed.returncode == 0:
        return [f for f in listed.stdout.split() if not SKIP.search(f)]
    exts = tuple(p[1:] for p in SOURCES)
    out = []
    for root, dirs, names in os.walk("."):
        dirs[:] = sorted(d for d in dirs if not d.startswith((".", "build")))
        out += [os.path.relpath(os.path.join(root, n)) for n in sorted(names) if n.endswith(exts)]
    return [f for f in out if not SKIP.search(f)]


def main():
    files = source_files()
    edges = read_includes(files)
    cycle = find_cycle(edges)
    if cycle:
        print("layers: include cycle (a .cc and its header count as one):", file=sys.stderr)
        for f, target in cycle:
            print(f"  {f} includes {target}", file=sys.stderr)
        return 1
    arrows, errors = check_arrows(edges)
    if errors:
        print("layers: includes outside the allow-list (docs/architecture.md, Layers; scripts/layers.sh ALLOW):",
              file=sys.stderr)
        for e in errors:
            print(f"  {e}", file=sys.stderr)
        return 1
    print(f"layers: {len(files)} files, {len(edges)} includes, no cycle; {len(arrows)} folder arrows, all within "
          f"the allow-list")
    return 0


ALLOWED = table(ALLOW)
sys.exit(main())
PY
