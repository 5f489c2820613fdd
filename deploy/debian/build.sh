#!/usr/bin/env bash
# Builds the Debian packages `stackhook` and `stackbuild` with cargo-deb into target/debian/
# (their metadata: [package.metadata.deb] in hook/Cargo.toml and builder/Cargo.toml; what they
# ship and why: docs/packages.md). Prints the two .deb paths on stdout.
#
#   deploy/debian/build.sh             cargo build --release, then package
#   deploy/debian/build.sh --no-build  package the release binaries already in target/release
#
# Before cargo-deb runs, everything a package ships that is generated is written under
# target/release/debian-assets/<package>/, where the assets in the Cargo.toml files point
# (cargo-deb reads `target/release/` as whatever target directory cargo uses):
# - man pages and bash/zsh/fish completions from the binaries' hidden `generate-docs DIR`
#   (the pages gzipped with `gzip -9n`: no name, no time stamp);
# - the Debian changelog for the workspace's version (gzipped the same way);
# - for stackhook, the Podman/CRI-O hook file as `stackhook install podman` writes it for
#   /usr/bin/stackhook with deploy/debian/config.toml, which must equal the checked-in
#   deploy/debian/stackhook.json (the file the package ships, so that a change of it shows in
#   review); `install` also refuses a dynamically linked binary, so a package never carries one.
# SOURCE_DATE_EPOCH (default: the last commit's time) dates the man pages, the changelog and
# every file in the packages: the same binaries packaged twice from one commit give the same
# .deb files.
set -euo pipefail

root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
build=1
for arg in "$@"; do
  case "$arg" in
    --no-build) build=0 ;;
    *) echo "usage: $0 [--no-build]" >&2; exit 2 ;;
  esac
done
if ! command -v cargo-deb >/dev/null; then
  echo "$0: cargo-deb is not installed: cargo install --locked cargo-deb (.ci/install does)" >&2
  exit 1
fi
export SOURCE_DATE_EPOCH="${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}"
# Where cargo puts the binaries (CARGO_TARGET_DIR, or <workspace>/target).
target="$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')"
if ((build)); then
  # The whole workspace, as README's `cargo build --release`: the same features, so the same
  # build artifacts as everyone else's.
  cargo build --release >&2
fi
bin="$target/release"
for program in stackhook stackbuild; do
  [ -x "$bin/$program" ] || { echo "$0: $bin/$program is missing: cargo build --release" >&2; exit 1; }
done
version="$(cargo metadata --format-version 1 --no-deps | python3 -c '
import json, sys
print(next(p["version"] for p in json.load(sys.stdin)["packages"] if p["name"] == "stackhook"))')"
revision=1

assets="$bin/debian-assets"
rm -rf "$assets"
for program in stackhook stackbuild; do
  mkdir -p "$assets/$program"
  "$bin/$program" generate-docs "$assets/$program" >/dev/null
  gzip -9n "$assets/$program"/man/*.1
  # One entry, for this version: the packages are built from the workspace, not uploaded.
  {
    echo "$program ($version-$revision) unstable; urgency=medium"
    echo
    echo "  * Built from the stackbuild workspace, commit $(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)."
    echo
    echo " -- stackbuild maintainers <maintainers@users.noreply.a-seed-d88fee46.example>  $(LC_ALL=C date -u -R -d "@$SOURCE_DATE_EPOCH")"
  } | gzip -9n >"$assets/$program/changelog.Debian.gz"
done

# The hooks.d file, written by the binary being packaged, installed as it will be.
stage="$assets/stackhook/stage"
mkdir -p "$stage/usr/bin"
cp "$bin/stackhook" "$stage/usr/bin/stackhook"
env -u STACKHOOK_CONFIG "$stage/usr/bin/stackhook" install podman --prefix "$stage" \
  --config "$root/deploy/debian/config.toml" >/dev/null
python3 - "$stage" "$assets/stackhook/stackhook.json" <<'EOF'
import json, sys
stage, out = sys.argv[1], sys.argv[2]
path = stage + "/usr/share/containers/oci/hooks.d/stackhook.json"
doc = json.load(open(path))
assert doc["hook"]["path"] == stage + "/usr/bin/stackhook", doc["hook"]["path"]
doc["hook"]["path"] = "/usr/bin/stackhook"
assert all(isinstance(e, str) for e in doc["hook"]["env"]) and doc["hook"]["env"], "the hook has no explicit env"
text = json.dumps(doc, indent=2) + "\n"
# Byte for byte what `install` writes (serde_json's pretty printer, keys sorted), path aside.
assert text.replace('"/usr/bin/stackhook"', json.dumps(stage + "/usr/bin/stackhook")) == open(path).read(), "unexpected layout"
open(out, "w").write(text)
EOF
rm -rf "$stage"
if ! diff -u deploy/debian/stackhook.json "$assets/stackhook/stackhook.json" >&2; then
  echo "$0: deploy/debian/stackhook.json is not what \`stackhook install podman\` writes (above);" \
    "if the change is meant, cp $assets/stackhook/stackhook.json deploy/debian/stackhook.json" >&2
  exit 1
fi

mkdir -p "$target/debian"
for program in stackhook stackbuild; do
  cargo deb --no-build -p "$program" --deb-revision "$revision" -o "$target/debian/" >/dev/null
  echo "$target/debian/${program}_$version-${revision}_$(dpkg --print-architecture).deb"
done
