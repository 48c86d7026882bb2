#!/usr/bin/env bash
# CTest's remote_s3: test_remote's S3 tests against s3rver on 127.0.0.1.
# s3rver comes from the npm registry, which the main suite does not depend
# on: when it is not installed yet, npm installs it (scripts/setup_s3.sh
# --npm) where npm exists; otherwise, or when that install fails (no
# network), the test is skipped (77) with a line saying how to enable it.
#   remote_s3.sh TEST_REMOTE
# FEEDER_NPM_DIR: where s3rver is (default ~/.cache/feeder/npm);
# FEEDER_NPM: the npm to use (default: npm on PATH; empty: none).
set -euo pipefail
test_remote=$1
src=$(cd "$(dirname "$0")/.." && pwd)
npm_dir=${FEEDER_NPM_DIR:-$HOME/.cache/feeder/npm}
npm=${FEEDER_NPM-$(command -v npm || true)}
skip() {
    echo "remote_s3: skipped: $1; bash scripts/setup_s3.sh installs what the S3 tests need"
    exit 77
}
if [ ! -x "$npm_dir/node_modules/.bin/s3rver" ]; then
    [ -n "$npm" ] && [ -x "$(command -v "$npm" || true)" ] || skip "no s3rver at $npm_dir and no npm"
    echo "remote_s3: installing s3rver into $npm_dir with $npm"
    log=$(mktemp /tmp/feeder-npm-XXXXXX)
    trap 'rm -f "$log"' EXIT
    PATH=$(dirname "$(command -v "$npm")"):$PATH \
        bash "$src/scripts/setup_s3.sh" --npm > "$log" 2>&1 ||
        { cat "$log"; skip "npm could not install s3rver (above)"; }
    rm -f "$log"
fi
"$test_remote" --s3
