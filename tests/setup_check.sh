#!/usr/bin/env bash
# The set-up needs only Debian's archive: scripts/setup.sh installs no npm
# package and lists python3-pip; the S3 tests' s3rver comes from
# scripts/setup_s3.sh, which .ci/run calls before the suite, and without npm
# remote_s3 skips (77) saying how to enable it. No issue numbers in
# setup.sh's or .ci/run's comments (they mean nothing to a newcomer).
#   setup_check.sh TEST_REMOTE
set -euo pipefail
test_remote=$1
src=$(cd "$(dirname "$0")/.." && pwd)
fail() { echo "FAIL: $*" >&2; exit 1; }

! grep -nE "npm|s3rver" "$src/scripts/setup.sh" | grep -v "^[0-9]*:#" ||
    fail "scripts/setup.sh still runs npm or installs s3rver"
grep -qE "^ +.*\bpython3-pip\b" "$src/scripts/setup.sh" || fail "scripts/setup.sh lacks python3-pip"
! grep -nEi "issue [0-9]+" "$src/scripts/setup.sh" "$src/.ci/run" ||
    fail "issue numbers in setup.sh or .ci/run"
s3=$(grep -n "^bash scripts/setup_s3.sh$" "$src/.ci/run" | cut -d: -f1)
suite=$(grep -n "^bash scripts/test.sh$" "$src/.ci/run" | cut -d: -f1)
[[ -n $s3 && -n $suite && $s3 -lt $suite ]] || fail ".ci/run does not call setup_s3.sh before the suite"
bash -n "$src/scripts/setup_s3.sh" || fail "setup_s3.sh does not parse"

# No s3rver and no npm: skipped, saying how to enable the tests.
d=$(mktemp -d /tmp/feeder-setup-check-XXXXXX)
trap 'rm -rf "$d"' EXIT
rc=0
FEEDER_NPM_DIR=$d/npm FEEDER_NPM= bash "$src/tests/remote_s3.sh" "$test_remote" > "$d/out" 2>&1 || rc=$?
[[ $rc == 77 ]] || { cat "$d/out" >&2; fail "remote_s3 without npm exited $rc, want 77"; }
want="remote_s3: skipped: no s3rver at $d/npm and no npm; bash scripts/setup_s3.sh installs what the S3 tests need"
[[ $(cat "$d/out") == "$want" ]] || { echo "got: $(cat "$d/out")"; echo "want: $want"; fail "skip message"; } >&2
# test_remote --s3 alone, with no s3rver: skipped too.
rc=0
FEEDER_NPM_DIR=$d/npm "$test_remote" --s3 > "$d/out" 2>&1 || rc=$?
[[ $rc == 77 ]] || { cat "$d/out" >&2; fail "test_remote --s3 without s3rver exited $rc, want 77"; }
grep -qE "setup_s3.sh installs them|is not installed \(scripts/setup.sh\)" "$d/out" || { cat "$d/out" >&2; fail "test_remote --s3 message"; }
echo "setup checks passed"
