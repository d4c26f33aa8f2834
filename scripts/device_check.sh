#!/usr/bin/env bash
# The GPU check (docs/gpu.md): run on a lent GPU machine, in one call, against that
# machine's PyTorch (the same 2.11 the build pins). Prepared here, it needs on the GPU
# machine only python3 with torch and the binaries built here:
#
#   bash scripts/device_check.sh BIN OUT
#
# BIN holds pipetrain, pipetrain-torch, pipetrain_torch_tests and plain_loop (scripts/device_bundle.sh
# strips them into .device/bin); OUT receives the logs, the summaries and results.jsonl,
# one JSON line per figure. Every step has its own time limit, and a step that fails
# is reported and the next one runs.
set -uo pipefail
bin=$(realpath "${1:?BIN: the folder with pipetrain, pipetrain-torch, pipetrain_torch_tests, plain_loop}")
out=$(realpath -m "${2:?OUT: where the results go}")
mkdir -p "$out"
src=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-python3}
torch_dir=$("$python" -c 'import os, torch; print(os.path.dirname(torch.__file__))')
nvidia_dir=$("$python" -c 'import nvidia; print(list(nvidia.__path__)[0])')
export LD_LIBRARY_PATH="$torch_dir/lib:$nvidia_dir/cu13/lib:$nvidia_dir/nccl/lib:$nvidia_dir/cudnn/lib:${LD_LIBRARY_PATH:-}"
results=$out/results.jsonl
: >"$results"
log() { echo "== $(date +%T) $*" | tee -a "$out/steps.log"; }
note() { echo "$1" >>"$results"; }

log "machine"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$out/gpu.txt"
"$python" -c 'import torch; print("python torch", torch.__version__, torch.version.cuda)' | tee -a "$out/gpu.txt"
"$bin/pipetrain" info 2>&1 | tee -a "$out/gpu.txt"

# (a) exactness on CUDA and (c) ranks sharing the GPU over Gloo, in the test suite: ranks
# as threads on the one GPU, every schedule against single-GPU training of its rule.
log "(a, c) torch tests on CUDA"
timeout 300 "$bin/pipetrain_torch_tests" --gtest_filter='Devices.*:Cuda.*' --gtest_brief=0 \
  --gtest_output="json:$out/cuda_tests.json" >"$out/cuda_tests.log" 2>&1
echo "exit $?" >>"$out/cuda_tests.log"
tail -n 30 "$out/cuda_tests.log"

small=(--model gpt --model-option layers=8 --model-option width=256 --model-option heads=4
       --model-option context=128 --dataset synthetic --device cuda --timeout 60)
# Every schedule from the CLI: 2 ranks as processes on the one GPU, over Gloo.
# SCHEDULES="" skips this part (and the checkpoint's) when a rerun needs only the figures.
log "every schedule from the CLI, 2 processes on the GPU"
for schedule in ${SCHEDULES-gpipe 1f1b zb-h1 zb-h2 interleaved zb-v dualpipev pipedream 2bw pipemare}; do
  case $schedule in
    interleaved) bounds=(--stage-bounds 0,3,5,8,10 --chunks 2) ;;
    zb-v | dualpipev) bounds=(--stage-bounds 0,3,5,8,10) ;;
    *) bounds=(--stage-bounds 0,5,10) ;;
  esac
  timeout 120 "$bin/pipetrain" train "${small[@]}" "${bounds[@]}" --nproc 2 --schedule "$schedule" --microbatches 4 \
    --microbatch-size 8 --epochs 1 --max-steps 10 --summary-json "$out/sched_$schedule.json" \
    >"$out/sched_$schedule.log" 2>&1
  rc=$?
  "$python" - "$schedule" "$rc" "$out/sched_$schedule.json" >>"$results" <<'PY'
import json, sys
name, rc, path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
try:
    s = json.load(open(path))
    print(json.dumps({"check": "schedule_on_cuda", "schedule": name, "rc": rc, "samples_per_second": s["throughput"],
                      "final_loss": s["final_loss"], "test_accuracy": s.get("test_accuracy"),
                      "devices": [r["device"] for r in s["ranks"]],
                      "peak_gpu_memory": [r["peak_device_memory_bytes"] for r in s["ranks"]],
                      "bubble": [round(r["bubble_fraction"], 3) for r in s["ranks"]],
                      "predicted_bubble": [round(r["predicted_bubble_fraction"], 3) for r in s["ranks"]]}))
except Exception as e:
    print(json.dumps({"check": "schedule_on_cuda", "schedule": name, "rc": rc, "error": str(e)}))
PY
  tail -n 3 "$out/sched_$schedule.log"
