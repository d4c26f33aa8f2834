#!/usr/bin/env bash
# The GPU check (docs/gpu.md): run on a lent GPU machine, in one call of at most 8
# minutes, against that machine's PyTorch (the same 2.11 the build pins). Prepared here,
# it needs on the GPU machine only python3 with torch and the binaries built here:
#
#   bash scripts/device_check.sh BIN OUT [SNAPSHOT]
#
# BIN holds pipetrain, pipetrain-torch, pipetrain_torch_tests and plain_loop
# (scripts/device_bundle.sh strips them into .device/bin); OUT receives the logs and
# results.jsonl, one JSON line per figure; SNAPSHOT, where given, a .tgz of OUT after
# every part (the device tool brings back a few files, not a folder of logs). The parts
# run most telling first; each has its own time limit, a part that fails is reported and
# the next one runs, and none starts once BUDGET seconds (420) have passed. PARTS names
# the parts to run (default all: machine 2 trace 3 1b 2ranks tests d nccl2 e schedules), so that the
# check can be split over two calls or a rerun take only what failed.
set -uo pipefail
bin=$(realpath "${1:?BIN: the folder with pipetrain, pipetrain-torch, pipetrain_torch_tests, plain_loop}")
out=$(realpath -m "${2:?OUT: where the results go}")
snapshot=${3:-}
mkdir -p "$out"
src=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-python3}
torch_dir=$("$python" -c 'import os, torch; print(os.path.dirname(torch.__file__))')
nvidia_dir=$("$python" -c 'import nvidia; print(list(nvidia.__path__)[0])')
export LD_LIBRARY_PATH="$torch_dir/lib:$nvidia_dir/cu13/lib:$nvidia_dir/nccl/lib:$nvidia_dir/cudnn/lib:${LD_LIBRARY_PATH:-}"
export PYTHONUNBUFFERED=1 PIPETRAIN_CACHE_DIR="$out/cache"
results=$out/results.jsonl
: >"$results"
started=$SECONDS
budget=${BUDGET:-420}
# part ID NAME: starts a part, or says it is skipped: not among PARTS (by ID; all by
# default), or the budget is spent.
parts=" ${PARTS:-machine 2 trace 3 1b 2ranks tests d nccl2 e schedules} done "
part() {
  local id=$1
  shift
  [[ $parts == *" $id "* ]] || return 1
  if ((SECONDS - started > budget)); then
    echo "== skipped (budget of ${budget}s spent): $*" | tee -a "$out/steps.log"
    return 1
  fi
  echo "== $((SECONDS - started))s $*" | tee -a "$out/steps.log"
}
note() { echo "$1" >>"$results"; }
# The profiles `train` took stay in (OUT/cache): the planner's inputs, to price again here.
save() { [ -n "$snapshot" ] && tar -czf "$snapshot.tmp" -C "$(dirname "$out")" "$(basename "$out")" &&
  mv "$snapshot.tmp" "$snapshot"; true; }
# The rate of a pipetrain run in its steady state: samples/s between its step FIRST and
# its last step, read off the reporting rank's --log-jsonl (each step's wall clock), so
# that start-up, warm-up and the first steps' autotuning stay out.
steady() {  # LOG FIRST SAMPLES_PER_STEP
  "$python" - "$@" <<'PY' 2>/dev/null || echo null
import json, sys
path, first, per_step = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
steps = [json.loads(l) for l in open(path) if '"event": "step"' in l or '"event":"step"' in l]
a = next(x for x in steps if x["step"] >= first)
b = steps[-1]
print((b["step"] - a["step"]) * per_step / (b["wall_seconds"] - a["wall_seconds"]))
PY
}
# What a run's summary says of its ranks against the planner's prediction: samples/s
# measured and predicted, and per rank the allocator's peak beside the predicted tensors.
judge() {  # CHECK SUMMARY_JSON
  "$python" - "$@" <<'PY' 2>/dev/null || echo "{\"check\": \"$1\", \"error\": \"no summary\"}"
import json, sys
check, path = sys.argv[1], sys.argv[2]
s = json.load(open(path))
chosen = s.get("planner", {}).get("chosen", {})
peak, process = chosen.get("rank_peak_memory_bytes", []), chosen.get("rank_process_bytes", [])
ranks = []
for r in s["ranks"]:
    k = r["rank"]
    predicted = peak[k] - process[k] if k < len(peak) and k < len(process) else None
    measured = r.get("peak_device_memory_bytes")
    ranks.append({"rank": k, "device": r["device"], "channel": r.get("data_channel"),
                  "peak_gpu_memory": measured, "predicted_gpu_memory": predicted,
                  "memory_ratio": predicted / measured if predicted and measured and measured > 0 else None,
                  "bubble": round(r["bubble_fraction"], 3), "predicted_bubble": round(r["predicted_bubble_fraction"], 3),
                  "framework_seconds_per_action": r.get("framework_seconds_per_action")})
plan = s.get("plan", {})
print(json.dumps({"check": check, "samples_per_second": s.get("throughput"),
                  "predicted_samples_per_second": s.get("predicted_throughput"),
                  "predicted_from_profile": chosen.get("throughput"),
                  "plan": {k: plan.get(k) for k in ("schedule", "microbatches", "microbatch_size")},
                  "stages": len(plan.get("stages", [])), "final_loss": s.get("final_loss"),
                  "profile": s.get("planner", {}).get("profile"), "ranks": ranks}))
PY
}

