#!/usr/bin/env bash
# The graph partitioner (GraphPipe's search, `plan --partitioner graph`) against the chain
# partitioner (PipeDream's DP, `--partitioner chain`) and `auto` (both; the simulator
# chooses), on two multi-branch zoo models at the shapes the GraphPipe paper evaluates,
# scaled to what this 2-core machine profiles in about a minute:
#   multimodal: 4 branches x 8 transformer layers, width 512, 8 heads, context 64;
#   candle-uno: 7 branches x 4 layers, width 2048 (the paper's is 4096: ~5 min to profile here).
# Both are profiled once at batch 8 (`pipetrain profile`; kept in OUT_DIR and reused).
# The clusters (written to OUT_DIR): identical GPUs (speed 300, 80 GiB) in nodes of 8,
# NVLink in a node (300 GB/s), InfiniBand between nodes (25 GB/s): 8, 16 and 32 devices;
# and hetero16: one node of those and one of old GPUs (speed 100, 16 GiB), same network.
# Every model x cluster x partitioner is planned at global batch BATCH (default 256):
# twice (the search time printed is the smaller of the two), and, for graph and chain,
# once more with --exhaustive to find each partitioner's best pure pipeline (no replicas),
# which the chosen plans (often data parallel) hide. Prints a table per model.
# Usage: bench/graph_comparison.sh [build-dir] [out-dir]
#   env: BATCH (global batch, 256), PIPELINES=0 (skip the --exhaustive runs)
set -euo pipefail
build=${1:-build}
out=${2:-}
bin="$build/pipetrain"
python=/usr/bin/python3
batch=${BATCH:-256}
pipelines=${PIPELINES:-1}
if [ ! -x "$python" ]; then
  echo "needs /usr/bin/python3 (apt-get install python3) to read the plans' JSON" >&2
  exit 2
fi
if [ ! -x "$bin" ]; then
  echo "no $bin: build first (cmake --build $build)" >&2
  exit 2
fi
if [ -z "$out" ]; then
  out=$(mktemp -d)
  trap 'rm -rf "$out"' EXIT
fi
mkdir -p "$out/plans"
now() { date +%s.%N; }
started=$(now)

# --- the models ------------------------------------------------------------------------
models=(multimodal candle-uno)
declare -A options=(
  [multimodal]="branches=4 layers=8 width=512 heads=8 context=64"
  [candle-uno]="branches=7 layers=4 width=2048"
)
profile_batch=8
graph_of() { echo "$out/$1-$(tr ' =' '_-' <<<"${options[$1]}")-b$profile_batch.json"; }
for m in "${models[@]}"; do
  g=$(graph_of "$m")
  if [ -s "$g" ]; then
    echo "profile $m: reusing $g"
    continue
  fi
  args=()
  for o in ${options[$m]}; do args+=(--model-option "$o"); done
  t0=$(now)
  "$bin" profile --model "$m" "${args[@]}" --batch "$profile_batch" --out "$g.tmp" >"$out/profile-$m.log" 2>&1 ||
    { cat "$out/profile-$m.log" >&2; exit 1; }
  mv "$g.tmp" "$g"
  echo "profile $m (${options[$m]}, batch $profile_batch): $(awk -v a="$t0" -v b="$(now)" 'BEGIN { printf "%.0f", b - a }') s"
done

# --- the clusters ----------------------------------------------------------------------
cluster() {  # cluster NAME DEVICE_GROUPS_JSON TOTAL
  local levels='{"name": "nvlink", "group_size": 8, "bandwidth": 300000000000.0, "latency": 3e-06}'
  if (($3 > 8)); then
    levels+=", {\"name\": \"infiniband\", \"group_size\": $3, \"bandwidth\": 25000000000.0, \"latency\": 1e-05}"
  fi
  cat >"$out/$1.json" <<EOF
{
 "format": "pipetrain.cluster",
 "version": 1,
 "devices": [$2],
 "levels": [$levels]
}
EOF
}
gpus() { echo "{\"count\": $1, \"name_prefix\": \"${2:-gpu}\", \"kind\": \"gpu\", \"speed\": ${3:-300.0}, \"memory_bytes\": ${4:-85899345920}}"; }
clusters=(gpu8 gpu16 gpu32 hetero16)
cluster gpu8 "$(gpus 8)" 8
cluster gpu16 "$(gpus 16)" 16
cluster gpu32 "$(gpus 32)" 32
cluster hetero16 "$(gpus 8 new), $(gpus 8 old 100.0 17179869184)" 16

# --- the plans -------------------------------------------------------------------------
run_plan() {  # run_plan MODEL CLUSTER PARTITIONER TAG [ARGS...]
  local m=$1 c=$2 p=$3 tag=$4 base t0
  base="$out/plans/$m-$c-$p.$tag"
  shift 4
  t0=$(now)
  if "$bin" plan --graph "$(graph_of "$m")" --cluster "$out/$c.json" --batch "$batch" --json \
      --partitioner "$p" "$@" >"$base.json" 2>"$base.err"; then
    rm -f "$base.failed"
  else
    echo "$?" >"$base.failed"
    echo "plan $m on $c --partitioner $p $*: failed, $(head -c 300 "$base.err")" >&2
  fi
  awk -v a="$t0" -v b="$(now)" 'BEGIN { printf "%.2f\n", b - a }' >"$base.wall"
}
for m in "${models[@]}"; do
  for c in "${clusters[@]}"; do
    for p in graph chain auto; do
      run_plan "$m" "$c" "$p" 1 --out "$out/plans/$m-$c-$p.plan.json"
      run_plan "$m" "$c" "$p" 2
      if [ "$pipelines" = 1 ] && [ "$p" != auto ]; then
        run_plan "$m" "$c" "$p" exhaustive --exhaustive --top 100000
      fi
    done
    echo "planned $m on $c"
  done
