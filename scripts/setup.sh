#!/usr/bin/env bash
# Install what feeder needs on Debian 12 (run as root, or with sudo).
# Libraries made for the job: libjpeg-turbo (TurboJPEG + libjpeg APIs),
# liburing, ISA-L (CRC32C of packed records), Check (tests);
# Open MPI (and python3, which checks its output) for examples/mpi_train and
# scripts/mpi_check.sh; clang (libFuzzer, scripts/fuzz.sh; libFuzzer itself
# lives in libclang-rt-14-dev, only a recommendation of clang, which
# --no-install-recommends skips) and valgrind (scripts/valgrind.sh) for CI.
# Debian's python3 with its dev headers, setuptools, pip, pytest, numpy, torch
# and torchvision (Pillow comes with it) build and test the Python module
# (python/, tests/python_check.sh) and run examples/python/train.py; pip
# installs it (README's "pip install ./python").
# Everything comes from Debian's archive. The S3 tests (CTest's remote_s3)
# also need s3rver from the npm registry: scripts/setup_s3.sh installs it;
# without it they are skipped.
#   scripts/setup.sh           what builds, tests and CI need
#   scripts/setup.sh --bench   also what the PyTorch comparison needs:
#                              bench/compare_torch.py (torch, torchvision,
#                              PIL; numpy for compare_torch_packed.py) and
#                              bench/plot_compare.py (matplotlib)
set -euo pipefail
source "$(dirname "$0")/install_debs.sh"
bench=$(flag_arg --bench "$@")
PKGS=(build-essential cmake pkg-config
      libturbojpeg0-dev libjpeg62-turbo-dev liburing-dev libspng-dev libwebp-dev
      libisal-dev
      check libsubunit-dev
      libopenmpi-dev openmpi-bin python3 clang libclang-rt-14-dev valgrind
      python3-dev python3-setuptools python3-pip python3-pytest python3-numpy python3-torch
      python3-torchvision python3-pil)
# Remote shards: libcurl does every transfer; lighttpd is the HTTP server the
# remote tests start on 127.0.0.1.
PKGS+=(libcurl4-openssl-dev lighttpd)
# test_remote's https server (lighttpd's TLS module) and its self-signed certificate.
PKGS+=(lighttpd-mod-openssl openssl)
if ((bench)); then
  PKGS+=(python3-torch python3-torchvision python3-pil python3-numpy python3-matplotlib)
fi
install_debs "${PKGS[@]}"