if part machine "machine"; then
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv | tee "$out/gpu.txt"
"$python" -c 'import torch; print("python torch", torch.__version__, torch.version.cuda)' | tee -a "$out/gpu.txt"
"$bin/pipetrain" info 2>&1 | tee -a "$out/gpu.txt"
save
fi

gpt=(--model gpt --model-option layers=12 --model-option width=768 --model-option heads=12
     --model-option context=1024 --dataset synthetic --precision bf16 --device cuda --no-eval --epochs 1)
loop=(--layers 12 --width 768 --heads 12 --context 1024 --batch 8 --precision bf16)
# (2) One stage against PyTorch's own loop (bench/device/torch_loop.py: eager, autocast,
# fused AdamW, pinned batches) and the plain LibTorch loop, on the 86M gpt at batch 8,
# alternated ROUNDS (2) times. The loops time 100 steps after 20 of warm-up; pipetrain
# runs 120 and is timed from step 20 on.
if part 2 "(2) one stage vs PyTorch's loop vs the plain LibTorch loop, 86M gpt"; then
  for round in $(seq "${ROUNDS:-2}"); do
    timeout 90 "$python" "$src/bench/device/torch_loop.py" "${loop[@]}" --steps 100 --warmup 20 \
      >"$out/torch_loop_$round.json" 2>"$out/torch_loop_$round.err"
    note "{\"check\": \"torch_loop\", \"round\": $round, \"result\": $(cat "$out/torch_loop_$round.json" 2>/dev/null || echo null)}"
    timeout 90 "$bin/plain_loop" --model gpt --model-option layers=12 --model-option width=768 --model-option heads=12 \
      --model-option context=1024 --batch 8 --steps 100 --warmup 20 --device cuda --precision bf16 --pin-memory \
      >"$out/plain_$round.json" 2>"$out/plain_$round.err"
    note "{\"check\": \"plain_loop\", \"round\": $round, \"result\": $(cat "$out/plain_$round.json" 2>/dev/null || echo null)}"
    timeout 90 "$bin/pipetrain" train "${gpt[@]}" --nproc 1 --schedule gpipe --stage-bounds 0,14 --microbatches 1 \
      --microbatch-size 8 --max-steps 120 --log-jsonl "$out/one_$round.jsonl" --summary-json "$out/one_$round.json" \
      >"$out/one_$round.log" 2>&1
    note "{\"check\": \"one_stage\", \"round\": $round, \"samples_per_second\": $(steady "$out/one_$round.jsonl" 20 8), \"framework_seconds_per_action\": $("$python" -c "import json,sys; print(json.load(open(sys.argv[1]))['ranks'][0]['framework_seconds_per_action'])" "$out/one_$round.json" 2>/dev/null || echo null)}"
    tail -n 3 "$results"
  done
  save
fi

