#!/usr/bin/env python3
"""Print every PromQL `expr` found in Grafana dashboard JSON files.

Usage: extract_queries.py [--annotations] DASHBOARD.json [DASHBOARD.json ...]

Walks the whole JSON document (panels, rows' nested panels, targets, anything
else) and prints the value of every "expr" key, one per line, as a JSON string
(json.dumps), in document order. The dashboard's annotation queries
("annotations" at the top level) are left out: they mark rare events (a
restart) and return nothing while all is well, whereas every panel query must
return data for a running job. With --annotations, only the annotation queries
are printed instead. Template variables hold no "expr" (their label_values()
queries and the datasource variable's "prometheus" are not printed). Exits with
status 1 if a file cannot be read or parsed, or if no expression was found at
all.
"""
import json
import sys


def find_exprs(node):
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "expr" and isinstance(value, str):
                yield value
            else:
                yield from find_exprs(value)
    elif isinstance(node, list):
        for item in node:
            yield from find_exprs(item)


def main(argv):
    args = argv[1:]
    annotations = "--annotations" in args
    paths = [a for a in args if a != "--annotations"]
    if not paths or any(a.startswith("--") for a in paths):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    found = 0
    for path in paths:
        try:
            with open(path, encoding="utf-8") as f:
                doc = json.load(f)
        except (OSError, ValueError) as e:
            print(f"{path}: {e}", file=sys.stderr)
            return 1
        if not isinstance(doc, dict):
            print(f"{path}: not a dashboard (a JSON object)", file=sys.stderr)
            return 1
        if annotations:
            part = doc.get("annotations", {})
        else:
            part = {k: v for k, v in doc.items() if k != "annotations"}
        for expr in find_exprs(part):
            print(json.dumps(expr))
            found += 1
    if found == 0:
        print("no expr found", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
