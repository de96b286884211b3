#!/bin/sh
# seeds_current.sh GENERATOR CORPUS: fails when a binary seed of CORPUS is
# not what GENERATOR (seed_generator.cpp) writes from today's protocol. Seeds
# of an older protocol version are refused at the version check, so the
# fuzzer would start from nothing but headers; after a protocol change, run
# the generator and commit its output (tests/README.md, "fuzz/").
set -u
gen=${1:?usage: seeds_current.sh GENERATOR CORPUS}
corpus=${2:?usage: seeds_current.sh GENERATOR CORPUS}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/rfaas-seeds.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
for d in "$corpus"/*/; do
  mkdir "$tmp/$(basename "$d")" || exit 1
done
"$gen" "$tmp" >/dev/null || exit 1
stale=0
checked=0
for f in $(cd "$tmp" && find . -type f | sort); do
  f=${f#./}
  checked=$((checked + 1))
  if ! cmp -s "$tmp/$f" "$corpus/$f"; then
    echo "seeds_current.sh: corpus/$f is not what the seed generator writes today"
    stale=1
  fi
done
if [ "$stale" = 1 ]; then
  echo "seeds_current.sh: regenerate the seeds and commit them:"
  echo "  $gen $corpus"
  exit 1
fi
echo "seeds_current.sh: $checked generated seeds are current"
