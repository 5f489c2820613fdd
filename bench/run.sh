#!/usr/bin/env bash
# Benchmarks stackbuild and stackhook against the usual way, side by side in one run, and prints
# ratios (ours / baseline: below 1 is better). Targets: docs/benchmarks.md, "Targets".
#
# Sections:
#   build     cold (fresh cache, --locked; timed as the base alone, then the rest), no-change and
#             one-pin-changed builds of the recipe against a Dockerfile that pip-installs the same
#             locked wheels (hashes required) on the same base (our base layer, `docker import`ed)
#             with `docker build` (classic builder); image sizes against `docker save | gzip -1`.
#   wheels    bench/wheels.toml (cuDNN, cuBLAS, NVRTC wheels) from the index to gzip layers on a
#             cached base, against `uv pip install --target` + `tar | pigz -p<cores>` + sha256sum
#             (the diff_id) from a fresh uv cache.
#   compress  our layer writer (parallel multi-member gzip; zstd) against `tar | pigz -p<cores>`
#             and `tar | zstd -T<cores>` on the unpacked image.
#   start     time from `runc run` to the end of the recipe's imports in a fresh container
#             (overlay with an empty upper layer each run, as docker and Kubernetes give), ours
#             against the Dockerfile image of the build section, interleaved, median; the .pyc
#             Python wrote into the upper layers; the bytes our bytecode adds. Needs build.
#   node      a GPU node's view: our image (gzip layers, and again with zstd layers) and the
#             Dockerfile image pushed to a registry of the bench's own, then for each a fresh
#             containerd root in a network namespace pulls it over a veth pair shaped with tc to
#             1 Gbit/s and to 10 Gbit/s, unpacks it and runs the imports (`ctr run`): pull +
#             unpack + start against the Dockerfile image's. Then the same through the CRI
#             plugin (PullImage, as the kubelet pulls), with a fresh Podman storage root
#             (containers/storage, as CRI-O pulls for the kubelet), and our image with eStargz
#             layers through the CRI plugin with the stargz snapshotter (lazy: mounted from the
#             registry, fetched as read; needs /dev/fuse and target/tools/containerd-stargz-grpc,
#             tests/stargz/build.sh). STACKBUILD_BENCH_NODE_RATES (default "1gbit 10gbit") and
#             STACKBUILD_BENCH_NODE_PATHS (default "ctr cri podman stargz zstdchunked";
#             zstdchunked: zstd:chunked layers, the same snapshotter) choose. Needs build.
#   hook      `stackhook hook` on an 8-GPU fixture host against /bin/true; `runc run` of a
#             busybox bundle with and without the hook (createRuntime).
#   cache-registry (not in the default list) two build machines sharing layers through a
#             registry (--cache-registry, a fresh repository): machine A builds the recipe cold
#             with an empty cache and pushes every layer, machine B (another empty cache) pulls
#             them; B's time against A's, and the same digest. The registry is
#             $STACKBUILD_BENCH_REGISTRY (HOST:PORT), else .ci/services' 127.0.0.1:5115.
#
# Needs root, dockerd (started with .ci/services when not running), runc, pigz, zstd, uv,
# python3 (3.11), busybox-static, and a network path to the package index and Debian mirror;
# the node section also containerd, ctr, iproute2 (ip, tc), docker-registry and skopeo.
# Everything it writes goes to one temp dir (removed at exit unless --keep), the --out file, a
# recipe copy next to the recipe (`.stackbuild-bench-PID-*`, removed at exit) and, when the
# binaries are missing, cargo's target dir.
set -euo pipefail

usage() {
  cat <<'EOF'
usage: bench/run.sh [--recipe PATH] [--source NAME=DIR]... [--change OLD=NEW] [--quick]
                    [--sections build,wheels,compress,start,node,hook,cache-registry] [--imports LIST]
                    [--with-load] [--no-docker]
                    [--out FILE] [--keep]

  --recipe PATH     recipe to build (default recipes/dreamzero-cu121.toml, with
                    --source dreamzero=recipes/stand-in/dreamzero unless --source is given)
  --source NAME=DIR a local tree for a recipe source (repeatable; git sources need one)
  --change OLD=NEW  the pin changed for the one-package-changed builds
                    (default safetensors==0.4.1=safetensors==0.4.2)
  --quick           fewer timing runs (hook 50 and runc 10 instead of 300 and 50), for a smoke test
  --imports LIST    modules the start section imports, comma-separated (default: the recipe's
                    [python] packages, `-` read as `_`; DreamZero: torch,transformers,datasets,accelerate)
  --sections LIST   which sections to run (default build,wheels,compress,start,node,hook); compress without build
                    builds the image first, untimed, in $STACKBUILD_CACHE if set, else a fresh cache;
                    cache-registry (two machines sharing a registry cache) runs only when listed
  --with-load       also time cold builds with `--load`, gzip and uncompressed layers (a cache holding
                    only the base) against the cold `docker build`
  --no-docker       the build section without its Docker peers (docker build, docker save, the uv
                    Dockerfile): ours against `uv pip install --target --compile-bytecode` only, for a
                    machine without the disk for Docker's copy of a large stack (the rows that
                    need Docker are left out, not estimated)
  --out FILE        also write the results table to FILE
  --keep            keep the temp dir (logs, layouts, Docker context) for inspection

Small smoke test (a few minutes):
  bench/run.sh --recipe bench/small.toml --source hello=bench/small-src/hello --quick
EOF
}

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
recipe=$repo/recipes/dreamzero-cu121.toml
sources=()
change="safetensors==0.4.1=safetensors==0.4.2"
quick=0
sections="build,wheels,compress,start,node,hook"
imports=""
with_load=0
docker_peers=1
out_file=""
keep=0

