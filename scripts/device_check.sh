#!/usr/bin/env bash
# The GPU check (docs/gpu.md): run on a lent GPU machine, in one call, against that
# machine's PyTorch (the same 2.11 the build pins). Prepared here, it needs on the GPU
# machine only python3 with torch and the binaries built here:
#
#   bash scripts/device_check.sh BIN OUT
#
# BIN holds pipetrain, pipetrain_torch_tests and plain_loop (scripts/device_bundle.sh
# strips them into .device/bin); OUT receives the logs, the summaries and results.jsonl,
# one JSON line per figure. Every step has its own time limit, and a step that fails
# is reported and the next one runs.
set -uo pipefail
bin=$(realpath "${1:?BIN: the folder with pipetrain, pipetrain_torch_tests, plain_loop}")
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
log "every schedule from the CLI, 2 processes on the GPU"
for schedule in gpipe 1f1b zb-h1 zb-h2 interleaved zb-v dualpipev pipedream 2bw pipemare; do
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

# (b) efficiency: one stage against a plain LibTorch loop, a GPT-2-small-sized model in
# bf16. pipetrain's rate is the marginal one between a 20- and a 100-step run, so that
# start-up and warm-up cancel out; the plain loop times 80 steps after 20 warm-up ones.
gpt=(--model gpt --model-option layers=12 --model-option width=768 --model-option heads=12
     --model-option context=1024 --dataset synthetic --precision bf16 --device cuda)
log "(b) plain loop vs one stage"
for round in 1 2; do
  timeout 150 "$bin/plain_loop" --model gpt --model-option layers=12 --model-option width=768 --model-option heads=12 \
    --model-option context=1024 --batch 8 --steps 80 --warmup 20 --device cuda \
    --precision bf16 >"$out/plain_$round.json" 2>"$out/plain_$round.err"
  echo "{\"check\": \"plain_loop\", \"round\": $round, \"result\": $(cat "$out/plain_$round.json" || echo null)}" >>"$results"
  for steps in 20 100; do
    timeout 200 "$bin/pipetrain" train "${gpt[@]}" --nproc 1 --schedule gpipe --stage-bounds 0,14 --microbatches 1 \
      --microbatch-size 8 --epochs 1 --max-steps $steps --no-eval --summary-json "$out/one_${round}_$steps.json" \
      >"$out/one_${round}_$steps.log" 2>&1
  done
  "$python" - "$round" "$out/one_${round}_20.json" "$out/one_${round}_100.json" >>"$results" <<'PY'
import json, sys
try:
    a, b = (json.load(open(p)) for p in sys.argv[2:4])
    ta, tb = (s["samples"] / s["throughput"] for s in (a, b))
    rate = (b["samples"] - a["samples"]) / (tb - ta)
    print(json.dumps({"check": "one_stage", "round": int(sys.argv[1]), "samples_per_second": rate,
                      "tokens_per_second": rate * 1024, "peak_gpu_memory": b["ranks"][0]["peak_device_memory_bytes"],
                      "device": b["ranks"][0]["device"], "final_loss": b["final_loss"]}))
except Exception as e:
    print(json.dumps({"check": "one_stage", "round": int(sys.argv[1]), "error": str(e)}))
PY
done

# (e) the peer: torch.distributed.pipelining in one process on the GPU, against
# pipetrain's one stage over the same 4 micro-batches of 2.
log "(e) torch.distributed.pipelining on the GPU"
timeout 240 "$python" "$src/bench/device/pipelining_peer.py" --batch 8 --microbatches 4 --steps 80 --warmup 20 \
  --precision bf16 >>"$results" 2>"$out/peer.err"
for steps in 20 100; do
  timeout 200 "$bin/pipetrain" train "${gpt[@]}" --nproc 1 --schedule gpipe --stage-bounds 0,14 --microbatches 4 \
    --microbatch-size 2 --epochs 1 --max-steps $steps --no-eval --summary-json "$out/mb4_$steps.json" \
    >"$out/mb4_$steps.log" 2>&1
done
"$python" - "$out/mb4_20.json" "$out/mb4_100.json" >>"$results" <<'PY'
import json, sys
try:
    a, b = (json.load(open(p)) for p in sys.argv[1:3])
    ta, tb = (s["samples"] / s["throughput"] for s in (a, b))
    rate = (b["samples"] - a["samples"]) / (tb - ta)
    print(json.dumps({"check": "one_stage_4_microbatches", "samples_per_second": rate, "tokens_per_second": rate * 1024}))
except Exception as e:
    print(json.dumps({"check": "one_stage_4_microbatches", "error": str(e)}))
PY

# (c) overhead of ranks sharing the GPU: the same GPT on 1, 2 and 4 processes (1F1B).
log "(c) 1, 2, 4 processes sharing the GPU"
for n in 2 4; do
  bounds=$("$python" -c "n=$n; print(','.join(str(round(i*14/n)) for i in range(n+1)))")
  timeout 200 "$bin/pipetrain" train "${gpt[@]}" --nproc $n --schedule 1f1b --stage-bounds "$bounds" --microbatches 8 \
    --microbatch-size 1 --epochs 1 --max-steps 12 --no-eval --summary-json "$out/shared_$n.json" \
    >"$out/shared_$n.log" 2>&1
  "$python" - "$n" "$out/shared_$n.json" >>"$results" <<'PY'
import json, sys
try:
    s = json.load(open(sys.argv[2]))
    print(json.dumps({"check": "shared_gpu", "ranks": int(sys.argv[1]), "samples_per_second": s["throughput"],
                      "bubble": [round(r["bubble_fraction"], 3) for r in s["ranks"]],
                      "wait": [round(r["wait_fraction"], 3) for r in s["ranks"]],
                      "peak_gpu_memory": [r["peak_device_memory_bytes"] for r in s["ranks"]]}))
except Exception as e:
    print(json.dumps({"check": "shared_gpu", "ranks": int(sys.argv[1]), "error": str(e)}))
PY
  tail -n 4 "$out/shared_$n.log"
done
log "done"
cat "$results"