done

# A GPU run's checkpoint resumes on the CPU.
if [ -n "${SCHEDULES-all}" ]; then
log "checkpoint: cuda, then resumed on the cpu"
ckpt=$out/ckpt
timeout 120 "$bin/pipetrain" train "${small[@]}" --nproc 2 --schedule 1f1b --microbatches 4 --microbatch-size 8 \
  --stage-bounds 0,5,10 --epochs 1 --max-steps 5 --no-eval --checkpoint-dir "$ckpt" >"$out/ckpt_gpu.log" 2>&1
rc1=$?
timeout 200 "$bin/pipetrain" train "${small[@]}" --device cpu --nproc 2 --schedule 1f1b --microbatches 4 \
  --microbatch-size 8 --stage-bounds 0,5,10 --epochs 2 --max-steps 5 --no-eval --resume "$ckpt" \
  --summary-json "$out/ckpt_cpu.json" >"$out/ckpt_cpu.log" 2>&1
note "{\"check\": \"checkpoint_cuda_to_cpu\", \"rc_gpu\": $rc1, \"rc_cpu_resume\": $?}"
rm -rf "$ckpt"
tail -n 2 "$out/ckpt_cpu.log"
fi

# (d) NCCL: the channel between ranks on GPUs of their own runs in Cuda.OverNcclBetweenGpus
# above (one rank per GPU, up to 3; one GPU: one rank). Here: one rank from the CLI over
# NCCL, and what the GPU's link to its host costs a message that goes through host memory
# (profile-network, 2 ranks on the GPU over Gloo). Then the planner and the simulator, on
# a profile taken on this GPU, for 8 of them (examples/clusters/gpu-server.json, NVLink),
# and for 8 whose messages go through host memory at the measured host link.
log "(d) NCCL, the host link, and the simulator's prediction for 8 GPUs"
timeout 90 "$bin/pipetrain" train "${small[@]}" --nproc 1 --wire nccl --schedule 1f1b --stage-bounds 0,10 \
  --microbatches 4 --microbatch-size 8 --epochs 1 --max-steps 10 --no-eval --summary-json "$out/nccl_one.json" \
  >"$out/nccl_one.log" 2>&1
note "{\"check\": \"nccl_one_rank\", \"rc\": $?, \"channel\": $("$python" -c "import json,sys; print(json.dumps([r['data_channel'] for r in json.load(open(sys.argv[1]))['ranks']]))" "$out/nccl_one.json" 2>/dev/null || echo null)}"
tail -n 2 "$out/nccl_one.log"
timeout 90 "$bin/pipetrain" profile-network --nproc 2 --device cuda --sizes 4M,64M --repeats 5 --out "$out/network.json" \
  >"$out/network.log" 2>&1
note "{\"check\": \"profile_network_gpu\", \"rc\": $?, \"cluster\": $(cat "$out/network.json" 2>/dev/null || echo null)}"
cat "$out/network.log"
timeout 150 "$bin/pipetrain" profile --model gpt --model-option layers=12 --model-option width=768 --model-option heads=12 \
  --model-option context=1024 --batch 8 --device cuda --out "$out/gpt_gpu.json" >"$out/profile_gpu.log" 2>&1
note "{\"check\": \"profile_on_gpu\", \"rc\": $?}"
tail -n 4 "$out/profile_gpu.log"
"$python" - "$src/examples/clusters/gpu-server.json" "$out/network.json" "$out/server_through_host.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
try:
    link = min(d["host_link_bandwidth"] for d in json.load(open(sys.argv[2]))["devices"])
except Exception:
    link = 25e9  # PCIe 4 x16, where the measurement failed
for d in c["devices"]:
    d["host_link_bandwidth"] = link
for l in c["levels"]:
    l["through_host"] = True
json.dump(c, open(sys.argv[3], "w"))
PY
for cluster in "$src/examples/clusters/gpu-server.json" "$out/server_through_host.json"; do
  name=$(basename "$cluster" .json)
  timeout 60 "$bin/pipetrain" plan --graph "$out/gpt_gpu.json" --cluster "$cluster" --batch 64 --json \
    >"$out/plan_$name.json" 2>"$out/plan_$name.err"
  note "{\"check\": \"predicted_8_gpus\", \"cluster\": \"$name\", \"rc\": $?, \"chosen\": $("$python" -c "import json,sys; d=json.load(open(sys.argv[1])); print(json.dumps({k: d[k] for k in ('schedule', 'depth', 'microbatches', 'microbatch_size', 'predicted_throughput', 'bubble_fraction', 'peak_memory_bytes')}))" "$out/plan_$name.json" 2>/dev/null || echo null)}"
  head -c 600 "$out/plan_$name.err"
