#!/usr/bin/env python3
"""The parts of bench/run.sh that want a real language: reading the recipe and its lock (TOML),
writing the Docker build context of "the usual way", and timing short process runs.

    helper.py context --recipe R --lock L --base IMAGE --out DIR [--source NAME=DIR]... [--ca FILE]
    helper.py change --recipe R --old PIN --new PIN --out PATH
    helper.py base-only --recipe R --out PATH
    helper.py case --name NAME [--stdin FILE] [--env K=V]... -- PROGRAM ARG...   (one JSON line)
    helper.py spawn-times --runs N [--warmup N] --spec CASES.jsonl
    helper.py layout LAYOUT
    helper.py bundle --dir BUNDLE --args ARG... [--env K=V]... [--hook PATH [--hook-env K=V]...]
    helper.py timeline --log FILE [--mark NAME=TEXT]... -- PROGRAM ARG...

Only the standard library (Python 3.11: tomllib), so it runs with Debian bookworm's python3.
"""

import argparse
import json
import math
import os
import re
import shutil
import sys
import time
import tomllib

# What the Dockerfile's patch step runs: the recipe's find/replace patches, each of which must
# match exactly `count` times, as stackbuild requires (a patch that does not apply fails).
PATCH_SCRIPT = """\
import json, sys
for p in json.load(open(sys.argv[1])):
    text = open(p["path"], encoding="utf-8").read()
    n = text.count(p["find"])
    if n != p["count"]:
        sys.exit(f"patch {p['name']}: {p['path']}: found {n} time(s), expected {p['count']}")
    open(p["path"], "w", encoding="utf-8").write(text.replace(p["find"], p["replace"]))
"""


def die(msg):
    print(f"helper.py: {msg}", file=sys.stderr)
    sys.exit(2)


def load_toml(path):
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError) as e:
        die(f"reading {path}: {e}")


def host_platform():
    machine = os.uname().machine
    return {"x86_64": "linux/amd64", "aarch64": "linux/arm64"}.get(machine, f"linux/{machine}")


def requirements(lock, platform, wheels_only=False):
    """`name==version --hash=sha256:...` for every locked file of `platform`, sorted by name.
    The recipe's own projects (`source`: built from the tree the context copies) are not
    index packages and are left out; with `wheels_only`, the sdists too."""
    lines = []
    for p in lock.get("package", []):
        if p.get("platform") != platform or "source" in p:
            continue
        if wheels_only and not p["filename"].endswith(".whl"):
            continue
        lines.append(f"{p['name']}=={p['version']} --hash=sha256:{p['sha256']}")
    if not lines:
        die(f"the lock has no package for {platform}")
    return sorted(lines)


def sdists(lock, platform):
    """The index packages of `platform` the lock takes from source distributions."""
    return [p["name"] for p in lock.get("package", [])
            if p.get("platform") == platform and "source" not in p and not p["filename"].endswith(".whl")]


def sources(recipe, recipe_dir, overrides):
    """(name, host dir, image dest) of every [[source]]: --source first, then `path`."""
    out = []
    for s in recipe.get("source", []):
        name = s["name"]
        if name in overrides:
            src = overrides[name]
        elif "path" in s:
            src = os.path.join(recipe_dir, s["path"])
        else:
            die(f"source {name} is a git source: give it as --source {name}=DIR")
        if not os.path.isdir(src):
            die(f"source {name}: {src} is not a directory")
        out.append((name, src, s["dest"]))
    return out


def patches(recipe, site_packages, dests):
    out = []
    for p in recipe.get("patch", []):
        if "diff" in p:
            die(f"patch {p['name']}: diff patches are not reproduced by the bench's Dockerfile")
        if "package" in p:
            path = f"{site_packages}/{p['file']}"
        else:
            path = f"{dests[p['source']]}/{p['file']}"
        out.append(
            {"name": p["name"], "path": path, "find": p["find"], "replace": p["replace"],
             "count": p.get("count", 1)}
        )
    return out


