#!/usr/bin/env bash
# The profile against the run, per stage and kind of action: how `pipetrain profile`'s
# per-layer times, summed over a stage, compare with the means a 2-rank training run of
# that stage measures for its F, B and STEP actions over its steady state (the summary's
# action_seconds). Two ways of profiling are set side by side, each as two processes at
# once (as `train` profiles for two ranks):
#   whole  every process times the whole model (what `train` did before shares);
#   share  process K times share K of 2 with the micro-batches in flight that `train`
#          chose for it, timing together (`--share K/2 --in-flight N --rendezvous DIR`,
#          what `train` does).
# The plan is the one `train` chooses for the model on 2 ranks (SCHEDULE, default 1f1b, no
# replication);
# the profiles and the run alternate, REPEATS rounds, so that the machine's drift falls
# on all three alike. Prints, per stage and action kind, the run's median over the rounds
# and each profile's median error against it (predicted / measured - 1), and the
# stage's whole mini-batch (m F + m B + STEP).
# Usage: bench/profile_vs_run.sh [build-dir] [repeats] [model] [schedule]
#   model: mlp, gpt or fmnist-cnn; schedule: gpipe, 1f1b, zb-h1, ...
set -euo pipefail
build=${1:-build}
repeats=${2:-5}
model=${3:-mlp}
schedule=${4:-1f1b}
bin="$build/pipetrain"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# shellcheck source=bench/prediction_models.sh
source "$(dirname "$0")/prediction_models.sh"
prediction_model "$model"
train=(--dataset "$model_data" --epochs 1 --max-steps 16 --no-eval --optimizer sgd --lr 0.01 --nproc 2)

"$bin" train "${model_args[@]}" "${train[@]}" --microbatches 8 --microbatch-size 32 --no-replication \
  --schedule "$schedule" --max-steps 1 --plan-out "$out/plan.json" >"$out/plan.log" 2>&1 || { cat "$out/plan.log" >&2; exit 1; }
# The micro-batches each of train's profiling processes held in flight (its "in flight A,B").
IFS=, read -r -a in_flight <<<"$(sed -n 's/.*micro-batches in flight \([0-9,]*\).*/\1/p' "$out/plan.log")"
[ ${#in_flight[@]} -eq 2 ] || { echo "train did not say what its profiles held in flight" >&2; exit 1; }
profile() {  # profile NAME [--share]: two processes at once
  for r in 0 1; do
    share=()
    [ "${2:-}" = --share ] && mkdir -p "$out/$1.rendezvous" &&
      share=(--share "$r/2" --rendezvous "$out/$1.rendezvous" --in-flight "${in_flight[$r]}")
    "$bin" profile "${model_args[@]}" --batch 32 --optimizer sgd --warmup 3 --repeats 5 --threads 1 "${share[@]}" \
      --out "$out/$1.$r.json" >"$out/$1.$r.log" 2>&1 &
  done
  wait
}
for ((round = 0; round < repeats; ++round)); do
  profile "whole.$round"
  profile "share.$round" --share
  "$bin" train "${model_args[@]}" "${train[@]}" --plan "$out/plan.json" --summary-json "$out/run.$round.json" \
    >"$out/run.$round.log" 2>&1 || { cat "$out/run.$round.log" >&2; exit 1; }
done

/usr/bin/python3 - "$out" "$repeats" "$model" "$schedule" <<'EOF'
import json, statistics, sys
out, repeats, model, schedule = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
plan = json.load(open(f"{out}/plan.json"))
stages = [s["layers"] for s in plan["stages"]]
if len(stages) != 2:
    sys.exit(f"{schedule} puts {len(stages)} stages on 2 ranks: this bench compares one stage per rank")
m = plan["microbatches"]
ORDER = ["F", "B", "I", "W", "STEP", "mini-batch"]

def layers(path):
    return {l["name"]: l for l in json.load(open(path))["layers"]}

def stage_sums(profile, names):  # ms per kind; a field at its default is not written
    def total(field, default_field=None):
        return sum(profile[n].get(field, profile[n].get(default_field, 0)) for n in names) * 1e3
    i = total("backward_input_seconds")
    return {"F": total("forward_seconds"), "B": i + total("backward_weight_seconds"), "I": i,
            "W": total("split_weight_seconds", "backward_weight_seconds"), "STEP": total("optimizer_seconds")}

def with_minibatch(t, kinds):  # m of each compute kind, one STEP
    return dict(t, **{"mini-batch": sum(m * t[k] for k in kinds if k != "STEP") + t["STEP"]})

measured, errors = {}, {"whole": {}, "share": {}}
for r in range(repeats):
    run = json.load(open(f"{out}/run.{r}.json"))
    for rank in run["ranks"]:
        # the run's mean per kind of action over its steady state (the third mini-batch on)
        times = {a["type"]: a["seconds"] * 1e3 for a in rank["action_seconds"]}
        s = rank["stages"][0]
        kinds = [k for k in ORDER if k in times]
        got = with_minibatch({k: times[k] for k in kinds}, kinds)
        for k, v in got.items():
            measured.setdefault((s, k), []).append(v)
        for way in errors:
            profiles = [layers(f"{out}/{way}.{r}.{p}.json") for p in (0, 1)]
            # whole: the two processes' mean; share: their sum, since each layer's times are
            # in the profile that timed it and 0 in the other
            sums = [stage_sums(p, stages[s]) for p in profiles]
            predicted = {k: (sums[0][k] + sums[1][k]) / (2 if way == "whole" else 1) for k in kinds}
            for k, v in with_minibatch(predicted, kinds).items():
                errors[way].setdefault((s, k), []).append(v / got[k] - 1)

print(f"{model}, 2 ranks, {schedule}, {m} micro-batches of 32; stages "
      + " | ".join(f"{s[0]}..{s[-1]}" for s in stages) + f"; medians of {repeats} alternating rounds")
print("| stage | action | measured ms | whole-model profiles | profiles as ranks |")
print("|---|---|---|---|---|")
for (s, k), values in sorted(measured.items(), key=lambda item: (item[0][0], ORDER.index(item[0][1]))):
    cells = [f"{statistics.median(errors[w][(s, k)]) * 100:+.1f}%" for w in ("whole", "share")]
    print(f"| {s} | {k} | {statistics.median(values):.2f} | " + " | ".join(cells) + " |")
EOF