done

# --- the tables ------------------------------------------------------------------------
"$python" - "$out" "$batch" "$profile_batch" "$pipelines" "${models[*]}" "${clusters[*]}" \
  "$(for m in "${models[@]}"; do echo "$m:${options[$m]}"; done)" <<'PY'
import json, os, sys
out, batch, pbatch, pipelines = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4] == "1"
models, clusters = sys.argv[5].split(), sys.argv[6].split()
opts = dict(line.split(":", 1) for line in sys.argv[7].splitlines())
about = {"gpu8": "1 node x 8", "gpu16": "2 nodes x 8", "gpu32": "4 nodes x 8",
         "hetero16": "8 fast + 8 slow"}
GiB = 1024.0 ** 3

def load(m, c, p, tag):
    base = f"{out}/plans/{m}-{c}-{p}.{tag}"
    if os.path.exists(base + ".failed"):
        err = open(base + ".err").read().strip().splitlines()
        return {"error": err[0] if err else "exit " + open(base + ".failed").read().strip()}
    with open(base + ".json") as f:
        j = json.load(f)
    j["wall"] = float(open(base + ".wall").read())
    return j

def row(j):  # the columns of one plan (the chosen one, or a candidate)
    devs = sum(len(s["devices"]) for s in j["stages"])
    reps = max(s.get("replicas", 1) for s in j["stages"])
    peak = max(j["peak_memory_bytes"].values()) / GiB if j["peak_memory_bytes"] else 0.0
    return [j["schedule"], f"{len(j['stages'])}", f"{devs}", f"{reps}", f"{j['depth']}",
            f"{j['microbatch_size']}x{j['microbatches']}", f"{j['predicted_throughput']:.0f}",
            f"{peak:.2f}"]

def table(head, rows):
    w = [max(len(str(r[i])) for r in [head] + rows) for i in range(len(head))]
    for r in [head] + rows:
        print("  " + "  ".join(str(v).rjust(w[i]) if i >= 2 else str(v).ljust(w[i])
                               for i, v in enumerate(r)))

for m in models:
    print(f"\n== {m} ({opts[m]}; profiled at batch {pbatch}), global batch {batch}")
    print("   clusters: " + ", ".join(f"{c} = {about[c]}" for c in clusters))
    print("   chosen plans (stages: count; devs: devices used; reps: most replicas of a stage;"
          " peak: GiB on the fullest device; search: the smaller of two runs)")
    rows, drops = [], {}
    for c in clusters:
        chain_tp = None
        for p in ["chain", "graph", "auto"]:
            a, b = load(m, c, p, 1), load(m, c, p, 2)
            if "error" in a:
                rows.append([c, p] + ["FAILED: " + a["error"]])
                continue
            if p == "chain":
                chain_tp = a["predicted_throughput"]
            ratio = a["predicted_throughput"] / chain_tp if chain_tp else float("nan")
            search = min(x["search_seconds"] for x in (a, b) if "error" not in x)
            wall = min(x["wall"] for x in (a, b) if "error" not in x)
            name = p if p != "auto" else "auto->" + a["partitioner"]
            rows.append([c, name] + row(a) + [f"{ratio:.2f}", f"{search:.2f}", f"{wall:.1f}"])
            for d in a.get("dropped", []):
                k = d["reason"].splitlines()[0].rstrip(":")
                if "needs a chain of stages" in k:
                    k = d["schedule"] + " needs a chain of stages"
                where = drops.setdefault(k, {})
                where.setdefault(f"{c}/{p}", set()).add(d["devices"])
    table(["cluster", "partitioner", "schedule", "stages", "devs", "reps", "depth", "mb x m",
           "samples/s", "peak GiB", "vs chain", "search s", "wall s"], rows)
    if pipelines:
        print("   best pure pipelines (no replicas) among each partitioner's --exhaustive candidates")
        rows = []
        for c in clusters:
            chain_tp = None
            for p in ["chain", "graph"]:
                j = load(m, c, p, "exhaustive")
                if "error" in j:
                    rows.append([c, p, "FAILED: " + j["error"]])
                    continue
                pure = [k for k in j["candidates"] if k["partitioner"] == p
                        and all(s.get("replicas", 1) == 1 for s in k["stages"])]
                if not pure:
                    rows.append([c, p, "(none ranked)"])
                    continue
                best = max(pure, key=lambda k: k["predicted_throughput"])
                if p == "chain":
                    chain_tp = best["predicted_throughput"]
                ratio = best["predicted_throughput"] / chain_tp if chain_tp else float("nan")
                rows.append([c, p] + row(best) + [f"{ratio:.2f}", f"{j['wall']:.1f}"])
        table(["cluster", "partitioner", "schedule", "stages", "devs", "reps", "depth", "mb x m",
               "samples/s", "peak GiB", "vs chain", "wall s"], rows)
    if drops:
        print("   dropped by the exploration (cluster/partitioner: widths in devices):")
        for k, where in sorted(drops.items()):
            print(f"    {k}: " + ", ".join(f"{w} ({','.join(map(str, sorted(ds)))})"
                                          for w, ds in where.items()))
PY
echo "(clusters: $(for c in "${clusters[@]}"; do printf '%s ' "$c"; done| sed 's/ $//'); speed 300 = 300x this" \
  "machine's profiled times; plans, JSON and stderr in $out/plans; total $(awk -v a="$started" -v b="$(now)" 'BEGIN { printf "%.0f", b - a }') s)"