def cmd_context(args):
    recipe = load_toml(args.recipe)
    lock = load_toml(args.lock)
    overrides = dict(parse_pair(s, "--source") for s in args.source)
    image = recipe.get("image", {})
    python = recipe.get("python", {}).get("version")
    if not python:
        die("the recipe has no [python] version")
    site = f"/usr/local/lib/python{python}/dist-packages"
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "requirements.txt"), "w") as f:
        f.write("\n".join(requirements(lock, args.platform or host_platform())) + "\n")
    # The wheels alone: what an install into a directory takes without building anything.
    with open(os.path.join(args.out, "requirements-wheels.txt"), "w") as f:
        f.write("\n".join(requirements(lock, args.platform or host_platform(), wheels_only=True)) + "\n")
    srcs = sources(recipe, os.path.dirname(os.path.abspath(args.recipe)), overrides)
    pats = patches(recipe, site, {name: dest for name, _, dest in srcs})
    # The recipe's projects installed from their trees (`install = "wheel"`): the context's copies,
    # which `uv pip install --target` of the whole lock installs after the lock's packages.
    installed = {s["name"] for s in recipe.get("source", []) if s.get("install") == "wheel"}
    with open(os.path.join(args.out, "projects.txt"), "w") as f:
        f.write("".join(f"src-{name}\n" for name, _, _ in srcs if name in installed))

    # The usual way: the same base, pip from apt, one pip layer of the locked wheels (hashes
    # checked, no resolution, no cache), the sources, the patches, the image settings. With
    # --uv, the modern peer: the host's uv binary instead of pip (no apt step), same flags.
    df = [f"FROM {args.base}",
          "ARG PIP_INDEX_URL",
          "ARG PIP_EXTRA_INDEX_URL"]
    # Sdists in the lock (evdev's C extension): pip and uv build them in the image, which then
    # needs what our build root has, a C toolchain and the interpreter's headers, as any
    # Dockerfile installing such a lock does.
    apt = [] if args.uv else ["python3-pip"]
    if sdists(lock, args.platform or host_platform()):
        apt += ["build-essential", f"python{python}-dev"]
    if args.uv:
        shutil.copyfile(args.uv, os.path.join(args.out, "uv"))
        os.chmod(os.path.join(args.out, "uv"), 0o755)
        df.append("COPY uv /usr/local/bin/uv")
    if apt:
        df.append("RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y "
                  f"--no-install-recommends {' '.join(apt)} && rm -rf /var/lib/apt/lists/*")
    cert, uv_cert = "", ""
    if args.ca:
        # The host reaches the index through a TLS-intercepting proxy whose CA only the host's
        # bundle holds; the image's own bundle would refuse it.
        shutil.copyfile(args.ca, os.path.join(args.out, "host-ca.crt"))
        df.append("COPY host-ca.crt /tmp/host-ca.crt")
        # As pip's environment, not its --cert option: the pip that installs an sdist's build
        # requirements (an isolated build) is a subprocess that inherits the environment only.
        cert = "PIP_CERT=/tmp/host-ca.crt "
        uv_cert = "SSL_CERT_FILE=/tmp/host-ca.crt "
    df.append("COPY requirements.txt /tmp/requirements.txt")
    if args.uv:
        # uv reads its index from UV_INDEX_URL; the build passes pip's as PIP_INDEX_URL.
        df.append('RUN if [ -n "$PIP_INDEX_URL" ]; then export UV_INDEX_URL="$PIP_INDEX_URL"; fi; '
                  f"{uv_cert}uv pip install --system --break-system-packages --no-deps --require-hashes"
                  " --no-cache -r /tmp/requirements.txt")
    else:
        df.append(f"RUN {cert}pip install --no-deps --require-hashes --break-system-packages --no-cache-dir"
                  " --disable-pip-version-check -r /tmp/requirements.txt")
    for name, src, dest in srcs:
        shutil.copytree(src, os.path.join(args.out, f"src-{name}"), symlinks=True)
        df.append(f"COPY src-{name}/ {dest}/")
    if pats:
        with open(os.path.join(args.out, "patches.json"), "w") as f:
            json.dump(pats, f, indent=1)
        with open(os.path.join(args.out, "patch.py"), "w") as f:
            f.write(PATCH_SCRIPT)
        df.append("COPY patch.py patches.json /tmp/bench-patch/")
        df.append("RUN python3 /tmp/bench-patch/patch.py /tmp/bench-patch/patches.json"
                  " && rm -rf /tmp/bench-patch")
    for key, value in sorted(image.get("env", {}).items()):
        df.append(f"ENV {key}={json.dumps(value)}")
    if "workdir" in image:
        df.append(f"WORKDIR {image['workdir']}")
    if "user" in image:
        df.append(f"USER {image['user']}")
    if image.get("entrypoint"):
        df.append(f"ENTRYPOINT {json.dumps(image['entrypoint'])}")
    if "cmd" in image:
        df.append(f"CMD {json.dumps(image['cmd'])}")
    with open(os.path.join(args.out, "Dockerfile"), "w") as f:
        f.write("\n".join(df) + "\n")


