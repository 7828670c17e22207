#!/usr/bin/env bash
# make lint: no function outside tests/ and bench/ longer than 100 lines or with a cyclomatic
# complexity over 30 (pmccabe's modified complexity), so that each reads as its phases.
set -euo pipefail
cd "$(dirname "$0")/.."
max_lines=${MOE_LINT_MAX_LINES:-100}
max_complexity=${MOE_LINT_MAX_COMPLEXITY:-30}
command -v pmccabe >/dev/null || { echo "lint: pmccabe is missing (scripts/install-deps.sh build installs it)" >&2; exit 2; }
files=$(git ls-files '*.cc' '*.h' '*.cu' '*.cuh' | grep -v -E '^(tests|bench)/')
# pmccabe silently skips every function inside a C++17 nested namespace (`namespace moe::worker {`), so
# it reads copies in which such a namespace is one identifier (same lines, same braces).
copy=$(mktemp -d)
trap 'rm -rf "$copy"' EXIT
for f in $files; do
  mkdir -p "$copy/$(dirname "$f")"
  perl -pe 's/namespace ([A-Za-z_][\w:]*::[\w:]*)\s*\{/"namespace " . ($1 =~ s#::#__#gr) . " {"/e' "$f" >"$copy/$f"
done
cd "$copy"
# pmccabe columns: modified complexity, traditional complexity, statements, first line, lines, file(line): function
over=$(echo "$files" | xargs pmccabe 2>/dev/null |
       awk -v L="$max_lines" -v C="$max_complexity" '$5 > L || $1 > C {printf "  %s %s: %d lines, complexity %d\n", $6, $7, $5, $1}')
if [ -n "$over" ]; then
  echo "lint: functions over $max_lines lines or complexity $max_complexity (split them by phase):"
  echo "$over"
  exit 1
fi
longest=$(echo "$files" | xargs pmccabe 2>/dev/null | sort -k5 -n | tail -1 | awk '{print $6 " " $7 " (" $5 " lines)"}')
worst=$(echo "$files" | xargs pmccabe 2>/dev/null | sort -k1 -n | tail -1 | awk '{print $6 " " $7 " (complexity " $1 ")"}')
echo "lint: $(echo "$files" | wc -l) files clean; longest function $longest; most complex $worst"