# Where a step's time goes: Chrome traces (LibTorch's profiler, Kineto) of two steps of
# pipetrain's one stage, the plain loop and PyTorch's loop on the 86M gpt, each after 20
# steps of warm-up, summarized by bench/device/trace_summary.py (the GPU's busy and idle
# time in the traced span, the kernels that took it); the traces go into the snapshot
# compressed.
if part trace "where a step's time goes: traces of the three at batch 8"; then
  timeout 90 "$python" "$src/bench/device/torch_loop.py" "${loop[@]}" --steps 24 --warmup 20 \
    --trace "$out/trace_torch_loop.json" >"$out/trace_torch_loop.out" 2>&1
  timeout 90 "$bin/plain_loop" --model gpt --model-option layers=12 --model-option width=768 --model-option heads=12 \
    --model-option context=1024 --batch 8 --steps 24 --warmup 20 --device cuda --precision bf16 --pin-memory \
    --trace "$out/trace_plain.json" >"$out/trace_plain.out" 2>&1
  timeout 90 "$bin/pipetrain" train "${gpt[@]}" --nproc 1 --schedule gpipe --stage-bounds 0,14 --microbatches 1 \
    --microbatch-size 8 --max-steps 30 --torch-trace "$out/trace_pipetrain" >"$out/trace_pipetrain.log" 2>&1
  "$python" "$src/bench/device/trace_summary.py" "$out"/trace_*.json | sed 's/^{/{"check": "trace", /' >>"$results"
  tail -n 3 "$results"
  gzip -f "$out"/trace_*.json
  save
fi

# (3) MFU at a billion parameters: gpt of 24 layers, width 2048, 16 heads, context 1024
# (1.21 B parameters, vocabulary 256), bf16, no recomputation: pipetrain's one stage at
# batch 8 and 4 x 8, PyTorch's loop at 8. FLOPs per token 6N + 12 L T d (docs/gpu.md).
big=(--model-option layers=24 --model-option width=2048 --model-option heads=16 --model-option context=1024)
if part 3 "(3) MFU of a 1.21B gpt"; then
  timeout 120 "$python" "$src/bench/device/torch_loop.py" --layers 24 --width 2048 --heads 16 --context 1024 \
    --batch 8 --precision bf16 --steps 30 --warmup 10 >"$out/torch_loop_1b.json" 2>"$out/torch_loop_1b.err"
  note "{\"check\": \"torch_loop_1b\", \"result\": $(cat "$out/torch_loop_1b.json" 2>/dev/null || echo null)}"
  for m in 1 4; do
    timeout 150 "$bin/pipetrain" train --model gpt "${big[@]}" --dataset synthetic --precision bf16 --device cuda \
      --no-eval --epochs 1 --nproc 1 --schedule gpipe --stage-bounds 0,26 --microbatches $m --microbatch-size 8 \
      --max-steps $((m == 1 ? 40 : 16)) --log-jsonl "$out/one_1b_$m.jsonl" --summary-json "$out/one_1b_$m.json" \
      >"$out/one_1b_$m.log" 2>&1
    note "{\"check\": \"one_stage_1b\", \"microbatches\": $m, \"samples_per_second\": $(steady "$out/one_1b_$m.jsonl" $((m == 1 ? 10 : 4)) $((8 * m))), \"peak_gpu_memory\": $("$python" -c "import json,sys; print(json.load(open(sys.argv[1]))['ranks'][0]['peak_device_memory_bytes'])" "$out/one_1b_$m.json" 2>/dev/null || echo null)}"
    tail -n 2 "$out/one_1b_$m.log"
  done
  save
fi

# (1, 4) Planned where it trains: `train --batch` profiles on the GPU at bf16 (one
# profiling process per GPU), plans, trains; the summary's prediction beside the
# allocator's peak. The 1.21B gpt on one rank, then the 86M gpt as a 2-rank pipeline
# sharing the GPU (--no-replication: a pipeline, not data parallelism), over Gloo.
if part 1b "(1, 4) planned on the GPU: 1.21B gpt, 1 rank"; then
  timeout 150 "$bin/pipetrain" train --model gpt "${big[@]}" --dataset synthetic --precision bf16 --device cuda \
    --no-eval --epochs 1 --nproc 1 --batch 16 --max-steps 16 --summary-json "$out/planned_1b.json" \
    >"$out/planned_1b.log" 2>&1
  note "$(judge planned_1b "$out/planned_1b.json")"
  grep -E "profil|plan|rank 0|samples/s" "$out/planned_1b.log" | head -n 12
  save
