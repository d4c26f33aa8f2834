#!/usr/bin/env bash
# Time to accuracy: the same model, global batch (8 micro-batches of 32), optimizer and
# seeds trained on this machine in one process, data-parallel on 2 ranks, and as a
# 2-stage pipeline under every schedule, and the plans the planner chooses for the same
# batch on 2 ranks by throughput (auto) and by time to accuracy (auto-tta, which trains
# a calibration first); then a table (epochs, training seconds and wall seconds until
# the target is reached, throughput, weight memory, the seconds before training) and a
# plot of test accuracy (fmnist) or validation loss (gpt) against wall-clock time.
# fmnist-deep: fmnist on 4 ranks, 2 micro-batches of 128, 4-stage pipelines, where
# the asynchronous schedules' delays are longer.
# Usage: bench/time_to_accuracy.sh [build-dir] [fmnist|gpt|fmnist-deep] [seeds, e.g. "1 2 3"]
# Environment: TARGET (fmnist: test accuracy, default 0.85; gpt: validation loss,
# default 2.5), EPOCHS and STEPS (evaluate every STEPS mini-batches, EPOCHS times;
# defaults 8 and 30: 61,440 samples, about one epoch of either dataset), OPTIMIZER (adam), LR (1e-3), CONFIGS (space-separated subset of
# the names below), RUN_TIMEOUT (seconds per run, default none).
# Writes out/bench/time_to_accuracy/<task>/: <config>_seed<N>.json (summaries; a failed
# run gets {"failed": true, ...}), <config>_seed<N>.log, report.md, report.svg.
set -euo pipefail
build=${1:-build}
task=${2:-fmnist}
seeds=${3:-1}
bin="$build/pipetrain"
report="$build/tta_report"
all_configs=(single dp2 gpipe 1f1b zb-h1 interleaved pipedream pipedream-vs 2bw pipemare pipemare-off auto auto-tta)
ranks=2 microbatches=(--microbatches 8 --microbatch-size 32) wider=()
report_task=$task

case "$task" in
  fmnist) model=(--model fmnist-cnn --dataset fashion-mnist)
          target=${TARGET:-0.85} epochs=${EPOCHS:-8} steps=${STEPS:-30} ;;
  fmnist-deep) model=(--model fmnist-cnn --dataset fashion-mnist)
               target=${TARGET:-0.85} epochs=${EPOCHS:-8} steps=${STEPS:-30}
               ranks=4 microbatches=(--microbatches 2 --microbatch-size 128) report_task=fmnist
               # Data parallelism on 4 ranks and 2BW on 4 stages need 4 micro-batches.
               wider=(--microbatches 4 --microbatch-size 64)
               all_configs=(dp 1f1b pipedream 2bw pipemare pipemare-off auto auto-tta) ;;
  gpt) model=(--model gpt --model-option layers=4 --model-option width=64 --model-option heads=4
              --model-option context=32 --dataset fortunes)
       target=${TARGET:-2.5} epochs=${EPOCHS:-8} steps=${STEPS:-30} ;;
  *) echo "unknown task '$task' (fmnist, gpt or fmnist-deep)" >&2; exit 2 ;;
esac
for exe in "$bin" "$report"; do
  [[ -x $exe ]] || { echo "$exe not found: build it first (cmake --build $build)" >&2; exit 2; }
done
read -ra seed_list <<< "$seeds"
read -ra configs <<< "${CONFIGS:-${all_configs[*]}}"
for s in "${seed_list[@]}"; do
  [[ $s =~ ^[0-9]+$ ]] || { echo "seed '$s' is not a non-negative integer" >&2; exit 2; }
done
(( ${#seed_list[@]} > 0 && ${#configs[@]} > 0 )) || { echo "no seeds or no configurations" >&2; exit 2; }

config_args() {  # config_args NAME: sets the array `args`
  local pipe=(--nproc "$ranks" --no-replication "${microbatches[@]}")
  local auto=(--nproc "$ranks" --batch 256 --allow-async)
  case "$1" in
    single) args=(--nproc 1 --schedule gpipe "${microbatches[@]}") ;;
    dp2|dp) args=(--nproc "$ranks" --data-parallel "${microbatches[@]}" "${wider[@]}") ;;
    gpipe|1f1b|zb-h1|pipedream) args=("${pipe[@]}" --schedule "$1") ;;
    2bw) args=("${pipe[@]}" "${wider[@]}" --schedule 2bw) ;;
    interleaved) args=("${pipe[@]}" --schedule interleaved --chunks 2) ;;
    pipedream-vs) args=("${pipe[@]}" --schedule pipedream --vertical-sync) ;;
    pipemare) args=("${pipe[@]}" --schedule pipemare --pipemare-t1 true --pipemare-t2 true) ;;
    pipemare-off) args=("${pipe[@]}" --schedule pipemare --pipemare-t1 false --pipemare-t2 false) ;;
    auto) args=("${auto[@]}") ;;
    auto-tta) args=("${auto[@]}" --objective time-to-accuracy) ;;
    *) return 1 ;;
  esac
}
for c in "${configs[@]}"; do
  config_args "$c" || { echo "unknown configuration '$c' (known: ${all_configs[*]})" >&2; exit 2; }
done

out="out/bench/time_to_accuracy/$task"
mkdir -p "$out"
common=("${model[@]}" --epochs "$epochs" --max-steps "$steps"
        --optimizer "${OPTIMIZER:-adam}" --lr "${LR:-1e-3}")
runner=()
[[ -z ${RUN_TIMEOUT:-} ]] || runner=(timeout "$RUN_TIMEOUT")
failed=()

# Seeds outside, configurations inside: slow drifts of the machine hit every configuration alike.
for seed in "${seed_list[@]}"; do
  for c in "${configs[@]}"; do
    config_args "$c"
    json="$out/${c}_seed${seed}.json" log="$out/${c}_seed${seed}.log"
    cmd=("$bin" train "${common[@]}" "${args[@]}" --seed "$seed" --summary-json "$json")
    rm -f "$json"
    echo "[$(date +%T)] $task: $c, seed $seed" >&2
    printf '%q ' "${runner[@]}" "${cmd[@]}" > "$log"
    echo >> "$log"
    rc=0
    "${runner[@]}" "${cmd[@]}" >> "$log" 2>&1 || rc=$?
    if (( rc != 0 )) || [[ ! -s $json ]]; then
      printf '{"format": "pipetrain.train-summary", "failed": true, "exit_code": %d}\n' "$rc" > "$json"
      failed+=("$c seed $seed (exit $rc, $log)")
      echo "  failed (exit $rc); last lines of $log:" >&2
      tail -n 5 "$log" | sed 's/^/    /' >&2
    fi
  done
done

summaries=()
for c in "${configs[@]}"; do
  for seed in "${seed_list[@]}"; do summaries+=("$out/${c}_seed${seed}.json"); done
done
echo >&2
"$report" --task "$report_task" --target "$target" --out-md "$out/report.md" --out-svg "$out/report.svg" "${summaries[@]}"
echo
echo "wrote $out/report.md and $out/report.svg (summaries and logs beside them)"
if (( ${#failed[@]} > 0 )); then
  echo "${#failed[@]} run(s) failed:" >&2
  printf '  %s\n' "${failed[@]}" >&2
fi
