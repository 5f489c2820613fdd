#!/usr/bin/env python3
"""Write a stand-in wheel: the name, version, tags and Requires-Dist of a real wheel, no binaries.

Some recipes take a wheel no index reachable from the build machine carries (NVIDIA's JetPack
torch, PyTorch's CUDA 11.8 builds) as a `[[python.wheel]]` file. Where the real file cannot be
had, a stand-in with the same metadata lets the rest of the stack be resolved, locked, checked and
assembled; the module it installs says it is a stand-in and holds no code. The tests use it to
make small wheels of any tag.

    recipes/stand-in/make-wheel.py --name torch --version 2.1.2+cu118 \\
        --tag cp311-cp311-linux_x86_64 --requires 'nvidia-cudnn-cu11==8.7.0.84' --out recipes/wheels

Prints the wheel's path. The same arguments give the same bytes (fixed zip times and order).
"""

import argparse
import base64
import hashlib
import os
import re
import sys
import zipfile


def normalize(name: str) -> str:
    """PEP 427 escaping of the distribution name in file names."""
    return re.sub(r"[-_.]+", "_", name)


def record_line(member: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{member},sha256={digest},{len(data)}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--name", required=True, help="the project name (torch)")
    ap.add_argument("--version", required=True, help="the exact version (2.1.2+cu118)")
    ap.add_argument("--tag", default="py3-none-any", help="PYTHON-ABI-PLATFORM (cp311-cp311-linux_x86_64)")
    ap.add_argument("--requires", action="append", default=[], help="a Requires-Dist line; repeatable")
    ap.add_argument("--module", help="the top-level module to install [default: the name]")
    ap.add_argument("--payload", type=int, default=0, help="bytes of filler data (for size tests)")
    ap.add_argument("--out", required=True, help="the directory to write the wheel into")
    args = ap.parse_args()

    dist = normalize(args.name)
    module = args.module or dist.lower()
    dist_info = f"{dist}-{args.version}.dist-info"
    purelib = "true" if args.tag.endswith("-any") else "false"
    metadata = [f"Metadata-Version: 2.1", f"Name: {args.name}", f"Version: {args.version}"]
    metadata += [f"Requires-Dist: {r}" for r in args.requires]
    metadata.append("Summary: stand-in wheel (metadata of the real one, no binaries)")
    members = [
        (
            f"{module}/__init__.py",
            f'"""Stand-in for {args.name} {args.version}: metadata only, no code."""\n'
            f"__version__ = {args.version!r}\nSTAND_IN = True\n".encode(),
        ),
    ]
    if args.payload:
        # Deterministic, incompressible-looking filler.
        block, data = hashlib.sha256(args.name.encode()).digest(), bytearray()
        while len(data) < args.payload:
            block = hashlib.sha256(block).digest()
            data += block
        members.append((f"{module}/payload.bin", bytes(data[: args.payload])))
    members += [
        (f"{dist_info}/METADATA", ("\n".join(metadata) + "\n").encode()),
        (
            f"{dist_info}/WHEEL",
            f"Wheel-Version: 1.0\nGenerator: stackbuild-stand-in\nRoot-Is-Purelib: {purelib}\n"
            f"Tag: {args.tag}\n".encode(),
        ),
    ]
    record = [record_line(m, d) for m, d in members] + [f"{dist_info}/RECORD,,"]
    members.append((f"{dist_info}/RECORD", ("\n".join(record) + "\n").encode()))

    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, f"{dist}-{args.version}-{args.tag}.whl")
    tmp = path + ".tmp"
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as z:
        for member, data in members:
            info = zipfile.ZipInfo(member, date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, data)
    os.replace(tmp, path)
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
