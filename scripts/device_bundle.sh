#!/usr/bin/env bash
# Copies what scripts/device_check.sh runs on a lent GPU machine, stripped, into
# .device/bin: the device tool carries that folder there (64 MiB at most), and the
# binaries find that machine's LibTorch (the same pinned 2.11) through LD_LIBRARY_PATH.
# Usage: scripts/device_bundle.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
mkdir -p .device/bin
cmake --build "$build" --target plain_loop
for b in pipetrain pipetrain-torch pipetrain_torch_tests plain_loop; do strip -o ".device/bin/$b" "$build/$b"; done
du -sh .device/bin/*
