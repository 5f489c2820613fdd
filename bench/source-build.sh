#!/usr/bin/env bash
# The source-build benchmark: the CUDA test extension built by stackbuild against
# `pip wheel --no-build-isolation` with the same torch, nvcc and CUDA headers, in the same run
# (builder/crates/wheelbuild/tests/bench.rs). Needs what .ci/install installs (bubblewrap, uv,
# gcc, Debian's python3.11 with pip) and the package index (torch 2.15.0 and its CUDA 13 wheels,
# about 3.5 GB).
#
#   bench/source-build.sh
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --release -p stackbuild-wheelbuild --test bench -- --ignored --nocapture 2>&1 |
  grep -E '^(source-build benchmark|\|)'