fi
if part 2ranks "(1, 4) planned on the GPU: 86M gpt, 2 ranks sharing it"; then
  timeout 150 "$bin/pipetrain" train "${gpt[@]}" --nproc 2 --batch 32 --no-replication --max-steps 24 \
    --summary-json "$out/planned_2.json" >"$out/planned_2.log" 2>&1
  note "$(judge planned_2_ranks "$out/planned_2.json")"
  grep -E "profil|rank [01]|samples/s" "$out/planned_2.log" | head -n 12
  save
fi

# (a, c) Exactness on CUDA, in the test suite: every schedule against single-GPU training
# of its rule, ranks as threads on the one GPU (in-process, and 2 to 4 ranks over Gloo
# through pinned host memory), the fused Adam against LibTorch's.
if part tests "(a, c) torch tests on CUDA"; then
  timeout 150 "$bin/pipetrain_torch_tests" --gtest_filter='Devices.*:Cuda.*' --gtest_brief=0 \
    --gtest_output="json:$out/cuda_tests.json" >"$out/cuda_tests.log" 2>&1
  note "{\"check\": \"cuda_tests\", \"rc\": $?}"
  grep -E "^\[ +(OK|FAILED|SKIPPED|PASSED) " "$out/cuda_tests.log" | tail -n 30
  save
fi

# (d) NCCL for one rank from the CLI; the GPU's link to pinned host memory; a profile
# taken on this GPU at bf16 and the planner's prediction for 8 such GPUs
# (examples/clusters/for-gpu-profiles/h200-nvlink.json, speed 1 since the profile is this GPU's; and
# through host memory at the link measured).
small=(--model gpt --model-option layers=8 --model-option width=256 --model-option heads=4
       --model-option context=128 --dataset synthetic --device cuda --timeout 60)
if part d "(d) NCCL, the host link, the prediction for 8 GPUs"; then
  timeout 60 "$bin/pipetrain" train "${small[@]}" --nproc 1 --wire nccl --schedule 1f1b --stage-bounds 0,10 \
    --microbatches 4 --microbatch-size 8 --epochs 1 --max-steps 10 --no-eval --summary-json "$out/nccl_one.json" \
    >"$out/nccl_one.log" 2>&1
  note "{\"check\": \"nccl_one_rank\", \"rc\": $?, \"channel\": $("$python" -c "import json,sys; print(json.dumps([r['data_channel'] for r in json.load(open(sys.argv[1]))['ranks']]))" "$out/nccl_one.json" 2>/dev/null || echo null)}"
  tail -n 2 "$out/nccl_one.log"
  timeout 60 "$bin/pipetrain" profile-network --nproc 2 --device cuda --sizes 4M,64M --repeats 5 --out "$out/network.json" \
    >"$out/network.log" 2>&1
  note "{\"check\": \"profile_network_gpu\", \"rc\": $?, \"cluster\": $(cat "$out/network.json" 2>/dev/null || echo null)}"
  timeout 90 "$bin/pipetrain" profile "${gpt[@]:0:10}" --batch 8 --device cuda --precision bf16 --out "$out/gpt_gpu.json" \
    >"$out/profile_gpu.log" 2>&1
  note "{\"check\": \"profile_on_gpu\", \"rc\": $?}"
  "$python" - "$src/examples/clusters/for-gpu-profiles/h200-nvlink.json" "$out/network.json" "$out/server_through_host.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
try:
    link = min(d["host_link_bandwidth"] for d in json.load(open(sys.argv[2]))["devices"])
except Exception:
    link = 25e9  # PCIe 5 x16 in practice, where the measurement failed
for d in c["devices"]:
    d["host_link_bandwidth"] = link
for l in c["levels"]:
    l["through_host"] = True
json.dump(c, open(sys.argv[3], "w"))
PY
  for cluster in "$src/examples/clusters/for-gpu-profiles/h200-nvlink.json" "$out/server_through_host.json"; do
    name=$(basename "$cluster" .json)
    timeout 30 "$bin/pipetrain" plan --graph "$out/gpt_gpu.json" --cluster "$cluster" --batch 64 --json \
      >"$out/plan_$name.json" 2>"$out/plan_$name.err"
    note "{\"check\": \"predicted_8_gpus\", \"cluster\": \"$name\", \"rc\": $?, \"chosen\": $("$python" -c "import json,sys; d=json.load(open(sys.argv[1])); print(json.dumps({k: d[k] for k in ('schedule', 'depth', 'microbatches', 'microbatch_size', 'predicted_throughput', 'bubble_fraction', 'peak_memory_bytes')}))" "$out/plan_$name.json" 2>/dev/null || echo null)}"
  done
  save
