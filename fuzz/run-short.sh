#!/usr/bin/env bash
# A bounded run of every fuzz target (default 20 s each), for CI and by hand.
# cargo-fuzz needs nightly features; RUSTC_BOOTSTRAP lets the stable toolchain provide them.
set -euo pipefail
cd "$(dirname "$0")"
secs=${FUZZ_SECONDS:-20}
command -v cargo-fuzz >/dev/null || cargo install --locked cargo-fuzz
export RUSTC_BOOTSTRAP=1
for target in $(cargo fuzz list); do
  echo "fuzz: $target for ${secs}s" >&2
  cargo fuzz run "$target" -- -max_total_time="$secs" -rss_limit_mb=2048 2>&1 | tail -n 3
done