def cmd_change(args):
    """Copies the recipe with one pin replaced: `"OLD"` must occur exactly once, quoted."""
    old, new = args.old, args.new
    with open(args.recipe, encoding="utf-8") as f:
        text = f.read()
    needle = f'"{old}"'
    n = text.count(needle)
    if n != 1:
        die(f'"{old}" occurs {n} time(s) in {args.recipe}, expected once (quoted, as a pin)')
    with open(args.out, "w", encoding="utf-8") as f:
        f.write(text.replace(needle, f'"{new}"'))


def cmd_base_only(args):
    """Copies the recipe's [image] and [base] tables only (text kept as written): the recipe of
    the base layer alone, whose layer key is the full recipe's, so that building it first in a
    fresh cache leaves exactly the base cached."""
    with open(args.recipe, encoding="utf-8") as f:
        lines = f.read().splitlines()
    kept, table = [], None
    for line in lines:
        m = re.match(r"^\s*\[\[?\s*([A-Za-z0-9_.-]+)\s*\]\]?\s*(#.*)?$", line)
        if m:
            table = m.group(1)
        if table in ("image", "base"):
            kept.append(line)
    text = "\n".join(kept) + "\n"
    # The text extraction must give exactly the two tables.
    full = load_toml(args.recipe)
    if tomllib.loads(text) != {"image": full.get("image"), "base": full.get("base")}:
        die(f"could not cut [image] and [base] out of {args.recipe}")
    with open(args.out, "w", encoding="utf-8") as f:
        f.write(text)


def percentile(sorted_times, q):
    return sorted_times[max(0, min(len(sorted_times) - 1, math.ceil(q * len(sorted_times)) - 1))]


def cmd_case(args):
    """Prints one case of `spawn-times` as a JSON line: name, argv, env, stdin file."""
    argv = args.argv[1:] if args.argv and args.argv[0] == "--" else args.argv
    if not argv or not os.path.isabs(argv[0]):
        die("case: give the program as an absolute path")
    print(json.dumps({"name": args.name, "argv": argv, "stdin": args.stdin,
                      "env": dict(parse_pair(e, "--env") for e in args.env)}))


def cmd_spawn_times(args):
    """Runs the cases of SPEC (JSON lines from `case`) --runs times each, interleaved (one run of
    each case in turn, so that a burst of load on a shared machine hits every case alike), with
    posix_spawn (what Rust's Command does): the stdin file written to a pipe, stdout/stderr to
    /dev/null, only the case's environment. `{i}` in an argument becomes the run number (unique
    container ids). Prints JSON: {name: {runs, median_ms, p95_ms, mean_ms, failures}}."""
    with open(args.spec) as f:
        cases = [json.loads(line) for line in f if line.strip()]
    for case in cases:
        case["state"] = b""
        if case.get("stdin"):
            with open(case["stdin"], "rb") as f:
                case["state"] = f.read()
        case["times"], case["failures"] = [], 0
    devnull = os.open(os.devnull, os.O_WRONLY)

    def once(case, i):
        r, w = os.pipe()
        actions = [(os.POSIX_SPAWN_DUP2, r, 0), (os.POSIX_SPAWN_DUP2, devnull, 1),
                   (os.POSIX_SPAWN_DUP2, devnull, 2), (os.POSIX_SPAWN_CLOSE, w)]
        argv = [a.replace("{i}", str(i)) for a in case["argv"]]
        start = time.perf_counter_ns()
        pid = os.posix_spawn(argv[0], argv, case["env"], file_actions=actions)
        os.close(r)
        try:
            os.write(w, case["state"])
        except BrokenPipeError:
            pass  # /bin/true may exit before reading
        os.close(w)
        _, status = os.waitpid(pid, 0)
        return (time.perf_counter_ns() - start) / 1e6, os.waitstatus_to_exitcode(status)

    for i in range(args.warmup):
        for case in cases:
            once(case, f"w{i}")
    for i in range(args.runs):
        for case in cases:
            t, code = once(case, i)
            case["times"].append(t)
            case["failures"] += code != 0
    out = {}
    for case in cases:
        times = sorted(case["times"])
        out[case["name"]] = {"runs": len(times), "median_ms": times[len(times) // 2],
                             "p95_ms": percentile(times, 0.95), "mean_ms": sum(times) / len(times),
                             "failures": case["failures"]}
    print(json.dumps(out))


def cmd_layout(args):
    """Facts of an OCI layout: total blob bytes, and the layers (digest, size) of its one image."""
    blobs = os.path.join(args.layout, "blobs", "sha256")
    total = sum(os.path.getsize(os.path.join(blobs, b)) for b in os.listdir(blobs))
    with open(os.path.join(args.layout, "index.json")) as f:
        index = json.load(f)
    manifest_digest = index["manifests"][0]["digest"].split(":", 1)[1]
    with open(os.path.join(blobs, manifest_digest)) as f:
        manifest = json.load(f)
    layers = [{"digest": layer["digest"], "size": layer["size"], "mediaType": layer["mediaType"],
               "path": os.path.join(blobs, layer["digest"].split(":", 1)[1])}
              for layer in manifest["layers"]]
    print(json.dumps({"blob_bytes": total, "layers": layers}))


def cmd_bundle(args):
    """Edits the config.json `runc spec` wrote: no terminal, the given process args, extra env,
    and optionally one hook at --hook-stage (its own explicit env, a timeout)."""
    path = os.path.join(args.dir, "config.json")
    with open(path) as f:
        config = json.load(f)
    config["process"]["terminal"] = False
    config["process"]["args"] = args.args
    config["process"]["env"] = config["process"].get("env", []) + args.env
    if args.hook:
        entry = {"path": args.hook, "args": [os.path.basename(args.hook), "hook"],
                 "env": args.hook_env, "timeout": 10}
        config.setdefault("hooks", {}).setdefault(args.hook_stage, []).append(entry)
    with open(path, "w") as f:
        json.dump(config, f, indent=1)


def cmd_timeline(args):
    """Runs PROGRAM with its output (stdout and stderr together) appended to --log, and prints
    JSON: {"seconds": wall time, "exit": code, "marks": {NAME: seconds to the first output line
    holding TEXT}}: where one command's phases start (ctr pull's "unpacking" line)."""
    import subprocess
    argv = args.argv[1:] if args.argv and args.argv[0] == "--" else args.argv
    if not argv:
        die("timeline: give a program")
    marks = dict(parse_pair(m, "--mark") for m in args.mark)
    seen = {}
    start = time.monotonic()
    with open(args.log, "ab") as log:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)
        # ctr redraws its progress with carriage returns: split on both.
        buf = b""
        while chunk := proc.stdout.read1(65536):
            log.write(chunk)
            buf += chunk
            *lines, buf = re.split(rb"[\r\n]", buf)
            now = time.monotonic() - start
            for line in lines:
                text = line.decode("utf-8", "replace")
                for name, needle in marks.items():
                    if name not in seen and needle in text:
                        seen[name] = now
        code = proc.wait()
    print(json.dumps({"seconds": time.monotonic() - start, "exit": code, "marks": seen}))


