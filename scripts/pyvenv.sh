#!/usr/bin/env bash
# A Python virtual environment of pinned PyPI packages, made once per requirements file and kept in a
# cache folder keyed by the file's content (its pins), never in the system Python. Prints the
# environment's folder on stdout; everything else goes to stderr.
#   scripts/pyvenv.sh REQUIREMENTS_FILE
#   venv=$(scripts/pyvenv.sh tests/deploy/requirements-k8s.txt) && "$venv/bin/python" ...
# The cache: $MOE_PY_CACHE (default ~/.cache/moe-py), one folder per requirements file and content,
# NAME-HASH. The first use needs PyPI; later ones run offline. A half-made environment (an install that
# failed or was killed) is never used: it is marked complete only after pip succeeded, and remade.
set -euo pipefail
req=${1:?usage: scripts/pyvenv.sh REQUIREMENTS_FILE}
[ -f "$req" ] || { echo "pyvenv: no requirements file $req" >&2; exit 2; }
# Every line that names a package must pin it exactly (name==version): the cache key is the file.
if grep -vE '^\s*(#|$)' "$req" | grep -vqE '^[A-Za-z0-9._-]+(\[[A-Za-z0-9,._-]+\])?==[A-Za-z0-9.+-]+\s*(#.*)?$'; then
  echo "pyvenv: $req: every package must be pinned as name==version:" >&2
  grep -vE '^\s*(#|$)' "$req" | grep -vE '^[A-Za-z0-9._-]+(\[[A-Za-z0-9,._-]+\])?==[A-Za-z0-9.+-]+\s*(#.*)?$' >&2
  exit 2
fi
py=${MOE_PYTHON:-/usr/bin/python3}
cache=${MOE_PY_CACHE:-$HOME/.cache/moe-py}
name=$(basename "$req" .txt)
key=$( (cat "$req"; "$py" -c 'import sys; print(sys.version_info[:2])') | sha256sum | cut -c1-16)
dir="$cache/$name-$key"
if [ -x "$dir/bin/python" ] && [ -f "$dir/.complete" ]; then
  echo "$dir"
  exit 0
fi
mkdir -p "$cache"
# One maker at a time per environment (ctest runs tests in parallel); the others wait and reuse it.
exec 9>"$dir.lock"
flock 9
if [ -x "$dir/bin/python" ] && [ -f "$dir/.complete" ]; then
  echo "$dir"
  exit 0
fi
rm -rf "$dir"   # a half-made one: an install that failed or was killed
echo "pyvenv: installing $(grep -vcE '^\s*(#|$)' "$req") pinned packages of $req into $dir (needs PyPI once)" >&2
"$py" -m venv "$dir" >&2 || { echo "pyvenv: '$py -m venv' failed (Debian's python3-venv is missing?)" >&2; exit 1; }
if ! "$dir/bin/python" -m pip install --quiet --disable-pip-version-check --no-input -r "$req" >&2; then
  echo "pyvenv: pip install -r $req failed (is PyPI reachable? a warm cache needs no network)" >&2
  rm -rf "$dir"
  exit 1
fi
touch "$dir/.complete"
echo "$dir"