abspath() { case $1 in /*) printf '%s\n' "$1" ;; *) printf '%s/%s\n' "$PWD" "$1" ;; esac; }

while (($#)); do
  case $1 in
    --recipe) recipe=$(abspath "${2:?--recipe needs a path}"); shift 2 ;;
    --source)
      src=${2:?--source needs NAME=DIR}
      [[ $src == *=* ]] || { echo "--source wants NAME=DIR, got $src" >&2; exit 2; }
      sources+=("${src%%=*}=$(abspath "${src#*=}")"); shift 2 ;;
    --change) change=${2:?--change needs OLD=NEW}; shift 2 ;;
    --quick) quick=1; shift ;;
    --sections) sections=${2:?--sections needs a list}; shift 2 ;;
    --with-load) with_load=1; shift ;;
    --no-docker) docker_peers=0; shift ;;
    --imports) imports=${2:?--imports needs a list}; shift 2 ;;
    --out) out_file=$(abspath "${2:?--out needs a file}"); shift 2 ;;
    --keep) keep=1; shift ;;
    -h | --help) usage; exit 0 ;;
    *) echo "unknown argument: $1" >&2; usage >&2; exit 2 ;;
  esac
done
if ((${#sources[@]} == 0)) && [[ $recipe == "$repo/recipes/dreamzero"*.toml ]]; then
  sources=("dreamzero=$repo/recipes/stand-in/dreamzero")
fi
[[ $change == *==*=*==* ]] || { echo "--change wants OLD=NEW pins, e.g. six==1.16.0=six==1.17.0" >&2; exit 2; }
# OLD=NEW where both are `name==version`: split at the `=` that is not part of `==`.
change_old=$(sed -E 's/^([^=]+==[^=]+)=(.+)$/\1/' <<<"$change")
change_new=$(sed -E 's/^([^=]+==[^=]+)=(.+)$/\2/' <<<"$change")
has_section() { [[ ,$sections, == *,$1,* ]]; }

if ((quick)); then hook_runs=50 runc_runs=10 start_runs=5; else hook_runs=300 runc_runs=50 start_runs=11; fi

log() { printf '[bench %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

# --- prerequisites ---------------------------------------------------------------------------
[[ $(id -u) == 0 ]] || die "needs root (runc, mmdebstrap, docker)"
[[ -f $recipe ]] || die "no recipe at $recipe"
[[ -f $recipe.lock ]] || die "no lock at $recipe.lock: run \`stackbuild lock $recipe\` first"
DOCKER=${DOCKER:-$(if [[ -x /usr/bin/docker ]]; then echo /usr/bin/docker; else command -v docker || true; fi)}
for tool in python3 tar gzip pigz zstd runc uv busybox; do
  command -v "$tool" >/dev/null || die "$tool is not installed (see .ci/install)"
done
[[ -n $DOCKER ]] || die "docker is not installed (see .ci/install)"
runc_bin=$(command -v runc)
helper=$repo/bench/helper.py
stackbuild=$repo/target/release/stackbuild
stackhook=$repo/target/release/stackhook
pack_layer=$repo/target/release/examples/pack_layer
fixture_host=$repo/target/release/examples/fixture_host
# The kubelet's PullImage, through the CRI client the tests use (tonic, kubernetes/cri-api's proto).
cri=$repo/target/release/cri
if [[ ! -x $stackbuild ]]; then
  log "building target/release/stackbuild"
  (cd "$repo" && cargo build --release -p stackbuild --bin stackbuild) >&2
fi
if [[ ! -x $stackhook ]]; then
  # Static, as every build of it is (hook/build.rs).
  log "building target/release/stackhook"
  (cd "$repo" && cargo build --release -p stackhook --bin stackhook) >&2
fi
if [[ ! -x $cri ]]; then
  log "building target/release/cri"
  (cd "$repo" && cargo build --release -p cri-client --bin cri) >&2
fi
if [[ ! -x $pack_layer ]]; then
  log "building target/release/examples/pack_layer"
  (cd "$repo" && cargo build --release -p stackbuild --example pack_layer) >&2
fi
if [[ ! -x $fixture_host ]]; then
  log "building target/release/examples/fixture_host"
  (cd "$repo" && cargo build --release -p stackhook --features fixture --example fixture_host) >&2
fi
if has_section build && ! "$DOCKER" version >/dev/null 2>&1; then
  log "dockerd is not running: starting it with .ci/services"
  "$repo/.ci/services" >&2
fi

[[ -z $out_file ]] || : >"$out_file" || die "cannot write $out_file"

# --- temp state and cleanup ------------------------------------------------------------------
work=$(mktemp -d "${TMPDIR:-/tmp}/stackbuild-bench.XXXXXX")
# Searchable by others: the caches are below it, and a package's build runs as nobody, who must
# reach its build root there (mktemp makes the directory 0700).
chmod 711 "$work"
mkdir -p "$work/logs"
tag=stackbuild-bench-$$
# Recipe variants sit next to the recipe, so that its relative paths (sources, diffs) resolve.
recipe_copy=$(dirname "$recipe")/.$tag-$(basename "$recipe")
base_recipe=$(dirname "$recipe")/.$tag-base-$(basename "$recipe")
wheels_recipe=$repo/bench/wheels.toml
wheels_base_recipe=$repo/bench/.$tag-base-wheels.toml
loaded_ref=""
# Removes every image this run made: those built on our imported base (intermediate images of
# an interrupted build too), leaves first since an image with children cannot go, then the tags.
docker_cleanup() {
  local base_id all id images
  base_id=$("$DOCKER" image inspect -f '{{.Id}}' "$tag:base" 2>/dev/null || true)
  if [[ -n $base_id ]]; then
    mapfile -t all < <("$DOCKER" images -a -q --no-trunc 2>/dev/null || true)
    if ((${#all[@]})); then
      "$DOCKER" image inspect -f '{{.Id}} {{.Parent}}' "${all[@]}" 2>/dev/null |
        awk -v base="$base_id" '
          { parent[$1] = $2 }
          END {
            for (id in parent) {
              depth = 0
              for (p = id; p != "" && p != base; p = parent[p]) depth++
              if (p == base && id != base) print depth, id
            }
          }' | sort -rn | while read -r _ id; do "$DOCKER" rmi -f "$id" >/dev/null 2>&1 || true; done
    fi
  fi
  images=$("$DOCKER" images --format '{{.Repository}}:{{.Tag}}' "$tag" 2>/dev/null || true)
  [[ -n $loaded_ref ]] && images+=$'\n'$loaded_ref
  if [[ -n ${images//[[:space:]]/} ]]; then
    # shellcheck disable=SC2086 # one reference per line, none with spaces
    "$DOCKER" rmi -f $images >/dev/null 2>&1 || true
  fi
}
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  rm -f "$recipe_src" "$recipe_src.lock" "$recipe_copy" "$recipe_copy.lock" "$base_recipe" "$base_recipe.lock" "$wheels_base_recipe" "$wheels_base_recipe.lock"
  if [[ -n $DOCKER ]] && "$DOCKER" version >/dev/null 2>&1; then
    docker_cleanup
  fi
  local ids
  ids=$("$runc_bin" list -q 2>/dev/null | grep "^$tag-" || true)
  for id in $ids; do "$runc_bin" delete --force "$id" >/dev/null 2>&1 || true; done
  umount "$work"/start-*/merged 2>/dev/null || true
  node_cleanup
  if ((keep)); then log "kept $work"; else rm -rf "$work"; fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Fresh pip and uv caches for everything the bench runs: "cold" means cold, and nothing is
# written to the user's caches.
export PIP_CACHE_DIR=$work/pip-cache UV_CACHE_DIR=$work/uv-cache
export DOCKER_BUILDKIT=0

# --- measuring and formatting ----------------------------------------------------------------
now_ns() { date +%s%N; }
# timed VAR NAME CMD...: runs CMD with its output in logs/NAME.log, puts the wall seconds in VAR
# (`-`: nowhere).
timed() {
  local __var=$1 name=$2 start end
  shift 2
  log "$name"
  start=$(now_ns)
  if ! "$@" >"$work/logs/$name.log" 2>&1; then
    log "FAILED: $name; last lines of its log:"
    tail -n 40 "$work/logs/$name.log" >&2
    exit 1
  fi
  end=$(now_ns)
  local secs
  secs=$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.4f", (b - a) / 1e9 }')
  [[ $__var == - ]] || printf -v "$__var" '%s' "$secs"
  log "  $secs s"
}
# timed_median VAR NAME N CMD...: runs CMD N times (logs/NAME-I.log), puts the median wall
# seconds in VAR. For the runs of milliseconds, where one run measures the machine's noise (a
# cold build's writeback still under way) as much as the program: the no-change rebuilds, ours
# and Docker's alike.
timed_median() {
  local __var=$1 name=$2 n=$3 i t all=()
  shift 3
  for ((i = 1; i <= n; i++)); do
    timed t "$name-$i" "$@"
    all+=("$t")
  done
  printf -v "$__var" '%s' "$(printf '%s\n' "${all[@]}" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }')"
  log "  median of $n: ${!__var} s"
}
secs() { awk -v s="$1" 'BEGIN { if (s < 1) printf "%.3f s", s; else if (s < 100) printf "%.2f s", s; else printf "%.0f s", s }'; }
ms() { awk -v s="$1" 'BEGIN { printf "%.2f ms", s }'; }
bytes() { awk -v b="$1" 'BEGIN { if (b >= 1e9) printf "%.2f GB", b / 1e9; else if (b >= 1e6) printf "%.1f MB", b / 1e6; else printf "%.1f kB", b / 1e3 }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2fx", a / b; else print "n/a" }'; }
add() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.4f", a + b }'; }
mbps() { awk -v n="$1" -v s="$2" 'BEGIN { if (s > 0) printf "%.0f MB/s", n / s / 1e6; else print "n/a" }'; }
# The pipelines timed as one command (timed runs a command, not a pipeline).
save_gzip() { "$DOCKER" save "$1" | gzip -1 >"$2"; }
# tar_tree OUT [COMPRESSOR...]: `tar -c` of the unpacked image, through COMPRESSOR, into OUT.
tar_tree() {
  local out=$1
  shift
  if (($#)); then tar -cf - -C "$work/tree" . | "$@" >"$out"; else tar -cf - -C "$work/tree" . >"$out"; fi
}
# cpu_of FILE: the user + system seconds of a `/usr/bin/time -f 'cpu=%U %S'` output.
cpu_of() { awk '/^cpu=/ { sub(/^cpu=/, ""); printf "%.2f", $1 + $2 }' "$1"; }
json() { python3 -c 'import json,sys; v=json.load(sys.stdin); print(eval(sys.argv[1], {"v": v}))' "$1"; }
file_size() { stat -c %s "$1"; }

rows=()
# row SECTION WHAT OURS BASELINE RATIO NOTE
# Fields apart by the unit separator: a tab is IFS white space, and empty fields would merge.
row() { rows+=("$1"$'\x1f'"$2"$'\x1f'"$3"$'\x1f'"$4"$'\x1f'"$5"$'\x1f'"$6"); }
section_times=()

source_args=()
for s in "${sources[@]}"; do source_args+=(--source "$s"); done

# The lock the bench builds from: the recipe's, resolved again for the --source trees it is
# given (untimed, in a cache of its own, `stackbuild lock` keeping every pin). The committed lock
# records the real project's tree; built from a stand-in, the changed pin's relock would also
# move the project to the stand-in's tree and build its wheel again, which no user's one-pin
# change does (the project's tree is the one it locked).
recipe_shown=$recipe
recipe_src=$(dirname "$recipe")/.$tag-src-$(basename "$recipe")
if has_section build && ((${#sources[@]})) && [[ -f $recipe.lock ]]; then
  cp "$recipe" "$recipe_src"
  cp "$recipe.lock" "$recipe_src.lock"
  timed - "lock-for-sources" "$stackbuild" lock "$recipe_src" --cache-dir "$work/lock-cache" "${source_args[@]}"
  rm -rf "$work/lock-cache"
  recipe=$recipe_src
fi

# --- build -----------------------------------------------------------------------------------
layout=""
docker_unpacked=""
section_build() {
  local t_base t_cold t_same t_chg t_dcold t_dsame t_dchg t_save t_import n_layers built_same built_chg
  local cache=$work/cache base_note=""
  python3 "$helper" change --recipe "$recipe" --old "$change_old" --new "$change_new" --out "$recipe_copy"
  cp "$recipe.lock" "$recipe_copy.lock"
  python3 "$helper" base-only --recipe "$recipe" --out "$base_recipe"

  # Cold, in two steps in one fresh cache: the base alone (mmdebstrap), then the whole recipe,
  # which finds the base cached and does the rest. The rest is what `docker build` does on a
  # base it already has; the sum is a cold build from nothing (the same manifest digest).
  timed t_base "build-ours-cold-base-only" "$stackbuild" "$base_recipe" --cache-dir "$cache" \
    --out "$work/ours-base" --report "$work/base.json"
  timed t_cold "build-ours-cold" /usr/bin/time -f $'rss_kib=%M\ncpu=%U %S' -o "$work/cold.time" \
    "$stackbuild" "$recipe" --locked --cache-dir "$cache" \
    --out "$work/ours" --report "$work/cold.json" "${source_args[@]}"
  local rss_cold
  rss_cold=$(sed -n 's/^rss_kib=//p' "$work/cold.time")
  layout=$work/ours
  if [[ $(json '[l["built"] for l in v["layers"] if l["name"] == "base"]' <"$work/cold.json") != "[False]" ]]; then
    base_note="; the base was built again (its key differs from the base-only recipe's): ours includes it"
  fi
  timed_median t_same "build-ours-no-change" 5 "$stackbuild" "$recipe" --locked --cache-dir "$cache" \
    --out "$work/ours" --report "$work/same.json" "${source_args[@]}"
  timed t_chg "build-ours-one-changed" "$stackbuild" "$recipe_copy" --cache-dir "$cache" \
    --out "$work/ours-changed" --report "$work/changed.json" "${source_args[@]}"
  n_layers=$(json 'len(v["layers"])' <"$work/cold.json")
  built_same=$(json 'sum(l["built"] for l in v["layers"])' <"$work/same.json")
  built_chg=$(json 'sum(l["built"] for l in v["layers"])' <"$work/changed.json")
  python3 "$helper" layout "$layout" >"$work/layout.json"

  # The usual way, on the same base: our base layer imported as a Docker image.
  local base_blob ca=()
  base_blob=$(json '"".join(l["digest"].split(":")[1] for l in v["layers"] if l["name"] == "base")' <"$work/cold.json")
  [[ -n $base_blob ]] || die "the image has no base layer: the usual way needs one to build FROM"
  base_blob=$layout/blobs/sha256/$base_blob
  if ((docker_peers)); then
    timed t_import "docker-import-base" "$DOCKER" import "$base_blob" "$tag:base"
  fi
  # A host that reaches the index through a TLS-intercepting proxy trusts it through local CAs,
  # which the image's bundle lacks: hand pip the host's bundle.
  if compgen -G '/usr/local/share/ca-certificates/*.crt' >/dev/null; then
    ca=(--ca /etc/ssl/certs/ca-certificates.crt)
  fi
  python3 "$helper" context --recipe "$recipe" --lock "$recipe.lock" --base "$tag:base" \
    --out "$work/ctx-cold" "${source_args[@]}" "${ca[@]}"
  python3 "$helper" context --recipe "$recipe_copy" --lock "$recipe_copy.lock" --base "$tag:base" \
    --out "$work/ctx-changed" "${source_args[@]}" "${ca[@]}"
  # uv resolves the whole copy again: unpinned dependencies may move too; say how many did.
  local moved
  moved=$(comm -13 <(sort "$work/ctx-cold/requirements.txt") <(sort "$work/ctx-changed/requirements.txt") | wc -l)
  # pip in the image uses the index the host's pip is configured with (environment or pip.conf).
  local build_args=() index=${PIP_INDEX_URL:-}
  [[ -n $index ]] || index=$(python3 -m pip config get global.index-url 2>/dev/null || true)
  [[ -n $index ]] && build_args+=(--build-arg "PIP_INDEX_URL=$index")
  [[ -n ${PIP_EXTRA_INDEX_URL:-} ]] && build_args+=(--build-arg "PIP_EXTRA_INDEX_URL=$PIP_EXTRA_INDEX_URL")
  if ((!docker_peers)) && ! has_section compress && ! has_section start && ! has_section node; then
    # Nothing after this reads our cache or layouts: their disk goes to uv's tree and cache
    # (the real DreamZero stack's are 20 GB and 17 GB).
    rm -rf "$cache" "$work/ours" "$work/ours-changed" "$work/ours-base"
  fi
  # The floor: uv installing the same lock into a directory with bytecode, on an empty uv cache
  # (the download, install and compile any pip-built image pays): the lock's wheels, its sdists
  # built as uv builds them (isolated, with the host's compiler and Python), then the recipe's
  # projects from their trees (`install = "wheel"`), as ours installs them. And the wheels alone,
  # the floor of the runs before 2026-12-07.
  local t_uvt t_uvw pyver glibc
  pyver=$(python3 -c 'import sys,tomllib; print(tomllib.load(open(sys.argv[1],"rb"))["python"]["version"])' "$recipe")
  # The lock's glibc baseline (the base's: bookworm 2.36), as uv's platform tag: wheels up to it
  # are what the lock holds (rerun-sdk's manylinux_2_31).
  glibc=$(python3 -c 'import sys,tomllib; print(tomllib.load(open(sys.argv[1],"rb")).get("glibc","2.28").replace(".","_"))' "$recipe.lock")
  local uv_args=(--no-deps --compile-bytecode --target "$work/uv-target" --python-version "$pyver"
    --python-platform "$(uname -m)-manylinux_$glibc")
  {
    printf 'set -e\n'
    printf 'uv pip install --require-hashes'; printf ' %q' "${uv_args[@]}" -r "$work/ctx-cold/requirements.txt"; printf '\n'
    while read -r project; do
      [[ -n $project ]] || continue
      printf 'uv pip install'; printf ' %q' "${uv_args[@]}" "$work/ctx-cold/$project"; printf '\n'
    done <"$work/ctx-cold/projects.txt"
  } >"$work/uv-floor.sh"
  timed t_uvt "uv-target-compile-bytecode" /usr/bin/time -f 'cpu=%U %S' -o "$work/uvt.time" \
    env UV_CACHE_DIR="$work/uv-cache-target" bash "$work/uv-floor.sh"
  rm -rf "$work/uv-target" "$work/uv-cache-target"
  timed t_uvw "uv-target-compile-bytecode-wheels" env UV_CACHE_DIR="$work/uv-cache-target" \
    uv pip install --require-hashes "${uv_args[@]}" -r "$work/ctx-cold/requirements-wheels.txt"
  rm -rf "$work/uv-target" "$work/uv-cache-target"
  # The CPU time of each (user + system): on a machine of few cores, the wall time a build can
  # reach is its CPU time over the cores, and ours compresses every layer, which uv does not.
  local cpu_cold cpu_uvt cpu_note
  cpu_cold=$(cpu_of "$work/cold.time")
  cpu_uvt=$(cpu_of "$work/uvt.time")
  cpu_note="user + system (/usr/bin/time) on $(nproc) cores: a wall time below the CPU time / $(nproc) cannot be had here"
  # What the floor builds (the sdists) and installs from trees (the recipe's projects).
  local built_by_uv projects floor_note
  built_by_uv=$(python3 -c 'import sys,tomllib; l=tomllib.load(open(sys.argv[1],"rb")); print(", ".join(sorted(p["name"] for p in l.get("package",[]) if not p["filename"].endswith(".whl") and "source" not in p)) or "none")' "$recipe.lock")
  projects=$(sed 's/^src-//' "$work/ctx-cold/projects.txt" | paste -sd, - | sed 's/,/, /g')
  floor_note="uv pip install --no-deps --require-hashes --compile-bytecode --target of the whole lock, empty uv cache: its sdists built by uv (${built_by_uv}), the recipe's projects from their trees (${projects:-none}); target <= 1.0x"
  local wheels_note="the same, the lock's wheels alone (the floor before 2026-12-07)"
  if ((!docker_peers)); then
    row build "cold build vs uv --target --compile-bytecode" "$(secs "$t_cold")" "$(secs "$t_uvt")" \
      "$(ratio "$t_cold" "$t_uvt")" "$floor_note"
    row build "cold build vs uv --target, wheels only" "$(secs "$t_cold")" "$(secs "$t_uvw")" \
      "$(ratio "$t_cold" "$t_uvw")" "$wheels_note"
    row build "CPU time, cold build vs uv --target" "$(secs "$cpu_cold")" "$(secs "$cpu_uvt")" \
      "$(ratio "$cpu_cold" "$cpu_uvt")" "$cpu_note"
    row build "peak memory, cold build" "$(bytes $((rss_cold * 1024)))" "" "" "maximum resident set size (/usr/bin/time); target < 1 GiB"
    row build "cold build, base included" "$(secs "$(add "$t_base" "$t_cold")")" "" "" "ours builds the base ($(secs "$t_base"))"
    row build "no-change rebuild" "$(secs "$t_same")" "" "" "$built_same of $n_layers layers rebuilt, median of 5 runs; target <= 0.05 s"
    row build "one pin changed ($change_old -> ${change_new#*==})" "$(secs "$t_chg")" "" "" \
      "$built_chg of $n_layers layers rebuilt; docker build not run (--no-docker)"
    row build "image, compressed" "$(bytes "$(json 'v["blob_bytes"]' <"$work/layout.json")")" "" "" "OCI layout blobs"
    rm -rf "$work/ours-base" "$work/ours-changed" "$work/ctx-cold" "$work/ctx-changed"
    return
  fi
  timed t_dcold "docker-build-cold" "$DOCKER" build --network host --force-rm --no-cache "${build_args[@]}" \
    -t "$tag:cold" "$work/ctx-cold"
  timed_median t_dsame "docker-build-no-change" 5 "$DOCKER" build --network host --force-rm "${build_args[@]}" \
    -t "$tag:cold" "$work/ctx-cold"
  timed t_dchg "docker-build-one-changed" "$DOCKER" build --network host --force-rm "${build_args[@]}" \
    -t "$tag:changed" "$work/ctx-changed"
  # Nothing after this reads the changed image; its pip layer is the size of the stack (12 GB for
  # the real DreamZero stack).
  "$DOCKER" rmi -f "$tag:changed" >/dev/null 2>&1 || true
  timed t_save "docker-save-gzip" save_gzip "$tag:cold" "$work/docker-image.tar.gz"
  # The modern peer: the same Dockerfile installing with uv. BuildKit only where the daemon
  # offers it (Debian's docker.io 20.10 has no buildx: the classic builder then).
  local t_uvb t_uvs uv_note="classic builder" uv_env=(env DOCKER_BUILDKIT=0)
  if DOCKER_BUILDKIT=1 "$DOCKER" buildx version >/dev/null 2>&1; then
    uv_note="BuildKit" uv_env=(env DOCKER_BUILDKIT=1)
  fi
  python3 "$helper" context --recipe "$recipe" --lock "$recipe.lock" --base "$tag:base" \
    --out "$work/ctx-uv" --uv "$(uv_binary)" "${source_args[@]}" "${ca[@]}"
  timed t_uvb "docker-build-uv-cold" "${uv_env[@]}" "$DOCKER" build --network host --force-rm --no-cache \
    "${build_args[@]}" -t "$tag:uv" "$work/ctx-uv"
  timed t_uvs "docker-save-gzip-uv" save_gzip "$tag:uv" "$work/docker-uv-image.tar.gz"
  rm -rf "$work/docker-uv-image.tar.gz" "$work/ctx-uv"
  "$DOCKER" rmi -f "$tag:uv" >/dev/null 2>&1 || true
  local ours_bytes docker_bytes
  ours_bytes=$(json 'v["blob_bytes"]' <"$work/layout.json")
  docker_bytes=$(file_size "$work/docker-image.tar.gz")
  rm -f "$work/docker-image.tar.gz"
  docker_unpacked=$("$DOCKER" image inspect -f '{{.Size}}' "$tag:cold")

  local t_all
  t_all=$(add "$t_base" "$t_cold")
  row build "cold build, base cached" "$(secs "$t_cold")" "$(secs "$t_dcold")" \
    "$(ratio "$t_cold" "$t_dcold")" "docker build --no-cache FROM the same base (pip download included)$base_note"
  row build "cold build to a gzip image, base cached" "$(secs "$t_cold")" "$(secs "$(add "$t_dcold" "$t_save")")" \
    "$(ratio "$t_cold" "$(add "$t_dcold" "$t_save")")" "+ docker save | gzip -1 ($(secs "$t_save")); target <= 0.4x"
  row build "cold build to a gzip image vs uv" "$(secs "$t_cold")" "$(secs "$(add "$t_uvb" "$t_uvs")")" \
    "$(ratio "$t_cold" "$(add "$t_uvb" "$t_uvs")")" "the Dockerfile with uv pip install --system --no-deps --require-hashes ($uv_note, $(secs "$t_uvb")) + docker save | gzip -1 ($(secs "$t_uvs")); target <= 0.5x"
  row build "cold build vs uv --target --compile-bytecode" "$(secs "$t_cold")" "$(secs "$t_uvt")" \
    "$(ratio "$t_cold" "$t_uvt")" "$floor_note"
  row build "cold build vs uv --target, wheels only" "$(secs "$t_cold")" "$(secs "$t_uvw")" \
    "$(ratio "$t_cold" "$t_uvw")" "$wheels_note"
  row build "CPU time, cold build vs uv --target" "$(secs "$cpu_cold")" "$(secs "$cpu_uvt")" \
    "$(ratio "$cpu_cold" "$cpu_uvt")" "$cpu_note"
  row build "peak memory, cold build" "$(bytes $((rss_cold * 1024)))" "" "" "maximum resident set size (/usr/bin/time); target < 1 GiB"
  row build "cold build, base included" "$(secs "$t_all")" "$(secs "$t_dcold")" \
    "$(ratio "$t_all" "$t_dcold")" "ours builds the base ($(secs "$t_base")); docker imports it ($(secs "$t_import"), not counted)"
  row build "no-change rebuild" "$(secs "$t_same")" "$(secs "$t_dsame")" "$(ratio "$t_same" "$t_dsame")" \
    "$built_same of $n_layers layers rebuilt, median of 5 runs; target <= 0.05 s"
  row build "one pin changed ($change_old -> ${change_new#*==})" "$(secs "$t_chg")" "$(secs "$t_dchg")" \
    "$(ratio "$t_chg" "$t_dchg")" "$built_chg of $n_layers layers rebuilt, $moved wheel(s) changed; target <= 0.03x (DreamZero), <= 0.3x (bench/small.toml)"
  row build "image, compressed" "$(bytes "$ours_bytes")" "$(bytes "$docker_bytes")" \
    "$(ratio "$ours_bytes" "$docker_bytes")" "OCI layout blobs vs docker save | gzip -1"

  if ((with_load)); then
    local ref t_load
    ref=$(python3 -c 'import sys,tomllib; i=tomllib.load(open(sys.argv[1],"rb"))["image"]; print(i["name"]+":"+i.get("tag","latest"))' "$recipe")
    if "$DOCKER" image inspect "$ref" >/dev/null 2>&1; then
      row build "cold build --load" "skipped" "" "" "$ref already exists in dockerd; not overwritten"
    else
      loaded_ref=$ref
      local compression
      for compression in gzip none; do
        # A cache holding the base only, as docker has its base (each compression has its own
        # layer keys: the base is built again for it, not timed).
        timed - "build-ours-load-base-only-$compression" env PIP_CACHE_DIR="$work/pip-cache-load-$compression" \
          UV_CACHE_DIR="$work/uv-cache-load-$compression" "$stackbuild" "$base_recipe" --cache-dir "$work/cache-load" \
          --out "$work/ours-load-base" --compression "$compression"
        timed t_load "build-ours-cold-load-$compression" env PIP_CACHE_DIR="$work/pip-cache-load-$compression" \
          UV_CACHE_DIR="$work/uv-cache-load-$compression" "$stackbuild" "$recipe" --locked --cache-dir "$work/cache-load" \
          --out "$work/ours-load" --load --compression "$compression" "${source_args[@]}"
        row build "cold build --load ($compression layers), base cached" "$(secs "$t_load")" "$(secs "$t_dcold")" \
          "$(ratio "$t_load" "$t_dcold")" "docker build --no-cache; layers go into dockerd as they are written; target <= 0.8x"
        "$DOCKER" rmi "$ref" >/dev/null 2>&1 || true
        rm -rf "$work/cache-load" "$work/ours-load" "$work/ours-load-base"
      done
    fi
  fi
  rm -rf "$work/ours-base" "$work/ours-changed" "$work/ctx-cold" "$work/ctx-changed"
}

# The uv executable itself: `command -v uv` may be a pyenv or asdf shim, a script that runs the
# real one through tools the image does not have.
uv_binary() {
  local p
  p=$(command -v uv)
  if [[ $(head -c 4 "$p" | od -An -tx1 | tr -d ' \n') == 7f454c46 ]]; then
    echo "$p"
  elif p=$(python3 -c 'import uv; print(uv.find_uv_bin())' 2>/dev/null) && [[ -x $p ]]; then
    echo "$p"
  else
    pyenv which uv
  fi
}

# --- wheels ----------------------------------------------------------------------------------
# The usual way's layer: the installed tree through tar, pigz and a sha256 of the tar (the
# diff_id), in one pass as a layer writer makes it.
pack_wheels_tree() {
  tar -cf - -C "$work/wheels-tree" . | tee >(sha256sum >"$work/wheels-diff-id") |
    pigz -p "$(nproc)" -6 >"$work/wheels-tree.tar.gz"
  sha256sum "$work/wheels-tree.tar.gz" >/dev/null
}
section_wheels() {
  local cache=$work/wheels-cache t_ours t_uv t_pack rss ours_bytes pigz_bytes installed
  python3 "$helper" base-only --recipe "$wheels_recipe" --out "$wheels_base_recipe"
  # Both sides start from a base they have: ours in its cache (untimed), theirs on the host.
  timed - "wheels-base-only" "$stackbuild" "$wheels_base_recipe" --cache-dir "$cache" --out "$work/wheels-base"
  timed t_ours "wheels-ours" /usr/bin/time -f 'rss_kib=%M' -o "$work/wheels-ours.time" \
    "$stackbuild" "$wheels_recipe" --locked --cache-dir "$cache" --out "$work/wheels-ours" \
    --report "$work/wheels.json"
  rss=$(sed -n 's/^rss_kib=//p' "$work/wheels-ours.time")
  ours_bytes=$(json 'sum(l["size"] for l in v["layers"] if l["name"] != "base")' <"$work/wheels.json")
  python3 -c '
import sys, tomllib
for p in tomllib.load(open(sys.argv[1], "rb"))["package"]:
    print("%s==%s --hash=sha256:%s" % (p["name"], p["version"], p["sha256"]))
' "$wheels_recipe.lock" >"$work/wheels-requirements.txt"
  timed t_uv "wheels-uv-install" uv pip install --no-deps --require-hashes --target "$work/wheels-tree" \
    --python-version 3.11 --python-platform x86_64-manylinux_2_28 -r "$work/wheels-requirements.txt"
  timed t_pack "wheels-tar-pigz" pack_wheels_tree
  pigz_bytes=$(file_size "$work/wheels-tree.tar.gz")
  installed=$(du -sb "$work/wheels-tree" | cut -f1)
  row wheels "wheels to gzip layers ($(bytes "$installed") installed)" "$(secs "$t_ours")" \
    "$(secs "$(add "$t_uv" "$t_pack")")" "$(ratio "$t_ours" "$(add "$t_uv" "$t_pack")")" \
    "uv install $(secs "$t_uv") + tar|pigz -p$(nproc)|sha256 $(secs "$t_pack"); ours: download, install, audit, peak RSS $(bytes $((rss * 1024))); target <= 0.3x"
  row wheels "wheel layers, size" "$(bytes "$ours_bytes")" "$(bytes "$pigz_bytes")" "$(ratio "$ours_bytes" "$pigz_bytes")" \
    "ours carries the wheels' deflate streams; theirs is pigz -6"
  rm -rf "$cache" "$work/wheels-tree" "$work/wheels-tree.tar.gz" "$work/wheels-ours" "$work/wheels-base"
}

# --- compress --------------------------------------------------------------------------------
section_compress() {
  local tree=$work/tree unpacked=0 total
  if [[ -z $layout ]]; then
    # No build section: build the image first, not timed, in $STACKBUILD_CACHE when the caller
    # names one, else in a fresh cache.
    timed - "build-for-compress" "$stackbuild" "$recipe" --locked --cache-dir "${STACKBUILD_CACHE:-$work/cache}" \
      --out "$work/ours" "${source_args[@]}"
    layout=$work/ours
    python3 "$helper" layout "$layout" >"$work/layout.json"
  fi
  mkdir -p "$tree"
  log "unpacking the image into $tree"
  local blob
  while read -r blob; do
    # GNU tar's --totals: the bytes of the uncompressed layer tar.
    total=$(pigz -dc "$blob" | tar -x -C "$tree" --totals -f - 2>&1 | sed -n 's/^Total bytes read: \([0-9]*\).*/\1/p')
    unpacked=$((unpacked + ${total:-0}))
  done < <(json '"\n".join(l["path"] for l in v["layers"])' <"$work/layout.json")
  local input
  input=$(find "$tree" -type f -printf '%s\n' | awk '{ n += $1 } END { printf "%.0f", n }')
  if [[ -n $docker_unpacked ]]; then
    row build "image, unpacked" "$(bytes "$unpacked")" "$(bytes "$docker_unpacked")" \
      "$(ratio "$unpacked" "$docker_unpacked")" "layer tars vs docker image inspect .Size"
  fi

  local cores t_pigz t_zstd j ours_s ours_b pigz_b zstd_b
  cores=$(nproc)
  # One untimed pass first, so that every timed pass reads the tree from the page cache.
  timed - "compress-warm-page-cache" tar_tree /dev/null cat

  timed - "compress-ours-gzip" "$pack_layer" pack "$tree" --cache "$work/pack-cache" --compression gzip
  j=$(tail -n 1 "$work/logs/compress-ours-gzip.log")
  ours_s=$(json 'v["seconds"]' <<<"$j")
  ours_b=$(json 'v["blob_bytes"]' <<<"$j")
  rm -rf "$work/pack-cache"
  timed t_pigz "compress-pigz" tar_tree "$work/pigz.tar.gz" pigz -p "$cores" -6
  pigz_b=$(file_size "$work/pigz.tar.gz")
  rm -f "$work/pigz.tar.gz"
  local what
  what="gzip layer of a $(bytes "$input") tree"
  row compress "$what, time" "$(secs "$ours_s") $(mbps "$input" "$ours_s")" \
    "$(secs "$t_pigz") $(mbps "$input" "$t_pigz")" "$(ratio "$ours_s" "$t_pigz")" \
    "tar | pigz -p$cores -6 on the unpacked image; ours also sorts, hashes diff_id and digest; target <= 0.3x"
  row compress "gzip layer, size" "$(bytes "$ours_b")" "$(bytes "$pigz_b")" "$(ratio "$ours_b" "$pigz_b")" ""

  timed - "compress-ours-zstd" "$pack_layer" pack "$tree" --cache "$work/pack-cache" --compression zstd
  j=$(tail -n 1 "$work/logs/compress-ours-zstd.log")
  ours_s=$(json 'v["seconds"]' <<<"$j")
  ours_b=$(json 'v["blob_bytes"]' <<<"$j")
  rm -rf "$work/pack-cache"
  timed t_zstd "compress-zstd" tar_tree "$work/tree.tar.zst" zstd -3 -T"$cores" -q -c
  zstd_b=$(file_size "$work/tree.tar.zst")
  rm -f "$work/tree.tar.zst"
  row compress "zstd layer of the same tree, time" "$(secs "$ours_s") $(mbps "$input" "$ours_s")" \
    "$(secs "$t_zstd") $(mbps "$input" "$t_zstd")" "$(ratio "$ours_s" "$t_zstd")" "tar | zstd -3 -T$cores"
  row compress "zstd layer, size" "$(bytes "$ours_b")" "$(bytes "$zstd_b")" "$(ratio "$ours_b" "$zstd_b")" ""
  rm -rf "$tree"
}

# --- start -----------------------------------------------------------------------------------
# start_bundle DIR ARGS_JSON: points DIR's config.json at DIR/merged, writable, running ARGS.
start_bundle() {
  python3 - "$1/config.json" "$1/merged" "$2" <<'PY'
import json, sys
path, root, args = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
with open(path) as f:
    c = json.load(f)
c["root"] = {"path": root, "readonly": False}
c["process"]["terminal"] = False
c["process"]["args"] = args
with open(path, "w") as f:
    json.dump(c, f, indent=1)
PY
}
# start_once DIR ID: one first start of a fresh container of DIR (an overlay on DIR/rootfs with an
# empty upper layer); prints the seconds from `runc run` to its exit and the .pyc it wrote.
start_once() {
  local dir=$1 id=$2 t0 t1 rc=0 written
  rm -rf "$dir/upper" "$dir/work" && mkdir -p "$dir/upper" "$dir/work" "$dir/merged"
  mount -t overlay overlay -o "lowerdir=$dir/rootfs,upperdir=$dir/upper,workdir=$dir/work" "$dir/merged"
  t0=$(now_ns)
  "$runc_bin" run --bundle "$dir" "$id" >>"$work/logs/start.log" 2>&1 || rc=$?
  t1=$(now_ns)
  "$runc_bin" delete --force "$id" >/dev/null 2>&1 || true
  umount "$dir/merged"
  ((rc == 0)) || die "runc run in $dir failed (logs/start.log)"
  written=$(find "$dir/upper" -name '*.pyc' | wc -l)
  awk -v a="$t0" -v b="$t1" -v w="$written" 'BEGIN { printf "%.4f %d\n", (b - a) / 1e9, w }'
}
# The modules a first start imports: --imports, else the recipe's [python] packages.
import_modules() {
  if [[ -n $imports ]]; then echo "$imports"; return; fi
  python3 -c 'import sys, tomllib, re
r = tomllib.load(open(sys.argv[1], "rb"))
print(",".join(re.split("[<>=!~ ;\\[]", p, maxsplit=1)[0].lower().replace("-", "_") for p in r.get("python", {}).get("packages", [])))' "$recipe"
}
section_start() {
  if [[ -z $layout ]] || ! "$DOCKER" image inspect "$tag:cold" >/dev/null 2>&1; then
    row start "first start" "skipped" "" "" "needs the build section (our image and the Dockerfile image)"
    return
  fi
  command -v umoci >/dev/null || { row start "first start" "skipped" "" "" "umoci is not installed"; return; }
  local mods ref ours=$work/start-ours theirs=$work/start-docker cid
  mods=$(import_modules)
  [[ -n $mods ]] || { row start "first start" "skipped" "" "" "the recipe has no [python] packages to import"; return; }
  ref=$(python3 -c 'import sys,tomllib; print(tomllib.load(open(sys.argv[1],"rb"))["image"].get("tag","latest"))' "$recipe")
  umoci unpack --image "$layout:$ref" "$ours" >"$work/logs/start-unpack.log" 2>&1 || die "umoci unpack failed"
  mkdir -p "$theirs/rootfs"
  cid=$("$DOCKER" create "$tag:cold" /bin/true)
  "$DOCKER" export "$cid" | tar -x -C "$theirs/rootfs"
  "$DOCKER" rm "$cid" >/dev/null
  "$runc_bin" spec --bundle "$theirs"
  local args
  args=$(python3 -c 'import json, sys; print(json.dumps(["python3", "-c", "import " + sys.argv[1]]))' "$mods")
  start_bundle "$ours" "$args"
  start_bundle "$theirs" "$args"
  log "first starts, $start_runs each, interleaved: import $mods"
  local i o d ot=() dt=() ow=0 dw=0
  for ((i = 0; i < start_runs; i++)); do
    read -r o w <<<"$(start_once "$ours" "$tag-start-ours-$i")"; ot+=("$o"); ((ow += w)) || true
    read -r d w <<<"$(start_once "$theirs" "$tag-start-docker-$i")"; dt+=("$d"); ((dw += w)) || true
  done
  local om dm pyc_bytes pyc_files
  om=$(printf '%s\n' "${ot[@]}" | sort -g | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }')
  dm=$(printf '%s\n' "${dt[@]}" | sort -g | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }')
  row start "runc run to end of imports, first start, median" "$(secs "$om")" "$(secs "$dm")" \
    "$(ratio "$om" "$dm")" "Dockerfile image (pip); import $mods; $start_runs runs each; target <= 1.0x"
  row start ".pyc written at first start, all runs" "$ow" "$dw" "" \
    "found in the containers' upper layers; ours should write none"
  pyc_files=$(json 'sum((l.get("bytecode") or {}).get("files", 0) for l in v["layers"])' <"$work/cold.json")
  pyc_bytes=$(json 'sum((l.get("bytecode") or {}).get("bytes", 0) for l in v["layers"])' <"$work/cold.json")
  row start "bytecode in our image (uncompressed)" "$(bytes "$pyc_bytes")" "" "" "$pyc_files .pyc, hash-based"
  rm -rf "$ours" "$theirs"
}

# --- hook ------------------------------------------------------------------------------------
section_hook() {
  local host=$work/host requires=() env=() i=0 r
  log "fixture host (8 GPUs)"
  "$fixture_host" "$host" >"$work/requires.txt" 2>"$work/logs/fixture.log" \
    || { cat "$work/logs/fixture.log" >&2; die "fixture host failed"; }
  mapfile -t requires <"$work/requires.txt"
  env=(--env NVIDIA_VISIBLE_DEVICES=all)
  for r in "${requires[@]}"; do env+=(--env "STACKBUILD_REQUIRE_BENCH$i=$r"); i=$((i + 1)); done
  local hook_env=(--hook-env PATH=/usr/sbin:/usr/bin:/sbin:/bin --hook-env "STACKHOOK_HOST_ROOT=$host"
    --hook-env STACKHOOK_POLICY=enforce)

  # Bundles: busybox `true`, requesting all GPUs (the hook probes the fixture host), without and
  # with the hook; and one requesting no GPU (the hook's early exit).
  local b
  for b in plain hooked truehook nogpu; do
    mkdir -p "$work/$b/rootfs/bin"
    cp /bin/busybox "$work/$b/rootfs/bin/busybox"
    "$runc_bin" spec --bundle "$work/$b"
  done
  python3 "$helper" bundle --dir "$work/plain" --args /bin/busybox true "${env[@]}"
  python3 "$helper" bundle --dir "$work/hooked" --args /bin/busybox true "${env[@]}" \
    --hook "$stackhook" "${hook_env[@]}"
  # The same hook entry running /bin/true: what runc's hook mechanism costs by itself.
  python3 "$helper" bundle --dir "$work/truehook" --args /bin/busybox true "${env[@]}" \
    --hook /bin/true "${hook_env[@]}"
  python3 "$helper" bundle --dir "$work/nogpu" --args /bin/busybox true
  printf '{"ociVersion":"1.0.2","id":"bench","status":"creating","pid":1,"bundle":"%s"}' \
    "$work/hooked" >"$work/state.json"
  printf '{"ociVersion":"1.0.2","id":"bench","status":"creating","pid":1,"bundle":"%s"}' \
    "$work/nogpu" >"$work/state-nogpu.json"

  # The hook must allow the container: timing a refusal would measure something else.
  if ! env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin "STACKHOOK_HOST_ROOT=$host" STACKHOOK_POLICY=enforce \
    "$stackhook" hook <"$work/state.json" >"$work/logs/hook-check.log" 2>&1; then
    cat "$work/logs/hook-check.log" >&2
    die "stackhook blocked the fixture host's container"
  fi

  local path_env=PATH=/usr/sbin:/usr/bin:/sbin:/bin
  local henv=(--env "$path_env" --env "STACKHOOK_HOST_ROOT=$host" --env STACKHOOK_POLICY=enforce)
  {
    python3 "$helper" case --name true --stdin "$work/state.json" -- /bin/true
    python3 "$helper" case --name hook --stdin "$work/state.json" "${henv[@]}" -- "$stackhook" hook
    python3 "$helper" case --name nogpu --stdin "$work/state-nogpu.json" "${henv[@]}" -- "$stackhook" hook
  } >"$work/hook-cases.jsonl"
  local times
  log "hook invocation, $hook_runs runs each, interleaved"
  times=$(python3 "$helper" spawn-times --runs "$hook_runs" --warmup $((hook_runs / 10 + 1)) \
    --spec "$work/hook-cases.jsonl")
  [[ $(json 'v["hook"]["failures"] + v["nogpu"]["failures"]' <<<"$times") == 0 ]] \
    || die "stackhook hook failed during the timing runs"
  local t50 t95 h50 h95 n50
  t50=$(json 'v["true"]["median_ms"]' <<<"$times")
  t95=$(json 'v["true"]["p95_ms"]' <<<"$times")
  h50=$(json 'v["hook"]["median_ms"]' <<<"$times")
  h95=$(json 'v["hook"]["p95_ms"]' <<<"$times")
  n50=$(json 'v["nogpu"]["median_ms"]' <<<"$times")
  row hook "hook invocation, 8-GPU fixture, median" "$(ms "$h50")" "$(ms "$t50")" "$(ratio "$h50" "$t50")" \
    "/bin/true, same stdin; $hook_runs runs each, interleaved; target < 2 ms and <= 3x"
  row hook "hook invocation, 8-GPU fixture, p95" "$(ms "$h95")" "$(ms "$t95")" "$(ratio "$h95" "$t95")" ""
  row hook "hook invocation, no GPU requested, median" "$(ms "$n50")" "$(ms "$t50")" "$(ratio "$n50" "$t50")" \
    "exits before probing"

  log "runc run, $runc_runs runs each, interleaved"
  {
    python3 "$helper" case --name plain --env "$path_env" -- "$runc_bin" run --bundle "$work/plain" "$tag-plain-{i}"
    python3 "$helper" case --name hooked --env "$path_env" -- "$runc_bin" run --bundle "$work/hooked" "$tag-hooked-{i}"
    python3 "$helper" case --name truehook --env "$path_env" -- "$runc_bin" run --bundle "$work/truehook" "$tag-truehook-{i}"
  } >"$work/runc-cases.jsonl"
  times=$(python3 "$helper" spawn-times --runs "$runc_runs" --warmup 2 --spec "$work/runc-cases.jsonl")
  [[ $(json 'v["plain"]["failures"]' <<<"$times") == 0 ]] || die "runc run (no hook) failed"
  [[ $(json 'v["hooked"]["failures"]' <<<"$times") == 0 ]] || die "runc run (with the hook) failed"
  [[ $(json 'v["truehook"]["failures"]' <<<"$times") == 0 ]] || die "runc run (/bin/true as the hook) failed"
  local p50 k50 p95 k95 t50h
  p50=$(json 'v["plain"]["median_ms"]' <<<"$times")
  k50=$(json 'v["hooked"]["median_ms"]' <<<"$times")
  p95=$(json 'v["plain"]["p95_ms"]' <<<"$times")
  k95=$(json 'v["hooked"]["p95_ms"]' <<<"$times")
  row hook "runc run busybox, median" "$(ms "$k50")" "$(ms "$p50")" "$(ratio "$k50" "$p50")" \
    "with the hook (createRuntime) vs without: $(awk -v a="$k50" -v b="$p50" 'BEGIN { printf "%+.1f%% (%+.2f ms)", (a / b - 1) * 100, a - b }')"
  row hook "runc run busybox, p95" "$(ms "$k95")" "$(ms "$p95")" "$(ratio "$k95" "$p95")" ""
  t50h=$(json 'v["truehook"]["median_ms"]' <<<"$times")
  row hook "runc run, stackhook vs /bin/true as hook" "$(ms "$k50")" "$(ms "$t50h")" "$(ratio "$k50" "$t50h")" \
    "same hook entry; what the hook itself adds: $(awk -v a="$k50" -v b="$t50h" 'BEGIN { printf "%+.1f%% (%+.2f ms)", (a / b - 1) * 100, a - b }')"
}

# --- node ------------------------------------------------------------------------------------
# A GPU node's view: the image pushed to a registry, then pulled by a fresh containerd behind a
# link of fixed speed, unpacked, and started to the end of its imports. The link is a veth pair
# the bench makes between the host and a network namespace of its own, its host end shaped with
# `tc ... tbf` (the registry -> node direction); the registry (Debian's docker-registry) listens
# on the host end's address only, containerd and ctr run inside the namespace. Nothing outside
# this machine is touched; all of it is removed at exit.
node_ns="" node_link="" node_registry_pid="" node_containerd_pid="" node_stargz_pid="" node_out=""
# The stargz snapshotter's daemon (tests/stargz/build.sh, which .ci/install runs).
stargz_grpc=${STACKBUILD_STARGZ_GRPC:-$repo/target/tools/containerd-stargz-grpc}
# node_umount DIR: every mount under DIR undone, deepest first.
node_umount() {
  awk -v d="$1" '$2 ~ "^" d { print $2 }' /proc/mounts | sort -r | while read -r m; do umount -l "$m" 2>/dev/null || true; done
}
# node_timeline LOG [--mark NAME=TEXT]... -- PROGRAM ARG...: helper.py's timeline of the
# program (its output to LOG), printed as JSON; the end of LOG and an error when it fails.
node_timeline() {
  local log=$1 j
  shift
  j=$(python3 "$helper" timeline --log "$log" "$@")
  [[ $(json 'v["exit"]' <<<"$j") == 0 ]] || { tail -n 20 "$log" >&2; die "$(basename "$log" .log) failed (see $log)"; }
  printf '%s\n' "$j"
}
node_stop_containerd() {
  [[ -n $node_containerd_pid ]] || return 0
  kill "$node_containerd_pid" 2>/dev/null || true
  local i
  for ((i = 0; i < 100; i++)); do kill -0 "$node_containerd_pid" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$node_containerd_pid" 2>/dev/null || true
  wait "$node_containerd_pid" 2>/dev/null || true
  node_containerd_pid=""
  if [[ -n $node_stargz_pid ]]; then
    # SIGTERM: the snapshotter unmounts its FUSE layers as it closes.
    kill "$node_stargz_pid" 2>/dev/null || true
    for ((i = 0; i < 100; i++)); do kill -0 "$node_stargz_pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$node_stargz_pid" 2>/dev/null || true
    wait "$node_stargz_pid" 2>/dev/null || true
    node_stargz_pid=""
  fi
  # Shims outlive their daemon: theirs end with their container (ctr run --rm), and any mount a
  # killed run left is undone before the root goes.
  node_umount "$work/node-c"
}
node_cleanup() {
  node_stop_containerd
  node_umount "$work/node-p"
  [[ -z $node_registry_pid ]] || { kill "$node_registry_pid" 2>/dev/null || true; wait "$node_registry_pid" 2>/dev/null || true; }
  [[ -z $node_link ]] || ip link del "$node_link" 2>/dev/null || true
  [[ -z $node_ns ]] || ip netns del "$node_ns" 2>/dev/null || true
  node_registry_pid="" node_link="" node_ns=""
}
# node_shape RATE: the registry -> node direction of the link shaped to RATE (tc's units), with
# a bucket of 10 ms at the rate: tbf needs at least one timer tick's worth.
node_shape() {
  local burst
  burst=$(awk -v r="$1" 'BEGIN { sub(/gbit$/, "", r); printf "%d", r * 1e9 / 8 / 100 }')
  tc qdisc replace dev "$node_link" root tbf rate "$1" burst "$burst" latency 100ms
}
# node_round HOW NAME REF RATE MODULES: a fresh containerd root in the namespace pulls REF and
# runs `python3 -c "import MODULES"` in it; sets node_out to "pull_s unpack_from_s start_s" (no
# subshell, so that the daemon it starts is the one cleanup knows). HOW is the pull's path:
# - ctr: `ctr images pull`. ctr 1.6 fetches every layer first and only then unpacks them (its
#   help: "1. Fetch all resources into containerd. 2. Prepare the snapshot filesystem"), the
#   worst case for an image of many layers; unpack_from_s is when its "unpacking" line came.
# - cri: the kubelet's path, PullImage on the CRI plugin's socket (target/release/cri pull), with the
#   plugin's defaults (3 downloads at once): each layer is applied as soon as it and the layers
#   below it are in (containerd 1.6's unpacker.go), so the unpack overlaps the download;
#   unpack_from_s is not known (the pull's whole time is given).
# - stargz: the same CRI pull, with the stargz snapshotter as the CRI plugin's snapshotter (its
#   daemon in the namespace too, reading the registry itself): an eStargz image is mounted over
#   FUSE from the registry, nothing is unpacked, and the first start fetches each chunk its
#   imports read (and the daemon fetches the rest in the background, its default).
node_round() {
  local how=$1 name=$2 ref=$3 rate=$4 mods=$5 dir=$work/node-c ns=bench
  node_shape "$rate"
  rm -rf "$dir" && mkdir -p "$dir"
  local plugins='disabled_plugins = ["io.containerd.grpc.v1.cri"]' snap=()
  if [[ $how == cri || $how == stargz ]]; then
    # Pods' images live in k8s.io; the registry is plain HTTP (a mirror entry says so, as a
    # node's configuration for an internal registry does); no CNI: nothing here starts a pod.
    ns=k8s.io
    mkdir -p "$dir/cni-bin" "$dir/cni-conf"
    plugins=$(printf '[plugins."io.containerd.grpc.v1.cri"]\n  [plugins."io.containerd.grpc.v1.cri".cni]\n    bin_dir = "%s"\n    conf_dir = "%s"\n  [plugins."io.containerd.grpc.v1.cri".registry.mirrors."%s"]\n    endpoint = ["http://%s"]' \
      "$dir/cni-bin" "$dir/cni-conf" "${ref%%/*}" "${ref%%/*}")
  fi
  if [[ $how == stargz ]]; then
    # The layers' annotations go to the snapshotter (disable_snapshot_annotations = false), which
    # reads the plain-HTTP registry as the mirror entry says.
    printf '[[resolver.host."%s".mirrors]]\nhost = "%s"\ninsecure = true\n' "${ref%%/*}" "${ref%%/*}" >"$dir/stargz.toml"
    plugins+=$(printf '\n  [plugins."io.containerd.grpc.v1.cri".containerd]\n    snapshotter = "stargz"\n    disable_snapshot_annotations = false\n[proxy_plugins]\n  [proxy_plugins.stargz]\n    type = "snapshot"\n    address = "%s"' "$dir/stargz.sock")
    nsenter --net="/run/netns/$node_ns" "$stargz_grpc" -address "$dir/stargz.sock" -root "$dir/stargz-root" \
      -config "$dir/stargz.toml" >"$work/logs/node-stargz-$name-$rate.log" 2>&1 &
    node_stargz_pid=$!
    local w
    for ((w = 0; w < 100; w++)); do [[ -S $dir/stargz.sock ]] && break; sleep 0.1; done
    [[ -S $dir/stargz.sock ]] || die "the stargz snapshotter did not start (logs/node-stargz-$name-$rate.log)"
    snap=(--snapshotter stargz)
  fi
  cat >"$dir/config.toml" <<TOML
version = 2
root = "$dir/root"
state = "$dir/state"
[grpc]
  address = "$dir/c.sock"
[ttrpc]
  address = "$dir/c.sock.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""
$plugins
TOML
  nsenter --net="/run/netns/$node_ns" containerd --config "$dir/config.toml" >"$work/logs/node-containerd-$how-$name-$rate.log" 2>&1 &
  node_containerd_pid=$!
  local i ctr=(nsenter --net="/run/netns/$node_ns" ctr --address "$dir/c.sock" --namespace "$ns")
  for ((i = 0; i < 100; i++)); do "${ctr[@]}" version >/dev/null 2>&1 && break; sleep 0.1; done
  "${ctr[@]}" version >/dev/null 2>&1 || die "containerd in $node_ns did not start (logs/node-containerd-$how-$name-$rate.log)"
  # Start from cold memory too: the registry's blobs and nothing else of the image in the page cache.
  sync
  local j pull unpack start
  log "node: $how pull $name at $rate"
  if [[ $how == cri || $how == stargz ]]; then
    j=$(node_timeline "$work/logs/node-$how-pull-$name-$rate.log" -- \
      "$cri" pull "$dir/c.sock" "$ref") || exit 1
  else
    j=$(node_timeline "$work/logs/node-pull-$name-$rate.log" --mark unpack=unpacking -- \
      "${ctr[@]}" images pull --plain-http "$ref") || exit 1
  fi
  pull=$(json 'v["seconds"]' <<<"$j")
  unpack=$(json 'v["marks"].get("unpack", v["seconds"])' <<<"$j")
  log "node: first start of $name"
  j=$(node_timeline "$work/logs/node-start-$how-$name-$rate.log" -- \
    "${ctr[@]}" run --rm "${snap[@]}" "$ref" "$tag-node-$name" python3 -c "import $mods") || exit 1
  start=$(json 'v["seconds"]' <<<"$j")
  node_stop_containerd
  rm -rf "$dir"
  node_out="$pull $unpack $start"
}
# node_round_podman NAME REF RATE MODULES: the same with Podman on a storage root of its own
# (containers/storage, the library CRI-O pulls with): it downloads layers in parallel and
# commits each as soon as its blob and its parent are in (containers/image's
# storageImageDestination.queueOrCommit), so the unpack overlaps the download as on a CRI-O or
# containerd-CRI node. Its own registries.conf and storage.conf: nothing of this machine's
# configuration is read (storage.conf names the driver and both roots). Sets node_out to
# "pull_s start_s".
node_round_podman() {
  local name=$1 ref=$2 rate=$3 mods=$4 dir=$work/node-p
  node_shape "$rate"
  rm -rf "$dir" && mkdir -p "$dir"
  printf '[[registry]]\nlocation = "%s"\ninsecure = true\n' "${ref%%/*}" >"$dir/registries.conf"
  printf '[storage]\ndriver = "overlay"\nrunroot = "%s"\ngraphroot = "%s"\n' "$dir/run" "$dir/root" >"$dir/storage.conf"
  # runc, and no default ulimits: this machine's crun cannot set RLIMIT_NOFILE (as tests/cdi.rs).
  printf '[containers]\ndefault_ulimits = []\n[engine]\nruntime = "runc"\ncgroup_manager = "cgroupfs"\nevents_logger = "none"\n' >"$dir/containers.conf"
  local p=(nsenter --net="/run/netns/$node_ns" env CONTAINERS_REGISTRIES_CONF="$dir/registries.conf"
    CONTAINERS_STORAGE_CONF="$dir/storage.conf" CONTAINERS_CONF="$dir/containers.conf" podman)
  sync
  local j pull start
  log "node: podman pull $name at $rate"
  j=$(node_timeline "$work/logs/node-podman-pull-$name-$rate.log" -- "${p[@]}" pull --tls-verify=false "$ref") || exit 1
  pull=$(json 'v["seconds"]' <<<"$j")
  log "node: podman first start of $name"
  j=$(node_timeline "$work/logs/node-podman-start-$name-$rate.log" -- \
    "${p[@]}" run --rm --network none "$ref" python3 -c "import $mods") || exit 1
  start=$(json 'v["seconds"]' <<<"$j")
  node_umount "$dir"
  rm -rf "$dir"
  node_out="$pull $start"
}
# node_ours HOW RATE MODULES: node_round HOW of our gzip and our zstd image (on section_node's
# registry); sets node_gzip and node_zstd to their node_out.
node_gzip="" node_zstd=""
node_ours() {
  node_round "$1" ours-gzip "$reg/ours:gzip" "$2" "$3"
  node_gzip=$node_out
  node_round "$1" ours-zstd "$reg/ours:zstd" "$2" "$3"
  node_zstd=$node_out
}
# Bytes the node registry has sent so far (distribution logs http.response.written per request).
registry_served() {
  # %.0f, not %d: mawk's %d stops at 2^31 - 1 (2 GB), and the pulls before a lazy round already
  # sent more, so the difference read 0.
  grep -o 'http\.response\.written=[0-9]*' "$work/logs/node-registry.log" 2>/dev/null | awk -F= '{ s += $2 } END { printf "%.0f", s }'
}
# link_floor BYTES RATE: seconds to carry BYTES over a link of RATE (tc's NNgbit).
link_floor() { awk -v b="$1" -v r="${2%gbit}" 'BEGIN { printf "%.4f", b * 8 / (r * 1e9) }'; }
# The compressed bytes of REF's layers, from the registry's manifest.
node_image_bytes() {
  skopeo inspect --tls-verify=false --raw "docker://$1" | json 'sum(l["size"] for l in v["layers"])'
}
section_node() {
  if [[ -z $layout ]] || ! "$DOCKER" image inspect "$tag:cold" >/dev/null 2>&1; then
    row node "node ready" "skipped" "" "" "needs the build section (our image and the Dockerfile image)"
    return
  fi
  local t
  for t in containerd ctr ip tc docker-registry skopeo; do
    command -v "$t" >/dev/null || { row node "node ready" "skipped" "" "" "$t is not installed"; return; }
  done
  local mods
  mods=$(import_modules)
  [[ -n $mods ]] || { row node "node ready" "skipped" "" "" "the recipe has no [python] packages to import"; return; }
  # A /30 of its own in 10.231.0.0/16, from the PID; refused if the machine already uses it.
  local net=10.231.$(($$ % 250 + 1)) port=5116
  ip -o addr show | grep -q " $net\." && die "10.231.$(($$ % 250 + 1)).0/30 is in use on this machine"
  node_ns=$tag-node node_link=sbh$$
  ip netns add "$node_ns"
  ip link add "$node_link" type veth peer name "sbn$$"
  ip link set "sbn$$" netns "$node_ns"
  ip addr add "$net.1/30" dev "$node_link"
  ip link set "$node_link" up
  ip netns exec "$node_ns" ip addr add "$net.2/30" dev "sbn$$"
  ip netns exec "$node_ns" ip link set "sbn$$" up
  ip netns exec "$node_ns" ip link set lo up
  mkdir -p "$work/node-registry"
  cat >"$work/node-registry.yml" <<YML
version: 0.1
storage:
  filesystem:
    rootdirectory: $work/node-registry
http:
  addr: $net.1:$port
YML
  docker-registry serve "$work/node-registry.yml" >"$work/logs/node-registry.log" 2>&1 &
  node_registry_pid=$!
  local i
  for ((i = 0; i < 100; i++)); do (exec 3<>"/dev/tcp/$net.1/$port") 2>/dev/null && break; sleep 0.1; done
  local reg=$net.1:$port ref
  ref=$(python3 -c 'import sys,tomllib; print(tomllib.load(open(sys.argv[1],"rb"))["image"].get("tag","latest"))' "$recipe")

  # Push, untimed: ours as built (gzip), ours again with zstd layers (built from the same cache),
  # and the Dockerfile image (skopeo compresses its layers with gzip, as `docker push` does).
  # Ours with --preserve-digests: containers/image otherwise reuses any blob of the same
  # uncompressed content it knows to be in the registry already (its blob info cache, fed by
  # earlier pushes and Podman's pulls; containers/image#1089), and the zstd image went up as
  # the gzip image's layers (skopeo 1.9.3 on a fresh registry: 26 of 27 layers gzip).
  timed - "node-push-ours-gzip" skopeo copy --preserve-digests --dest-tls-verify=false "oci:$layout:$ref" "docker://$reg/ours:gzip"
  # STACKBUILD_BENCH_NODE_PATHS: the pull paths measured (default all of them). The lazy ones:
  # stargz (eStargz layers) and zstdchunked (zstd:chunked layers), both with the stargz snapshotter.
  local paths=" ${STACKBUILD_BENCH_NODE_PATHS:-ctr cri podman stargz zstdchunked} " b_estargz="" b_chunked="" b_zstd=""
  # The zstd image only for the paths that pull it (its layers are another copy of the stack in
  # the cache and in the registry: 5 GB each for the real DreamZero stack).
  if [[ $paths == *" ctr "* || $paths == *" cri "* || $paths == *" podman "* ]]; then
    timed - "node-build-ours-zstd" "$stackbuild" "$recipe" --locked --cache-dir "$work/cache" \
      --out "$work/ours-zstd" --compression zstd "${source_args[@]}"
    timed - "node-push-ours-zstd" skopeo copy --preserve-digests --dest-tls-verify=false "oci:$work/ours-zstd:$ref" "docker://$reg/ours:zstd"
    rm -rf "$work/ours-zstd"
    b_zstd=$(node_image_bytes "$reg/ours:zstd")
  fi
  local lazy
  for lazy in stargz zstdchunked; do
    if [[ $paths == *" $lazy "* ]] && { [[ ! -x $stargz_grpc ]] || [[ ! -e /dev/fuse ]]; }; then
      row node "ready, $lazy path, stargz snapshotter" "skipped" "" "" "needs /dev/fuse and $stargz_grpc (tests/stargz/build.sh)"
      paths=${paths/ $lazy / }
    fi
  done
  if [[ $paths == *" stargz "* ]]; then
    timed - "node-build-ours-estargz" "$stackbuild" "$recipe" --locked --cache-dir "$work/cache" \
      --out "$work/ours-estargz" --compression estargz "${source_args[@]}"
    timed - "node-push-ours-estargz" skopeo copy --preserve-digests --dest-tls-verify=false "oci:$work/ours-estargz:$ref" "docker://$reg/ours:estargz"
    rm -rf "$work/ours-estargz"
    b_estargz=$(node_image_bytes "$reg/ours:estargz")
  fi
  if [[ $paths == *" zstdchunked "* ]]; then
    timed - "node-build-ours-zstd-chunked" "$stackbuild" "$recipe" --locked --cache-dir "$work/cache" \
      --out "$work/ours-zstd-chunked" --compression zstd:chunked "${source_args[@]}"
    timed - "node-push-ours-zstd-chunked" skopeo copy --preserve-digests --dest-tls-verify=false "oci:$work/ours-zstd-chunked:$ref" "docker://$reg/ours:zstd-chunked"
    rm -rf "$work/ours-zstd-chunked"
    b_chunked=$(node_image_bytes "$reg/ours:zstd-chunked")
  fi
  timed - "node-push-docker" skopeo copy --dest-tls-verify=false "docker-daemon:$tag:cold" "docker://$reg/docker:cold"
  # Nothing after this section reads the daemon's copy: its disk goes to the nodes' roots.
  "$DOCKER" rmi -f "$tag:cold" >/dev/null 2>&1 || true
  local b_docker b_gzip
  b_docker=$(node_image_bytes "$reg/docker:cold")
  b_gzip=$(node_image_bytes "$reg/ours:gzip")

  local rate pd ud sd pg ug sg pz uz sz
  # STACKBUILD_BENCH_NODE_RATES: the link speeds, tc's units (default both).
  for rate in ${STACKBUILD_BENCH_NODE_RATES:-1gbit 10gbit}; do
    [[ $rate =~ ^[0-9]+gbit$ ]] || die "STACKBUILD_BENCH_NODE_RATES: $rate is not NNgbit"
    local rd rg rz label=${rate/gbit/ Gbit\/s}
    if [[ $paths == *" ctr "* ]]; then
      node_round ctr docker "$reg/docker:cold" "$rate" "$mods"
      read -r pd ud sd <<<"$node_out"
      node_ours ctr "$rate" "$mods"
      read -r pg ug sg <<<"$node_gzip"
      read -r pz uz sz <<<"$node_zstd"
      rd=$(add "$pd" "$sd") rg=$(add "$pg" "$sg") rz=$(add "$pz" "$sz")
      row node "ready at $label, gzip layers" "$(secs "$rg")" "$(secs "$rd")" "$(ratio "$rg" "$rd")" \
        "ctr pull (fetch, then unpack): pull+unpack $(secs "$pg") vs $(secs "$pd") (unpacking from $(secs "$ug") vs $(secs "$ud")), start to end of imports $(secs "$sg") vs $(secs "$sd"); docker-built image; target <= 0.6x at 1 Gbit/s"
      row node "ready at $label, zstd layers" "$(secs "$rz")" "$(secs "$rd")" "$(ratio "$rz" "$rd")" \
        "pull+unpack $(secs "$pz") (unpacking from $(secs "$uz")), start $(secs "$sz")"
    fi
    local pc="" sc=""
    if [[ $paths == *" cri "* || $paths == *" stargz "* || $paths == *" zstdchunked "* ]]; then
      node_round cri docker "$reg/docker:cold" "$rate" "$mods"
      read -r pc _ sc <<<"$node_out"
    fi
    if [[ $paths == *" cri "* ]]; then
      pd=$pc sd=$sc
      node_ours cri "$rate" "$mods"
      read -r pg _ sg <<<"$node_gzip"
      read -r pz _ sz <<<"$node_zstd"
      rd=$(add "$pd" "$sd") rg=$(add "$pg" "$sg") rz=$(add "$pz" "$sz")
      row node "ready at $label, gzip layers, CRI" "$(secs "$rg")" "$(secs "$rd")" "$(ratio "$rg" "$rd")" \
        "containerd's CRI plugin, as the kubelet pulls (unpack overlaps the download): pull $(secs "$pg") vs $(secs "$pd"), start $(secs "$sg") vs $(secs "$sd"); docker-built image; target <= 0.6x at 1 Gbit/s"
      row node "ready at $label, zstd layers, CRI" "$(secs "$rz")" "$(secs "$rd")" "$(ratio "$rz" "$rd")" \
        "pull $(secs "$pz"), start $(secs "$sz")"
    fi
    if [[ $paths == *" stargz "* ]]; then
      local pe se re
      node_round stargz ours-estargz "$reg/ours:estargz" "$rate" "$mods"
      read -r pe _ se <<<"$node_out"
      rd=$(add "$pc" "$sc") re=$(add "$pe" "$se")
      row node "ready at $label, eStargz layers, CRI + stargz snapshotter" "$(secs "$re")" "$(secs "$rd")" "$(ratio "$re" "$rd")" \
        "lazy: the layers mounted from the registry, each chunk fetched as the imports read it: pull $(secs "$pe") vs $(secs "$pc"), start $(secs "$se") vs $(secs "$sc"); docker-built image through the CRI plugin and overlayfs; target <= 0.6x at 1 Gbit/s"
    fi
    if [[ $paths == *" zstdchunked "* ]]; then
      local pk sk rk served fetched
      served=$(registry_served)
      node_round stargz ours-zstd-chunked "$reg/ours:zstd-chunked" "$rate" "$mods"
      fetched=$(($(registry_served) - served))
      read -r pk _ sk <<<"$node_out"
      rd=$(add "$pc" "$sc") rk=$(add "$pk" "$sk")
      row node "ready at $label, zstd:chunked layers, CRI + stargz snapshotter" "$(secs "$rk")" "$(secs "$rd")" "$(ratio "$rk" "$rd")" \
        "lazy, zstd frames in place of gzip members: pull $(secs "$pk") vs $(secs "$pc"), start $(secs "$sk") vs $(secs "$sc"); docker-built image through the CRI plugin and overlayfs; transfer floor of the whole image $(secs "$(link_floor "$b_chunked" "$rate")") ($(bytes "$b_chunked") at $label), of the Docker image $(secs "$(link_floor "$b_docker" "$rate")"); fetched from the registry during pull and start: $(bytes "$fetched") ($(ratio "$fetched" "$b_chunked") of the image; the registry's http.response.written); target <= 0.45x at 1 Gbit/s"
    fi
    if [[ $paths != *" podman "* ]]; then
      :
    elif command -v podman >/dev/null; then
      node_round_podman docker "$reg/docker:cold" "$rate" "$mods"
      read -r pd sd <<<"$node_out"
      node_round_podman ours-gzip "$reg/ours:gzip" "$rate" "$mods"
      read -r pg sg <<<"$node_out"
      node_round_podman ours-zstd "$reg/ours:zstd" "$rate" "$mods"
      read -r pz sz <<<"$node_out"
      rd=$(add "$pd" "$sd") rg=$(add "$pg" "$sg") rz=$(add "$pz" "$sz")
      row node "ready at $label, gzip layers, Podman" "$(secs "$rg")" "$(secs "$rd")" "$(ratio "$rg" "$rd")" \
        "containers/storage as CRI-O (unpack overlaps the download): pull $(secs "$pg") vs $(secs "$pd"), start $(secs "$sg") vs $(secs "$sd"); docker-built image"
      row node "ready at $label, zstd layers, Podman" "$(secs "$rz")" "$(secs "$rd")" "$(ratio "$rz" "$rd")" \
        "pull $(secs "$pz"), start $(secs "$sz")"
    else
      row node "ready at $label, Podman" "skipped" "" "" "podman is not installed"
    fi
  done
  row node "image pushed, compressed" "$(bytes "$b_gzip") gzip${b_zstd:+, $(bytes "$b_zstd") zstd}${b_estargz:+, $(bytes "$b_estargz") eStargz}${b_chunked:+, $(bytes "$b_chunked") zstd:chunked}" "$(bytes "$b_docker")" \
    "$(ratio "$b_gzip" "$b_docker")" "layer bytes in the registry's manifests; ctr $(ctr --version | awk '{ print $3 }'), link: veth + tc tbf"
  node_cleanup
}

# --- cache-registry --------------------------------------------------------------------------
# Two build machines, each with an empty cache, sharing one registry repository as the layer
# cache: A builds everything and pushes it, B pulls it. Ours is B, the baseline A.
section_cache_registry() {
  local registry=${STACKBUILD_BENCH_REGISTRY:-127.0.0.1:${STACKBUILD_TEST_REGISTRY_PORT:-5115}}
  local cache_repo t_a t_b n_layers pulled built digest_a digest_b
  if ! (exec 3<>"/dev/tcp/${registry%:*}/${registry##*:}") 2>/dev/null; then
    log "no registry answering on $registry: starting one with .ci/services"
    "$repo/.ci/services" >&2
  fi
  # A repository of its own: the first machine finds nothing.
  cache_repo=$registry/stackbuild-bench/cache-$$-$(date +%s)
  timed t_a "cache-registry-machine-a" "$stackbuild" "$recipe" --locked --cache-dir "$work/cache-machine-a" \
    --out "$work/machine-a" --report "$work/machine-a.json" --cache-registry "$cache_repo" "${source_args[@]}"
  timed t_b "cache-registry-machine-b" "$stackbuild" "$recipe" --locked --cache-dir "$work/cache-machine-b" \
    --out "$work/machine-b" --report "$work/machine-b.json" --cache-registry "$cache_repo" "${source_args[@]}"
  digest_a=$(json 'v["manifest_digest"]' <"$work/machine-a.json")
  digest_b=$(json 'v["manifest_digest"]' <"$work/machine-b.json")
  [[ $digest_a == "$digest_b" ]] || die "machine B built $digest_b, machine A $digest_a: the shared cache changed the image"
  n_layers=$(json 'len(v["layers"])' <"$work/machine-a.json")
  pulled=$(json 'sum(l["source"] == "registry" for l in v["layers"])' <"$work/machine-b.json")
  built=$(json 'sum(l["built"] for l in v["layers"])' <"$work/machine-b.json")
  row cache-registry "cold build, empty cache, pushing (machine A)" "$(secs "$t_a")" "" "" \
    "$n_layers layers built and pushed to $cache_repo"
  row cache-registry "empty cache, pulling (machine B)" "$(secs "$t_b")" "$(secs "$t_a")" "$(ratio "$t_b" "$t_a")" \
    "baseline is machine A; $pulled of $n_layers layers pulled, $built built; same digest ${digest_b:0:19}"
}

# --- run and report --------------------------------------------------------------------------
started=$(date -u +%Y-%m-%dT%H:%M:%SZ)
load_start=$(cut -d' ' -f1-3 /proc/loadavg)
for s in build start node wheels compress hook cache-registry; do
  has_section "$s" || continue
  t0=$(now_ns)
  "section_${s//-/_}"
  section_times+=("$s $(awk -v a="$t0" -v b="$(now_ns)" 'BEGIN { printf "%.0f s", (b - a) / 1e9 }')")
done

first_line() { "$@" 2>&1 | head -n 1 || true; }
report() {
  local mem
  mem=$(awk '/^MemTotal:/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo)
  echo "stackbuild bench, $started (ratios are ours / baseline: below 1 is better)"
  echo "host:     $(nproc) cores, $mem, kernel $(uname -r), load average $load_start at start, $(cut -d' ' -f1-3 /proc/loadavg) at end"
  echo "recipe:   ${recipe_shown#"$repo"/} (change: $change_old -> $change_new), $( ((quick)) && echo quick || echo full) run"
  echo "commit:   $(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$repo" diff --quiet HEAD 2>/dev/null || echo ' (with local changes)')"
  echo "versions: $("$stackbuild" --version), $("$stackhook" --version | tr -d '\n') (static), docker $("$DOCKER" version -f '{{.Server.Version}}' 2>/dev/null || echo '?'), $(first_line "$runc_bin" --version), $(first_line pigz --version), $(first_line zstd --version | sed 's/^\*\*\* //; s/, by.*//'), $(first_line uv --version), $(first_line python3 --version), $(first_line tar --version)"
  local joined="" s
  for s in "${section_times[@]}"; do joined+=${joined:+, }$s; done
  echo "sections: $joined"
  echo
  local current="" line sec what ours base rat note
  printf '%-52s %-22s %-22s %-7s %s\n' "" "ours" "baseline" "ratio" "baseline is / notes"
  for line in "${rows[@]}"; do
    IFS=$'\x1f' read -r sec what ours base rat note <<<"$line"
    if [[ $sec != "$current" ]]; then echo "$sec"; current=$sec; fi
    printf '  %-50s %-22s %-22s %-7s %s\n' "$what" "$ours" "$base" "$rat" "$note"
  done
}
report | tee "${out_file:-/dev/null}"
