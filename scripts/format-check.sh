#!/usr/bin/env bash
# make format-check: every C++ and CUDA source is as clang-format leaves it (.clang-format, Google style
# at 100 columns). clang-format 14 (Debian 12's) is the reference: other versions format some
# constructs differently, so the check refuses to judge with another one. `make format` fixes a tree.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v clang-format >/dev/null || { echo "format-check: clang-format is missing (scripts/install-deps.sh build installs it)" >&2; exit 2; }
version=$(clang-format --version | sed -n 's/.*version \([0-9]*\)\..*/\1/p')
if [ "$version" != 14 ]; then
  echo "format-check: clang-format $version found; the tree is formatted with 14 (Debian 12), the one CI has" >&2
  exit 2
fi
files=$(git ls-files '*.cc' '*.h' '*.cu' '*.cuh')
# One run over all files (two processes): each unformatted place is a "file:line:col: error" line.
mapfile -t bad < <(echo "$files" | xargs -P2 -n 100 clang-format --dry-run -Werror 2>&1 |
                   sed -n 's/^\([^:]*\):[0-9]*:[0-9]*: error: .*/\1/p' | sort -u)
if [ ${#bad[@]} -gt 0 ]; then
  echo "format-check: ${#bad[@]} file(s) not formatted (run make format):"
  printf '  %s\n' "${bad[@]}"
  for f in "${bad[@]:0:3}"; do clang-format "$f" | diff -u "$f" - | head -20; done
  exit 1
fi
echo "format-check: $(echo "$files" | wc -l) files formatted"
