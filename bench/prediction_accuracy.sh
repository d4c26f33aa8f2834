#!/usr/bin/env bash
# How well the simulator predicts what the runtime measures: for each model, rank count
# and schedule, a pure pipeline (the planner's split) is trained on this machine, and its
# median measured iteration time is set beside
#   - the planner's prediction from the profile it took just before (`pipetrain profile`
#     in one process per rank, all at once, as the ranks then run), and
#   - the simulator's prediction from the stage times the run itself measured (means
#     over its steady state), which leaves out profiling error and keeps schedule and
#     communication.
# "outlier ms": in the typical mini-batch the report draws (the median of the last 9), the time a rank's actions ran beyond 1.5x the
# median of their kind (the worst rank): a rank that lost its core to another process
# (three ranks on two cores) shows up there, and the simulator, which gives every rank a
# core of its own, cannot predict it. "core wait ms": per mini-batch, the time the worst
# rank's training thread was ready to run but every core was taken (Linux's scheduler
# statistics, over the whole run): the direct measure of that. "busiest rank's compute
# ms": a mini-batch's compute on its busiest rank (the run's steady-state means per
# action), to compare schedules of one model and split. "compute vs profile": the same
# over all ranks against the profile's prediction of it (the planner's per-rank
# compute): the share of the error from the profile that is the layers running at
# another speed than profiled (this machine's speed drifts; bench/noise_floor.py
# measures by how much), as opposed to the schedule and communication, which "from
# measured stages" checks. "core time vs profile": the ranks' training threads' time on
# a core per mini-batch (Linux's scheduler statistics; compute, the framework and the
# messages' CPU), against the profile's compute of the same ranks each on a core of its
# own: the work, whatever the sharing of the cores. Where it is near zero and the
# prediction still misses, the time went to waiting for a core, not to slower layers.
# Configurations alternate within each repeat (this machine's speed drifts); the table
# gives medians over the repeats, and the measured range.
# Usage: bench/prediction_accuracy.sh [build-dir] [repeats] [models] [ranks] [schedules]
#   e.g. bench/prediction_accuracy.sh build 3 "gpt mlp fmnist-cnn" "2 3" "gpipe 1f1b zb-h1"
set -euo pipefail
build=${1:-build}
repeats=${2:-3}
models=${3:-"gpt mlp fmnist-cnn"}
rank_counts=${4:-"2 3"}
schedules=${5:-"gpipe 1f1b zb-h1"}
bin="$build/pipetrain"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# shellcheck source=bench/prediction_models.sh
source "$(dirname "$0")/prediction_models.sh"
# 16 mini-batches of 8 x 32: the first two (heap growth, first messages) are left out of
# the median.
common=(--microbatches 8 --microbatch-size 32 --epochs 1 --max-steps 16 --no-eval --optimizer sgd --lr 0.01
        --no-replication)

for ((r = 1; r <= repeats; ++r)); do
  for model in $models; do
    for ranks in $rank_counts; do
      for schedule in $schedules; do
        name="$model.$ranks.$schedule.$r"
        prediction_model "$model"
        if ! "$bin" train "${model_args[@]}" --dataset "$model_data" "${common[@]}" --nproc "$ranks" --schedule "$schedule" \
             --summary-json "$out/$name.json" --log-jsonl "$out/$name.jsonl" >"$out/$name.log" 2>&1; then
          echo "failed: $model on $ranks ranks under $schedule (log below)" >&2
          tail -5 "$out/$name.log" >&2
        fi
      done
    done
  done
done

/usr/bin/python3 - "$out" <<'EOF'
import glob, json, os, statistics, sys

def iteration_seconds(jsonl):
    walls = [json.loads(line)["wall_seconds"] for line in open(jsonl) if '"event":"step"' in line]
    steps = [b - a for a, b in zip(walls, walls[1:])][1:]  # from the third mini-batch on
    return statistics.median(steps) if steps else None

