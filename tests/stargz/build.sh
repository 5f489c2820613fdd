#!/usr/bin/env bash
# Builds the stargz snapshotter's daemon for tests/stargz.rs into $1 (default
# target/tools/containerd-stargz-grpc), from Debian's packaged sources alone: Debian ships the
# library (golang-github-containerd-stargz-snapshotter-dev, 0.12) and `ctr-remote`, not the
# daemon, so main.go here serves the library's snapshotter on containerd's snapshots gRPC API.
# GOPATH mode, no module proxy. `service/resolver` imports one type of
# k8s.io/cri-api/pkg/apis/runtime/v1alpha2, which Debian does not package: cri-api-stub/ gives
# that type (the CRI keychain is unused here).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:-$here/../../target/tools/containerd-stargz-grpc}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
stub="$work/gopath/src/k8s.io/cri-api/pkg/apis/runtime/v1alpha2"
mkdir -p "$stub" "$work/src" "$(dirname "$out")"
cp "$here/cri-api-stub/stub.go" "$stub/"
cp "$here/main.go" "$work/src/"
cd "$work/src"
GOPATH="$work/gopath:/usr/share/gocode" GO111MODULE=off GOPROXY=off GOFLAGS= GOCACHE="$work/cache" \
  CGO_ENABLED=0 go build -o "$out.tmp" .
mv "$out.tmp" "$out"
