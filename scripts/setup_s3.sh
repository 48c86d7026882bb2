#!/usr/bin/env bash
# Install what the S3 tests need (CTest's remote_s3: tests/remote_s3.sh and
# test_remote --s3), beyond scripts/setup.sh: s3rver, the S3 server they
# start on 127.0.0.1, from the npm registry into a folder outside the
# checkout ($FEEDER_NPM_DIR, default ~/.cache/feeder/npm), and curl, which
# uploads the test's files to it. Debian's nodejs and npm only where no npm
# is there (NodeSource's nodejs bundles one and conflicts with Debian's).
# The library, the main suite and CI's other steps need none of this.
#   scripts/setup_s3.sh           install (apt-get as root, or with sudo)
#   scripts/setup_s3.sh --npm     only the npm step (no apt-get; npm must exist)
set -euo pipefail
source "$(dirname "$0")/install_debs.sh"
npm_only=$(flag_arg --npm "$@")
if ((!npm_only)); then
  PKGS=(curl)
  command -v npm >/dev/null || PKGS+=(nodejs npm)
  install_debs "${PKGS[@]}"
fi
npm_dir=${FEEDER_NPM_DIR:-$HOME/.cache/feeder/npm}
if [ ! -x "$npm_dir/node_modules/.bin/s3rver" ]; then
  mkdir -p "$npm_dir"
  npm install --no-audit --no-fund --prefix "$npm_dir" s3rver@3 >/dev/null
fi
