#!/usr/bin/env bash
# Prepares the default corpus: the text of Debian's fortunes package, tokenized with a BPE tokenizer
# trained on it, as a Megatron indexed dataset at data/fortunes.{bin,idx,json}. Skips the work when
# the dataset is already there and complete.
set -euo pipefail
build=${1:-build}
cd "$(dirname "$0")/.."
out=data/fortunes
if [ -f $out.bin ] && [ -f $out.idx ] && [ -f $out.json ]; then exit 0; fi
src=/usr/share/games/fortunes
[ -d "$src" ] || { echo "prepare-data: $src is missing (install Debian's fortunes package)" >&2; exit 1; }
echo "prepare-data: tokenizing $src into $out (BPE, vocabulary 2048)"
"$build/bin/moe-prep" --input "$src" --output "$out" --vocab-size 2048
