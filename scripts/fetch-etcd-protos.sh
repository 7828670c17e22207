#!/usr/bin/env bash
# etcd v3's own API definitions (KV, Lease, the key-value record, auth), from Debian's
# golang-etcd-server-dev, for the controller's etcd store (controller/etcd_client.h). The package is
# not installed (it pulls in dozens of Go source packages): it is downloaded with `apt-get download`
# and only its three .proto files and its copyright file are kept, in a cache folder outside the tree:
#   $MOE_ETCD_PROTOS (default ~/.cache/moe-etcd-protos)/etcd-<version>/{etcd/...proto,copyright,VERSION}
# Where the package is installed, its files are used instead of a download.
# The files are changed in one way only: the gogoproto and google.api annotations (Go code generation
# and the HTTP gateway) are dropped, as their imports are not Debian C++ packages; the messages, fields
# and services are etcd's, byte for byte, so what goes on the wire is etcd's API.
# Nothing here is committed; CMake (cmake/MoeEtcd.cmake) runs this at configure time.
#   scripts/fetch-etcd-protos.sh            fetch when missing; print the folder protoc is to search
#   scripts/fetch-etcd-protos.sh --check    only say whether the cache has them (exit 1 if not)
set -euo pipefail
cd "$(dirname "$0")/.."
version=3.4.23
package=golang-etcd-server-dev
protos=(mvcc/mvccpb/kv.proto auth/authpb/auth.proto etcdserver/etcdserverpb/rpc.proto)
cache=${MOE_ETCD_PROTOS:-$HOME/.cache/moe-etcd-protos}
dest=$cache/etcd-$version
stamp="$package $version ${protos[*]}"
check_only=0
case "${1:-}" in
  "") ;;
  --check) check_only=1 ;;
  *) echo "fetch-etcd-protos: unknown argument '$1' (none, or --check)" >&2; exit 2 ;;
esac

if [ -f "$dest/VERSION" ] && [ "$(cat "$dest/VERSION")" = "$stamp" ]; then
  echo "$dest"; exit 0
fi
if [ $check_only = 1 ]; then
  echo "fetch-etcd-protos: $dest is missing or incomplete" >&2; exit 1
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/moe-etcd-protos.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
src=/usr/share/gocode/src/go.etcd.io/etcd
doc=/usr/share/doc/$package
if [ ! -f "$src/${protos[2]}" ]; then
  echo "fetch-etcd-protos: downloading Debian's $package (apt-get download; not installed)" >&2
  # apt-get download writes into the working directory; as root it warns that _apt cannot write there.
  # No package lists yet (a fresh machine whose packages were all there): refresh them once, as root.
  if ! (cd "$tmp" && apt-get download -q "$package" >download.log 2>&1) && [ "$(id -u)" -eq 0 ]; then
    apt-get update -qq >/dev/null 2>&1 || true
  fi
  if [ ! -f "$(ls "$tmp"/"$package"_*.deb 2>/dev/null | head -1)" ] &&
      ! (cd "$tmp" && apt-get download -q "$package" >download.log 2>&1); then
    echo "fetch-etcd-protos: could not download $package (offline? no Debian package lists?):" >&2
    tail -5 "$tmp/download.log" >&2
    exit 1
  fi
  deb=$(ls "$tmp"/"$package"_*.deb)
  dpkg-deb -x "$deb" "$tmp/x"
  src=$tmp/x$src
  doc=$tmp/x$doc
fi
if [ -n "${deb:-}" ]; then found=$(dpkg-deb -f "$deb" Version); else found=$(dpkg-query -W -f='${Version}' "$package"); fi
case "$found" in
  *"$version"*) ;;
  *) echo "fetch-etcd-protos: warning: $package is '$found', the client was written against $version" >&2 ;;
esac
rm -rf "$dest" && mkdir -p "$dest"
for p in "${protos[@]}"; do
  mkdir -p "$dest/etcd/$(dirname "$p")"
  /usr/bin/python3 - "$src/$p" "$dest/etcd/$p" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
text = re.sub(r'^import "(gogoproto/gogo|google/api/annotations)\.proto";\n', "", text, flags=re.M)
text = re.sub(r'^option \(gogoproto\.[a-z_]+\) = [a-z]+;\n', "", text, flags=re.M)
text = re.sub(r'\s*\[\(gogoproto\.[^\]]*\]', "", text)  # a field's [(gogoproto.nullable) = false]
# option (google.api.http) = { ... };  (nested braces: matched by counting)
out, i, key = [], 0, "option (google.api.http)"
while (j := text.find(key, i)) >= 0:
    out.append(text[i:j])
    k, depth = text.index("{", j), 0
    while True:
        depth += {"{": 1, "}": -1}.get(text[k], 0)
        k += 1
        if depth == 0: break
    i = text.index(";", k) + 1
out.append(text[i:])
text = "".join(out)
if "gogoproto" in text or "google.api" in text:
    sys.exit(f"fetch-etcd-protos: an annotation of {sys.argv[1]} was not recognised")
open(sys.argv[2], "w").write(text)
PY
done
cp "$doc/copyright" "$dest/copyright"
echo "$stamp" >"$dest/VERSION"
echo "$dest"
