#!/usr/bin/env bash
# Proof that the DreamZero image runs what it carries, without a GPU, under runc:
#   - torch imports and reports its CUDA build;
#   - every module of the `groot` package imports, except those that need a GPU or a display at
#     import (listed with the error they raised);
#   - the server answers `--help` as DreamZero's README runs it;
#   - the requirements it carries (the hook's verdicts on fixture hosts are tests/dreamzero.rs).
#
#   bench/dreamzero-proof.sh [--tree DIR] [--out DIR] [--cache DIR]
#
# --tree DIR  the DreamZero checkout to build from (default: the recipe's pinned git commit; the
#             stand-in tree has no `groot` modules to import, so the import check wants the real
#             one, which CI here cannot reach: this is a bench, not a test)
# Needs root, runc, umoci, and what `stackbuild recipes/dreamzero.toml` needs. Builds with
# target/release/stackbuild and stackhook (cargo build --release first).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
tree="" out="$repo/target/dreamzero-proof" cache=""
while (($#)); do
  case $1 in
    --tree) tree=$(cd "${2:?}" && pwd); shift 2 ;;
    --out) out=${2:?}; shift 2 ;;
    --cache) cache=${2:?}; shift 2 ;;
    -h | --help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done
[[ $(id -u) == 0 ]] || { echo "needs root (runc, mmdebstrap)" >&2; exit 2; }
for t in runc umoci; do command -v "$t" >/dev/null || { echo "needs $t" >&2; exit 2; }; done
sb=$repo/target/release/stackbuild hook=$repo/target/release/stackhook
mkdir -p "$out"
args=("$repo/recipes/dreamzero.toml" --out "$out/layout" --locked --report "$out/report.json")
[[ -n $tree ]] && args+=(--source "dreamzero=$tree")
[[ -n $cache ]] && args+=(--cache-dir "$cache")
echo "== build: stackbuild ${args[*]}"
/usr/bin/time -f "build: %e s" "$sb" "${args[@]}"

rm -rf "$out/bundle"
umoci unpack --image "$out/layout:torch2.8.0-cu128" "$out/bundle" >/dev/null
run() { # run ARGS...: one fresh container of the image, no network, its stdout and stderr
  python3 - "$out/bundle/config.json" "$@" <<'PY'
import json, sys
path, args = sys.argv[1], sys.argv[2:]
c = json.load(open(path))
c["process"]["args"] = args
c["process"]["terminal"] = False
# A writable /tmp, as every engine gives a container (tempfile, dill and ray need one).
if not any(m["destination"] == "/tmp" for m in c["mounts"]):
    c["mounts"].append({"destination": "/tmp", "type": "tmpfs", "source": "tmpfs",
                        "options": ["nosuid", "nodev", "mode=1777"]})
json.dump(c, open(path, "w"), indent=1)
PY
  runc run --bundle "$out/bundle" "dz-proof-$$" 2>&1 || true
  runc delete --force "dz-proof-$$" >/dev/null 2>&1 || true
}
echo "== torch"
run python3 -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda, "cuDNN", torch.backends.cudnn.version(), "available", torch.cuda.is_available())'
echo "== the server's --help, as DreamZero's README runs it (its declared console script,"
echo "   dreamzero-server = socket_test_optimized_AR:main, fails at this commit: main() needs an argument)"
run sh -c 'cd /workspace/dreamzero && python3 socket_test_optimized_AR.py --help'
run dreamzero-server --help
echo "== the packages DreamZero imports"
run python3 -c 'import groot, hydra, deepspeed, evdev, transformers, diffusers, ray, datasets, pyarrow, rerun, antlr4, cv2, PyQt6.QtGui; print("imported")'
echo "== import every module of groot"
run python3 -c '
import importlib, pkgutil, sys, traceback
import groot
ok, failed = 0, []
for m in pkgutil.walk_packages(groot.__path__, "groot."):
    try:
        importlib.import_module(m.name)
        ok += 1
    except BaseException as e:
        failed.append((m.name, type(e).__name__, str(e).splitlines()[0][:160] if str(e) else ""))
print(f"imported {ok} module(s) of groot; {len(failed)} did not:")
for name, kind, why in failed:
    print(f"  {name}: {kind}: {why}")
'
echo "== the hook on fixture hosts"
"$hook" doctor --help >/dev/null
python3 - "$out/layout" <<'PY'
import json, sys
layout = sys.argv[1]
idx = json.load(open(f"{layout}/index.json"))
m = json.load(open(f"{layout}/blobs/sha256/" + idx["manifests"][0]["digest"].split(":")[1]))
c = json.load(open(f"{layout}/blobs/sha256/" + m["config"]["digest"].split(":")[1]))
for e in c["config"]["Env"]:
    if e.startswith(("NVIDIA_REQUIRE", "STACKBUILD_REQUIRE")):
        print("  image requires", e)
PY
echo "(the hook's verdicts on fixture hosts for these requirements: tests/dreamzero.rs)"
