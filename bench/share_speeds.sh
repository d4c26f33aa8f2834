#!/usr/bin/env bash
# How far apart two profile shares time the same layers, before and after the merge
# brings their cores to one speed (docs/profiling.md#cores-that-run-at-different-speeds).
# gpt's four transformer blocks are identical; on two ranks, share 0 times blocks 0-1
# and share 1 blocks 2-3. Each round takes the two shares as `train` takes them (at once,
# each pinned to a core of its own, one thread, meeting in a rendezvous directory) and
# prints the ratio of share 0's block time to share 1's as timed, the ratio of their
# cores' probes, and the ratio once each share is divided by its probe (what the merge
# does); 1.00 is right.
# Usage: bench/share_speeds.sh [build-dir] [rounds] [batch]
set -euo pipefail
build=${1:-build}
rounds=${2:-6}
batch=${3:-4}
bin=$build/pipetrain
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
share() {  # K IN_FLIGHT CPU
  OMP_NUM_THREADS=1 taskset -c "$3" "$bin" profile --model gpt --dataset fortunes --batch "$batch" --optimizer adam \
    --warmup 2 --repeats 5 --min-repeats 3 --threads 1 --share "$1/2" --in-flight "$2" \
    --rendezvous "$work/rv" --out "$work/p$1.json" >/dev/null
}
for ((r = 1; r <= rounds; ++r)); do
  rm -rf "$work/rv" && mkdir "$work/rv"
  share 0 2 0 &
  share 1 1 1
  wait
  python3 - "$work/p0.json" "$work/p1.json" "$r" <<'PY'
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:3])
def block(g, name):
    return next(l for l in g["layers"] if l["name"] == name)["forward_seconds"]
timed = block(a, "block0") / block(b, "block2")
probes = a["profiled_as"]["probe_seconds"] / b["profiled_as"]["probe_seconds"]
print(f"round {sys.argv[3]}: block forward, share 0 / share 1: as timed {timed:.2f}, "
      f"cores' probes {probes:.2f}, at one speed {timed / probes:.2f}")
PY
done
