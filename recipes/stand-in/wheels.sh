#!/bin/sh
# Stand-ins for the wheels recipes/a100-cluster.toml and recipes/jetson-orin.toml take as files,
# for machines that cannot download the real ones (PyTorch's cu118 channel, NVIDIA's JetPack
# wheels): the same name, version, tags and Requires-Dist, no binaries (see make-wheel.py).
# With them the two stacks resolve, lock, check and build; the images are not runnable.
#
#   recipes/stand-in/wheels.sh && stackbuild recipes/a100-cluster.toml
set -eu
here=$(dirname "$0")
out=${1:-$here/../wheels}
linux_x86_64="; platform_system == 'Linux' and platform_machine == 'x86_64'"

# torch 2.1.2+cu118: the CUDA 11.8 component wheels and cuDNN 8.7.0.84 that PyTorch's CUDA 11.8
# builds pin, and triton 2.1.0. Left out: the NCCL pin, whose 2.1-era version the public index
# does not carry (the real wheel's metadata decides; if it pins an NCCL only PyTorch's index
# has, point `[python] index` of the recipe at that channel).
python3 "$here/make-wheel.py" --out "$out" --name torch --version 2.1.2+cu118 \
  --tag cp311-cp311-linux_x86_64 \
  --requires filelock --requires typing-extensions --requires sympy --requires networkx \
  --requires jinja2 --requires fsspec \
  --requires "nvidia-cuda-nvrtc-cu11==11.8.89$linux_x86_64" \
  --requires "nvidia-cuda-runtime-cu11==11.8.89$linux_x86_64" \
  --requires "nvidia-cuda-cupti-cu11==11.8.87$linux_x86_64" \
  --requires "nvidia-cudnn-cu11==8.7.0.84$linux_x86_64" \
  --requires "nvidia-cublas-cu11==11.11.3.6$linux_x86_64" \
  --requires "nvidia-cufft-cu11==10.9.0.58$linux_x86_64" \
  --requires "nvidia-curand-cu11==10.3.0.86$linux_x86_64" \
  --requires "nvidia-cusolver-cu11==11.4.1.48$linux_x86_64" \
  --requires "nvidia-cusparse-cu11==11.7.5.86$linux_x86_64" \
  --requires "nvidia-nvtx-cu11==11.8.86$linux_x86_64" \
  --requires "triton==2.1.0$linux_x86_64"

# JetPack 6 torch 2.3.0: CUDA and cuDNN come from the board, so no nvidia-* wheels.
python3 "$here/make-wheel.py" --out "$out" --name torch --version 2.3.0 \
  --tag cp311-cp311-linux_aarch64 \
  --requires filelock --requires typing-extensions --requires sympy --requires networkx \
  --requires jinja2 --requires fsspec