fi

# NCCL between two processes on one GPU: does NCCL pair them at all (bench/device/
# nccl_one_gpu.py, through the device's PyTorch), and at what rates if it does.
if part nccl2 "NCCL between two processes sharing the GPU"; then
  timeout 120 "$python" "$src/bench/device/nccl_one_gpu.py" --sizes 4M,64M --repeats 10 --timeout 60 \
    >>"$results" 2>"$out/nccl2.err"
  tail -n 1 "$results"
  save
fi

# (e) The peer: torch.distributed.pipelining in one process on the GPU, against
# pipetrain's one stage over the same 4 micro-batches of 2.
if part e "(e) torch.distributed.pipelining on the GPU, and pipetrain at 4 x 2"; then
  timeout 100 "$python" "$src/bench/device/pipelining_peer.py" --batch 8 --microbatches 4 --steps 60 --warmup 15 \
    --precision bf16 --schedules ScheduleGPipe,Schedule1F1B,ScheduleInterleaved1F1B >>"$results" 2>"$out/peer.err"
  timeout 90 "$bin/pipetrain" train "${gpt[@]}" --nproc 1 --schedule gpipe --stage-bounds 0,14 --microbatches 4 \
    --microbatch-size 2 --max-steps 80 --log-jsonl "$out/mb4.jsonl" >"$out/mb4.log" 2>&1
  note "{\"check\": \"one_stage_4x2\", \"samples_per_second\": $(steady "$out/mb4.jsonl" 15 8)}"
  save
fi

# Every schedule from the CLI: 2 ranks as processes on the one GPU, over Gloo; then a
# GPU run's checkpoint resumed on the CPU. SCHEDULES="" skips both.
if [ -n "${SCHEDULES-all}" ] && part schedules "every schedule from the CLI, 2 processes on the GPU"; then
  for schedule in ${SCHEDULES:-gpipe 1f1b zb-h1 zb-h2 interleaved zb-v dualpipev pipedream 2bw pipemare}; do
    case $schedule in
      interleaved) bounds=(--stage-bounds 0,3,5,8,10 --chunks 2) ;;
      zb-v | dualpipev) bounds=(--stage-bounds 0,3,5,8,10) ;;
      *) bounds=(--stage-bounds 0,5,10) ;;
    esac
    timeout 60 "$bin/pipetrain" train "${small[@]}" "${bounds[@]}" --nproc 2 --schedule "$schedule" --microbatches 4 \
      --microbatch-size 8 --epochs 1 --max-steps 6 --no-eval --summary-json "$out/sched_$schedule.json" \
      >"$out/sched_$schedule.log" 2>&1
    note "{\"check\": \"schedule_on_cuda\", \"schedule\": \"$schedule\", \"rc\": $?, \"final_loss\": $("$python" -c "import json,sys; print(json.load(open(sys.argv[1]))['final_loss'])" "$out/sched_$schedule.json" 2>/dev/null || echo null)}"
    part schedules "  $schedule done" >/dev/null || break
  done
  ckpt=$out/ckpt
  timeout 60 "$bin/pipetrain" train "${small[@]}" --nproc 2 --schedule 1f1b --microbatches 4 --microbatch-size 8 \
    --stage-bounds 0,5,10 --epochs 1 --max-steps 5 --no-eval --checkpoint-dir "$ckpt" >"$out/ckpt_gpu.log" 2>&1
  rc1=$?
  timeout 90 "$bin/pipetrain" train "${small[@]}" --device cpu --nproc 2 --schedule 1f1b --microbatches 4 \
    --microbatch-size 8 --stage-bounds 0,5,10 --epochs 2 --max-steps 5 --no-eval --resume "$ckpt" \
    --summary-json "$out/ckpt_cpu.json" >"$out/ckpt_cpu.log" 2>&1
  note "{\"check\": \"checkpoint_cuda_to_cpu\", \"rc_gpu\": $rc1, \"rc_cpu_resume\": $?}"
  rm -rf "$ckpt"
fi
part done "done"
save
cat "$results"
