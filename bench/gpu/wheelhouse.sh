#!/usr/bin/env bash
# Build the wheelhouse an offline GPU host needs (bench/gpu/README.md). Here, from the repo root:
#     bench/gpu/wheelhouse.sh [.whl] [DEEPSPEED_VERSION]
# then carry the folder with the device command and, on the host, `source bench/gpu/prelude.sh .whl`.
# The hosts run CPython 3.12 (x86_64) and already have torch, transformers, click, numpy, psutil, py-cpuinfo,
# msgpack, ninja, packaging, tqdm, rich, matplotlib and nvidia-ml-py; not deepspeed, pydantic or hjson.
set -euo pipefail
out=${1:-.whl}; dsver=${2:-0.19.8}
mkdir -p "$out"
plat=(--platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)
# deepspeed ships as an sdist only; its wheel is pure Python (its ops are JIT-compiled on the GPU host)
python3 -m pip wheel -q --no-deps "deepspeed==${dsver}" -w "$out"
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp "${plat[@]}" \
  -d "$out" hjson pydantic pydantic-core annotated-types typing-inspection
# dsx itself, as a wheel (no deps: the host has them or they are above); the scripts run the checkout's dsx first
python3 -m pip wheel -q --no-deps . -w "$out"
ls -1 "$out"
