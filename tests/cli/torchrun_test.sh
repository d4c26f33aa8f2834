#!/usr/bin/env bash
# pipetrain under PyTorch's torchrun (the pinned torch's, .venv/bin/torchrun), as the docs
# tell users to run it: `torchrun --no-python pipetrain train ...` trains to the launcher's
# result, plans and writes its outputs as the launcher does, and torchrun's own restarts (--max-restarts), with one command that names its
# checkpoint folder in both --checkpoint-dir and --resume, finish a job whose rank was
# killed, with the parameters of a run never interrupted.
# Usage: PIPETRAIN=path/to/pipetrain torchrun_test.sh SOURCE_DIR
set -u
src=${1:?source dir}
bin=${PIPETRAIN:?set PIPETRAIN}
python=${PIPETRAIN_PYTHON:?the Python with the pinned torch (set by CMake)}
. "$(dirname "$0")/harness.sh"
torchrun=(env OMP_NUM_THREADS=1 "$(dirname "$python")/torchrun" --standalone --nproc-per-node 2 --no-python)

check "the example writes a model and data" "$python" "$src/examples/byo/make_model.py" "$tmp"
# Four epochs of 112 mini-batches, a checkpoint every 20.
args=(train --model-file "$tmp/model.pt" --data-file "$tmp/data.pt" --stage-bounds 0,4,7 --microbatches 2
  --microbatch-size 16 --epochs 4 --no-eval --timeout 5)

check "the launcher's run" "$bin" "${args[@]}" --nproc 2 --export "$tmp/launcher.pt"
check "the same run under torchrun" "${torchrun[@]}" "$bin" "${args[@]}" --export "$tmp/torchrun.pt"
expect "rank 0 sums up the job as the launcher does" "trained model with 1f1b on 2 ranks: 14336 samples"

# Without a plan, rank 0 profiles and plans as the launcher would, the other rank trains
# what it chose, and rank 0 writes every output: one job, whoever launched it.
check "torchrun: planned, reported" "${torchrun[@]}" "$bin" train --model-file "$tmp/model.pt" --data-file "$tmp/data.pt" \
  --batch 32 --epochs 1 --max-steps 20 --timeout 20 --report "$tmp/report" --trace "$tmp/trace.json" --svg "$tmp/gantt.svg"
expect "rank 0 planned for the job's ranks" "planned for 2 ranks"
expect "the test loss" "test loss"
for f in report/report.html report/summary.json report/metrics.jsonl trace.json gantt.svg; do
  [ -s "$tmp/$f" ] && passed=$((passed + 1)) || { failed=$((failed + 1)); echo "FAIL: torchrun wrote no $f"; }
done
summaries=$(grep -c "^trained model with" "$tmp/out")
[ "$summaries" = 1 ] && passed=$((passed + 1)) || { failed=$((failed + 1)); echo "FAIL: $summaries summaries, not 1"; }
check "python: the summary names both ranks and the planner" "$python" - "$tmp/report/summary.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
assert s["world_size"] == 2 and len(s["ranks"]) == 2, s["world_size"]
assert "planner" in s and s["planner"]["chosen"]["throughput"] > 0
print(s["schedule"], s["throughput"])
PY

# torchrun restarts every worker with the same command: the first start finds no
# checkpoint in the folder --resume names and trains from the beginning; the restart
# resumes from the newest checkpoint there.
restartable=("${torchrun[@]}" --max-restarts 1 "$bin" "${args[@]}" --checkpoint-dir "$tmp/ckpt" --checkpoint-every 20
  --resume "$tmp/ckpt" --export "$tmp/restarted.pt")
"${restartable[@]}" >"$tmp/restarted.out" 2>&1 &
agent=$!
wait_for_checkpoint "$tmp/ckpt" 400
rank1=$(for p in $(pgrep -P "$agent"; for c in $(pgrep -P "$agent"); do pgrep -P "$c"; done); do
  tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx RANK=1 && echo "$p"; done | head -1)
if [ -n "$rank1" ] && kill -KILL "$rank1"; then passed=$((passed + 1)); else
  failed=$((failed + 1)); echo "FAIL: found no rank 1 to kill"; fi
wait "$agent"
status=$?
[ "$status" -eq 0 ] && passed=$((passed + 1)) ||
  { failed=$((failed + 1)); echo "FAIL: torchrun --max-restarts 1 did not finish the job (exit $status)"
    grep -v "^epoch" "$tmp/restarted.out" | grep -i -B2 -A8 "error" | head -40; }
expect "the first start had nothing to resume" "no checkpoint in $tmp/ckpt yet: training from the start" "$tmp/restarted.out"
# torchrun restarts quietly (its agent logs at INFO): the second start's line says it.
expect "the restart resumed from a checkpoint" "resuming from $tmp/ckpt/step-" "$tmp/restarted.out"

check "python: every run ends with the same parameters" "$python" - "$tmp/launcher.pt" "$tmp/torchrun.pt" \
  "$tmp/restarted.pt" <<'PY'
import sys
import torch
runs = [torch.jit.load(f).state_dict() for f in sys.argv[1:]]
for name, p in runs[0].items():
    for other, run in zip(sys.argv[2:], runs[1:]):
        assert torch.equal(p, run[name]), f"{name} differs in {other}"
print(f"{len(runs)} runs, {len(runs[0])} tensors, equal")
PY

finish torchrun_test
