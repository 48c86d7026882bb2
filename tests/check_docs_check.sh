#!/usr/bin/env bash
# scripts/check_docs.sh passes on the tree, and fails, naming file and line, on
# a made-up tree whose docs read as a diary, whose README is too long and
# whose links point nowhere.
set -euo pipefail
src=$1
bash "$src/scripts/check_docs.sh" "$src"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/docs/img"
touch "$tmp/docs/img/a.png" "$tmp/docs/OK.md"
{
  echo '# x'
  echo 'See [the format](docs/OK.md), [a picture](docs/img/a.png#x) and [the web](https://example.com).'
  echo 'S3 takes `AWS_SESSION_TOKEN`; the session token is optional.'
} >"$tmp/README.md"
bash "$src/scripts/check_docs.sh" "$tmp" || { echo "FAIL: a clean tree failed"; exit 1; }
{
  echo 'Measured in session 9, call 6, on the lent H100.'
  echo 'Fixed for issue 22; run `bench/run_figures.sh --issue5`.'
  echo 'Scripts in .device/d5.sh; see [gone](MISSING.md) and ![img](img/none.png).'
} >"$tmp/docs/BAD.md"
seq 300 >>"$tmp/README.md"
if out=$(bash "$src/scripts/check_docs.sh" "$tmp" 2>&1); then
  echo "FAIL: a diary passed"; exit 1
fi
for want in 'docs/BAD.md:1: reads as a diary' 'docs/BAD.md:2: reads as a diary' \
            'docs/BAD.md:3: reads as a diary' 'README.md: 303 lines, more than 260' \
            'docs/BAD.md:3: link to MISSING.md, which does not exist' \
            'docs/BAD.md:3: link to img/none.png, which does not exist'; do
  grep -qF "$want" <<<"$out" || { echo "FAIL: not found: $want"; echo "$out"; exit 1; }
done
[ "$(grep -c . <<<"$out")" -eq 6 ] || { echo "FAIL: expected 6 findings: $out"; exit 1; }
echo "check_docs_check: ok"
