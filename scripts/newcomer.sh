#!/usr/bin/env bash
# What a newcomer does, checked from scratch: clone this checkout's HEAD into a
# temporary folder (committed work only), run the README's two commands there
# exactly as written (set up, build and run the main job; then the test
# suite) and its Python commands (build the module into build/python, train
# one model under both DataLoaders), check that they left the clone clean (`git status --porcelain`
# empty: everything they write is ignored), and run scripts/consumer_check.sh
# on the clone's build. Slow (a full build and test run): not part of the
# CTest suite; run it before changing the README's commands or the build.
#   scripts/newcomer.sh [WORKDIR]   the clone goes to WORKDIR/feeder, logs to
#                                   WORKDIR (default: a new temporary folder,
#                                   removed on success; a given one is kept)
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
head=$(git -C "$src" rev-parse HEAD)
if [ -n "$(git -C "$src" status --porcelain)" ]; then
  echo "newcomer: note: $src has uncommitted changes; the clone has only commit ${head:0:12}"
fi
if [ -n "${1:-}" ]; then
  work=$(realpath -m "$1") own_work=0
else
  work=$(mktemp -d "${TMPDIR:-/tmp}/feeder-newcomer.XXXXXX") own_work=1
fi
mkdir -p "$work"
clone=$work/feeder
fail() {
  echo "newcomer: FAIL: $*" >&2
  echo "newcomer: logs and the clone are kept in $work" >&2
  exit 1
}

echo "== git clone $src ($head) =="
rm -rf "$clone"
git clone -q "$src" "$clone"
git -C "$clone" checkout -q --detach "$head"
cd "$clone"

# The README's commands: the indented lines of its "Two commands" section.
mapfile -t cmds < <(awk '/^## /{on = /^## Two commands/; next} on && /^    [^ ]/{sub(/^    /, ""); print}' README.md)
((${#cmds[@]} == 2)) || fail "README.md's \"Two commands\" section has ${#cmds[@]} commands, not 2"
for i in 0 1; do
  log=$work/command$((i + 1)).log
  echo "== README command $((i + 1)): ${cmds[$i]} =="
  start=$(date +%s)
  bash -c "${cmds[$i]}" >"$log" 2>&1 || { tail -40 "$log"; fail "README command $((i + 1)) failed (log: $log)"; }
  echo "ok in $(($(date +%s) - start)) s; last lines:"
  tail -3 "$log"
done

# The README's Python commands: the indented lines of "A Python program".
mapfile -t pycmds < <(awk '/^```/{fence = !fence; next} /^## /{on = /^## A Python program/; next}
  on && !fence && /^    [^ ]/{sub(/^    /, ""); print}' README.md)
((${#pycmds[@]} >= 1)) || fail "README.md's \"A Python program\" section has no command"
# On a fresh Debian 12 machine python3 is Debian's, which has torch; where another
# interpreter comes first on PATH (a pyenv one here), Debian's is put first.
pypath=$PATH
python3 -c "import torch, setuptools" 2>/dev/null || pypath=/usr/bin:$PATH
for i in "${!pycmds[@]}"; do
  log=$work/python$((i + 1)).log
  echo "== README Python command $((i + 1)): ${pycmds[$i]} =="
  PATH=$pypath bash -c "${pycmds[$i]}" >"$log" 2>&1 || { tail -40 "$log"; fail "README Python command $((i + 1)) failed (log: $log)"; }
  tail -3 "$log"
done

echo "== the clone is clean =="
dirty=$(git status --porcelain)
[ -z "$dirty" ] || fail "the README's commands left files in the checkout:"$'\n'"$dirty"
echo "git status --porcelain: empty"

echo "== install and link (scripts/consumer_check.sh) =="
bash scripts/consumer_check.sh build || fail "consumer_check"

cd /
((own_work)) && rm -rf "$work"
echo "newcomer: a fresh clone sets up, builds, runs, tests clean and links four ways"