def parse_pair(text, flag):
    key, sep, value = text.partition("=")
    if not sep or not key:
        die(f"{flag} wants KEY=VALUE, got {text!r}")
    return key, value


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("context")
    c.add_argument("--recipe", required=True)
    c.add_argument("--lock", required=True)
    c.add_argument("--base", required=True)
    c.add_argument("--out", required=True)
    c.add_argument("--platform")
    c.add_argument("--source", action="append", default=[])
    c.add_argument("--ca")
    c.add_argument("--uv", help="install with this uv binary instead of pip")
    c.set_defaults(func=cmd_context)
    c = sub.add_parser("change")
    c.add_argument("--recipe", required=True)
    c.add_argument("--old", required=True)
    c.add_argument("--new", required=True)
    c.add_argument("--out", required=True)
    c.set_defaults(func=cmd_change)
    c = sub.add_parser("base-only")
    c.add_argument("--recipe", required=True)
    c.add_argument("--out", required=True)
    c.set_defaults(func=cmd_base_only)
    c = sub.add_parser("case")
    c.add_argument("--name", required=True)
    c.add_argument("--stdin")
    c.add_argument("--env", action="append", default=[])
    c.add_argument("argv", nargs=argparse.REMAINDER)
    c.set_defaults(func=cmd_case)
    c = sub.add_parser("spawn-times")
    c.add_argument("--runs", type=int, required=True)
    c.add_argument("--warmup", type=int, default=3)
    c.add_argument("--spec", required=True)
    c.set_defaults(func=cmd_spawn_times)
    c = sub.add_parser("layout")
    c.add_argument("layout")
    c.set_defaults(func=cmd_layout)
    c = sub.add_parser("bundle")
    c.add_argument("--dir", required=True)
    c.add_argument("--args", nargs="+", required=True)
    c.add_argument("--env", action="append", default=[])
    c.add_argument("--hook")
    c.add_argument("--hook-stage", default="createRuntime")
    c.add_argument("--hook-env", action="append", default=[])
    c.set_defaults(func=cmd_bundle)
    c = sub.add_parser("timeline")
    c.add_argument("--log", required=True)
    c.add_argument("--mark", action="append", default=[])
    c.add_argument("argv", nargs=argparse.REMAINDER)
    c.set_defaults(func=cmd_timeline)
    args = ap.parse_args()
    args.func(args)


if __name__ == "__main__":
    main()