def preempted_seconds(timeline):
    # Time slicing, seen in the run's typical mini-batch: per rank and kind of action (F, B,
    # I, W, STEP), the time its actions ran beyond 1.5x the kind's median, where a rank
    # that lost its core for a while shows up. The largest over the ranks.
    worst = 0.0
    for actions in timeline["ranks"]:
        kinds = {}
        for name, start, end in actions:
            kind = name.lstrip("0123456789")[:1] if "STEP" not in name else "STEP"
            kinds.setdefault(kind, []).append(end - start)
        excess = 0.0
        for durations in kinds.values():
            typical = statistics.median(durations)
            excess += sum(d - typical for d in durations if d > 1.5 * typical)
        worst = max(worst, excess)
    return worst

def rank_compute_seconds(summary):
    # Per rank, a mini-batch's time in actions (compute passes, steps, all-reduces; not
    # waits for messages) from the run's steady-state means per stage and kind: m of
    # each pass, one step and all-reduce (these schedules are synchronous).
    m = summary["plan"]["microbatches"]
    return [sum(a["seconds"] * (m if a["type"] in ("F", "B", "I", "W") else 1) for a in r["action_seconds"])
            for r in summary["ranks"]]

rows = {}
for summary_path in glob.glob(os.path.join(sys.argv[1], "*.json")):
    model, ranks, schedule, _ = os.path.basename(summary_path)[: -len(".json")].rsplit(".", 3)
    s = json.load(open(summary_path))
    plan = s["plan"]
    samples = plan["microbatch_size"] * plan["microbatches"]
    measured = iteration_seconds(summary_path[: -len(".json")] + ".jsonl")
    if measured is None:
        continue
    row = rows.setdefault((model, int(ranks), schedule),
                          {"measured": [], "profile": [], "stages": [], "preempted": [], "busiest": [],
                           "core_wait": [], "compute_ratio": [], "core_ratio": []})
    compute = rank_compute_seconds(s)
    row["busiest"].append(max(compute))
    row["preempted"].append(preempted_seconds(s["measured_timeline"]))
    row["measured"].append(measured)
    row["core_wait"].append(max(r["core_wait_fraction"] for r in s["ranks"]) * measured)
    row["profile"].append(s["planner"]["chosen"]["iteration_seconds"])
    row["compute_ratio"].append(sum(compute) / sum(s["planner"]["chosen"]["rank_busy_seconds"]))
    on_core = [r["core_run_fraction"] * measured for r in s["ranks"]]
    if min(on_core) >= 0:
        row["core_ratio"].append(sum(on_core) / sum(s["planner"]["chosen"]["rank_core_seconds"]))
    row["stages"].append(samples / s["predicted_throughput"])

print("| model | ranks | schedule | runs | measured ms (range) | from profile ms | error | from measured stages ms | error "
      "| outlier ms | core wait ms | busiest rank's compute ms | compute vs profile (range) | core time vs profile |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
errors = {"profile": [], "stages": []}
for (model, ranks, schedule), row in sorted(rows.items()):
    m = statistics.median(row["measured"])
    ratio = row["compute_ratio"]
    cells = []
    for source in ("profile", "stages"):
        p = statistics.median(row[source])
        errors[source].append(abs(p / m - 1))
        cells += [f"{p * 1e3:.1f}", f"{(p / m - 1) * 100:+.1f}%"]
    print(f"| {model} | {ranks} | {schedule} | {len(row['measured'])} | {m * 1e3:.1f} "
          f"({min(row['measured']) * 1e3:.1f}-{max(row['measured']) * 1e3:.1f}) | " + " | ".join(cells) +
          f" | {statistics.median(row['preempted']) * 1e3:.1f} | {statistics.median(row['core_wait']) * 1e3:.1f}"
          f" | {statistics.median(row['busiest']) * 1e3:.1f} | {(statistics.median(ratio) - 1) * 100:+.1f}% "
          f"({(min(ratio) - 1) * 100:+.1f}% to {(max(ratio) - 1) * 100:+.1f}%) | " +
          (f"{(statistics.median(row['core_ratio']) - 1) * 100:+.1f}%" if row["core_ratio"] else "unknown") + " |")
for source, e in errors.items():
    if e:
        within = sum(x <= 0.05 for x in e)
        print(f"from {source}: median |error| {statistics.median(e) * 100:.1f}%, "
              f"worst {max(e) * 100:.1f}%, {within} of {len(e)} within 5%")
EOF