done

# The rate of a pipetrain run in its steady state: samples/s between its step FIRST and
# its last step, read off the reporting rank's --log-jsonl (each step's wall clock), so
# that start-up, warm-up and the first steps' autotuning stay out.
steady() {  # LOG FIRST SAMPLES_PER_STEP
  "$python" - "$@" <<'PY'
import json, sys
path, first, per_step = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
steps = [json.loads(l) for l in open(path) if '"event": "step"' in l or '"event":"step"' in l]
a = next(x for x in steps if x["step"] >= first)
b = steps[-1]
print((b["step"] - a["step"]) * per_step / (b["wall_seconds"] - a["wall_seconds"]))
PY
}

# (b) efficiency: one stage against a plain LibTorch loop, a GPT-2-small-sized model in
# bf16, alternated ROUNDS times (3; ONLY_B=1 stops after this part), the loop with its
# batches copied plainly and through pinned memory. The plain loop times 100 steps after 20 warm-up ones;
# pipetrain runs 120 steps and is timed from step 20 on.
gpt=(--model gpt --model-option layers=12 --model-option width=768 --model-option heads=12
     --model-option context=1024 --dataset synthetic --precision bf16 --device cuda --no-eval --epochs 1)
log "(b) plain loop vs one stage"
for round in $(seq "${ROUNDS:-3}"); do
  for pin in "" --pin-memory; do
    timeout 120 "$bin/plain_loop" --model gpt --model-option layers=12 --model-option width=768 --model-option heads=12 \
      --model-option context=1024 --batch 8 --steps 100 --warmup 20 --device cuda \
      --precision bf16 $pin >"$out/plain_$round$pin.json" 2>"$out/plain_$round.err"
    note "{\"check\": \"plain_loop\", \"round\": $round, \"result\": $(cat "$out/plain_$round$pin.json" || echo null)}"
  done
  timeout 150 "$bin/pipetrain" train "${gpt[@]}" --nproc 1 --schedule gpipe --stage-bounds 0,14 --microbatches 1 \
    --microbatch-size 8 --max-steps 120 --log-jsonl "$out/one_$round.jsonl" >"$out/one_$round.log" 2>&1
  note "{\"check\": \"one_stage\", \"round\": $round, \"samples_per_second\": $(steady "$out/one_$round.jsonl" 20 8 || echo null)}"
done

[ -n "${ONLY_B:-}" ] && { log "done"; cat "$results"; exit 0; }

# (e) the peer: torch.distributed.pipelining in one process on the GPU, against
# pipetrain's one stage over the same 4 micro-batches of 2.
log "(e) torch.distributed.pipelining on the GPU, and pipetrain at 4 x 2"
for round in 1 2; do
  timeout 150 "$python" "$src/bench/device/pipelining_peer.py" --batch 8 --microbatches 4 --steps 80 --warmup 20 \
    --precision bf16 --schedules ScheduleGPipe,Schedule1F1B,ScheduleInterleaved1F1B >>"$results" 2>"$out/peer_$round.err"
  timeout 150 "$bin/pipetrain" train "${gpt[@]}" --nproc 1 --schedule gpipe --stage-bounds 0,14 --microbatches 4 \
    --microbatch-size 2 --max-steps 100 --log-jsonl "$out/mb4_$round.jsonl" >"$out/mb4_$round.log" 2>&1
  note "{\"check\": \"one_stage_4x2\", \"round\": $round, \"samples_per_second\": $(steady "$out/mb4_$round.jsonl" 20 8 || echo null)}"
done

# (c) ranks sharing the GPU: the same GPT, 8 micro-batches of 1, on 1, 2 and 4 processes
# (1F1B, Gloo through host copies).
log "(c) 1, 2, 4 processes sharing the GPU"
for n in 1 2 4; do
  bounds=$("$python" -c "n=$n; print(','.join(str(round(i*14/n)) for i in range(n+1)))")
  timeout 150 "$bin/pipetrain" train "${gpt[@]}" --nproc $n --schedule 1f1b --stage-bounds "$bounds" --microbatches 8 \
    --microbatch-size 1 --max-steps 40 --log-jsonl "$out/shared_$n.jsonl" --summary-json "$out/shared_$n.json" \
    >"$out/shared_$n.log" 2>&1
  note "{\"check\": \"shared_gpu\", \"ranks\": $n, \"samples_per_second\": $(steady "$out/shared_$n.jsonl" 10 8 || echo null)}"
  tail -n 5 "$out/shared_$n.log"
done
log "done"
cat "$results"
