#!/usr/bin/env python3
"""Print every PromQL `expr` found in Grafana dashboard JSON files.

Usage: extract_queries.py DASHBOARD.json [DASHBOARD.json ...]

Walks the whole JSON document (panels, rows' nested panels, targets, anything
else) and prints the value of every "expr" key, one per line, as a JSON string
(json.dumps), in document order. Exits with status 1 if a file cannot be read
or parsed, or if no expression was found at all.
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
    if len(argv) < 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    found = 0
    for path in argv[1:]:
        try:
            with open(path, encoding="utf-8") as f:
                doc = json.load(f)
        except (OSError, ValueError) as e:
            print(f"{path}: {e}", file=sys.stderr)
            return 1
        for expr in find_exprs(doc):
            print(json.dumps(expr))
            found += 1
    if found == 0:
        print("no expr found", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
