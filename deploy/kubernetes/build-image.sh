#!/usr/bin/env bash
# Builds the node image deploy/kubernetes/daemonset.yaml runs (recipes/stackhook-node.toml): the
# statically linked stackhook and a static busybox on a scratch base. With a reference, pushes it:
#
#   deploy/kubernetes/build-image.sh [REGISTRY/stackhook-node:0.1.0] [stackbuild options...]
#
# then point the DaemonSet at it: `cd deploy/kubernetes && kustomize edit set image
# stackhook-node=REGISTRY/stackhook-node:0.1.0 && kubectl apply -k .`
set -euo pipefail
cd "$(dirname "$0")/../.."
ref=${1:-}
[ $# -gt 0 ] && shift
# Static: the init container runs this binary chrooted into the host root.
cargo rustc --release -q -p stackhook --bin stackhook -- -C target-feature=+crt-static
stage=target/stackhook-node
rm -rf "$stage"
mkdir -p "$stage/bin" "$stage/usr-local-bin"
install -m 0755 target/release/stackhook "$stage/usr-local-bin/stackhook"
# `cargo test` relinks target/release/stackhook dynamically: refuse anything but a static binary.
file "$stage/usr-local-bin/stackhook" | grep -Eq 'statically linked|static-pie' ||
  { echo "build-image.sh: $stage/usr-local-bin/stackhook is not statically linked" >&2; exit 1; }
install -m 0755 /bin/busybox "$stage/bin/busybox"
for applet in sh cp chmod mv chroot sed grep mkdir cat dirname echo rm; do ln -s busybox "$stage/bin/$applet"; done
args=(build recipes/stackhook-node.toml --source "busybox=$stage/bin" --source "stackhook=$stage/usr-local-bin")
[ -n "$ref" ] && args+=(--push "$ref")
cargo build --release -q -p stackbuild
exec target/release/stackbuild "${args[@]}" "$@"
