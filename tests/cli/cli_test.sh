#!/usr/bin/env bash
# The CLI contract other tooling relies on: outputs, JSON keys, files and exit codes.
# Usage: PIPETRAIN=path/to/pipetrain cli_test.sh SOURCE_DIR
set -u
src=${1:?source dir}
bin=${PIPETRAIN:?set PIPETRAIN}
. "$(dirname "$0")/harness.sh"

# schedule: per-rank text form
check "schedule 1f1b" "$bin" schedule --schedule 1f1b --stages 4 --microbatches 8
[ "$(grep -c '^rank ' "$tmp/out")" -eq 4 ] && passed=$((passed + 1)) || { failed=$((failed + 1)); echo "FAIL: one line per rank"; }
expect "schedule text form" "rank 0: 0F0v0 0F1v0 0F2v0 0F3v0 0B0v0"
for s in gpipe 1f1b pipedream 2bw pipemare zb-h1 zb-h2 zb-v dualpipev; do
  check "schedule $s" "$bin" schedule --schedule "$s" --stages 3 --microbatches 6
done
check "dualpipev csv export" "$bin" schedule --schedule dualpipev --stages 2 --microbatches 4 --write-csv "$tmp/dpv.csv"
check "overlapped pairs in PyTorch's form" grep -q "OVERLAP_F_B" "$tmp/dpv.csv"
check "dualpipev csv import" "$bin" schedule --csv "$tmp/dpv.csv"
refuses "dualpipev m" "at least 6 micro-batches" "$bin" schedule --schedule dualpipev --stages 3 --microbatches 5
check "simulate overlap factor" "$bin" simulate --schedule dualpipev --stages 2 --microbatches 4 --uniform 1,2,1 \
  --overlap-factor 0.8
refuses "overlap factor range" "overlap_factor" "$bin" simulate --schedule dualpipev --stages 2 --microbatches 4 \
  --uniform 1,2,1 --overlap-factor 0.2
check "schedule interleaved" "$bin" schedule --schedule interleaved --stages 2 --microbatches 4 --chunks 2
check "schedule csv export" "$bin" schedule --schedule zb-h1 --stages 3 --microbatches 6 --write-csv "$tmp/zb.csv"
check "schedule csv import" "$bin" schedule --csv "$tmp/zb.csv"
expect "a csv is said valid" "zb.csv: a valid schedule of 3 ranks"
expect "and what it matches" "the same compute order as pipetrain's zb-h1"
printf '0F0,0B0,0F1,0B1\n1F1,1B1,1F0,1B0\n' >"$tmp/deadlock.csv"
refuses "deadlocked csv" "deadlocks" "$bin" schedule --csv "$tmp/deadlock.csv"
refuses "schedule errors name the cell" "for 1F1 at line 2, column 1" "$bin" schedule --csv "$tmp/deadlock.csv"
# PyTorch's older notation (B input gradients, W weight gradients, BW the full backward),
# and a file with its own communication.
printf '0F0,0SEND_F0,0RECV_B0,0BW0\n1RECV_F0,1F0,1B0,1SEND_B0,1W0\n' >"$tmp/comms.csv"
check "older notation with communication" "$bin" schedule --csv "$tmp/comms.csv"
expect "older notation said" "read in PyTorch's older notation"
expect "communication checked" "its SEND/RECV actions are the messages lowering needs"
check "simulate a csv with communication" "$bin" simulate --csv "$tmp/comms.csv" --uniform 1,2,1 --stages 2 \
  --microbatches 1
# pipetrain hands the torch commands to pipetrain-torch beside it, --help included; alone,
# it says what is missing.
check "train help through pipetrain-torch" "$bin" train --help
expect "train help" "--microbatches"
mkdir -p "$tmp/alone" && cp "$bin" "$tmp/alone/pipetrain"
refuses "pipetrain without pipetrain-torch" "pipetrain-torch, which is missing" "$tmp/alone/pipetrain" info
check "schedule without pipetrain-torch" "$tmp/alone/pipetrain" schedule --schedule 1f1b --stages 2 --microbatches 2
refuses "unknown schedule" "unknown schedule" "$bin" schedule --schedule nope --stages 2 --microbatches 2
refuses "zero stages" "stages" "$bin" schedule --schedule 1f1b --stages 0 --microbatches 2
refuses "bad number" "microbatches" "$bin" schedule --schedule 1f1b --stages 2 --microbatches x
refuses "interleaved m" "divisible" "$bin" schedule --schedule interleaved --stages 4 --microbatches 6 --chunks 2

# simulate: synthetic shortcut
check "simulate uniform json" "$bin" simulate --schedule 1f1b --stages 4 --microbatches 8 --uniform 1,2 --json
for key in '"iteration_time"' '"throughput"' '"bubble_fraction"' '"ranks"' '"peak_activations"' \
           '"weight_versions"' '"peak_memory_bytes"'; do
  expect "json has $key" "$key"
done
expect "1f1b bubble 3/11" '"bubble_fraction": 0.2727'
check "simulate trace and svg" "$bin" simulate --schedule zb-h1 --stages 4 --microbatches 8 --uniform 1,2,1 \
  --trace "$tmp/t.json" --svg "$tmp/g.svg"
check "trace written" test -s "$tmp/t.json"
check "svg written" grep -q "<svg" "$tmp/g.svg"
refuses "uniform arity" "--uniform" "$bin" simulate --schedule 1f1b --stages 2 --microbatches 2 --uniform 1
refuses "neither input" "either" "$bin" simulate --schedule 1f1b --stages 2

# simulate: the worked example
ex="$src/examples/transformer"
check "simulate example" "$bin" simulate --graph "$ex/graph.json" --cluster "$ex/cluster.json" --plan "$ex/plan.json"
expect "example report" "iteration time"
sed 's/"layers"/"layerz"/' "$ex/plan.json" >"$tmp/bad_plan.json"
refuses "malformed plan" "bad_plan.json" "$bin" simulate --graph "$ex/graph.json" --cluster "$ex/cluster.json" --plan "$tmp/bad_plan.json"
echo '{"format": ' >"$tmp/broken.json"
refuses "broken json" "broken.json" "$bin" simulate --graph "$tmp/broken.json" --cluster "$ex/cluster.json" --plan "$ex/plan.json"

# train: real processes over Gloo
train=("$bin" train --model mlp --model-option input=16 --model-option width=32 --dataset synthetic
       --microbatches 4 --microbatch-size 8 --epochs 1 --max-steps 5 --timeout 20)
mkdir -p "$tmp/scratch"
check "train 2 ranks" env TMPDIR="$tmp/scratch" "${train[@]}" --nproc 2 --schedule 1f1b \
  --summary-json "$tmp/summary.json" --svg "$tmp/train.svg" --trace "$tmp/train.json"
check "the launcher's own plan and profile are removed" test -z "$(ls -A "$tmp/scratch")"
for key in '"test_accuracy"' '"final_loss"' '"throughput"' '"wall_seconds"' '"bubble_fraction"' '"peak_memory_bytes"' \
           '"predicted_bubble_fraction"' '"overhead_fraction"'; do
  check "summary has $key" grep -q -- "$key" "$tmp/summary.json"
done
check "summary has each rank's own stages' action times" python3 - "$tmp/summary.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
for r in s["ranks"]:
    timed = {(a["stage"], a["type"]) for a in r["action_seconds"]}
    passes = {(stage, t) for stage in r["stages"] for t in ("F", "B", "STEP")}
    replicated = {(stage, "ALLREDUCE") for stage in r["stages"]}  # when the planner replicated
    assert passes <= timed <= passes | replicated, (r["rank"], timed)
    assert all(0 < a["seconds"] < s["wall_seconds"] for a in r["action_seconds"]), r["action_seconds"]
PY
check "measured gantt" grep -q "measured" "$tmp/train.svg"
# The ranks' heap (util/allocator.h): tcmalloc, preloaded by `pipetrain`, where the
# machine has it; PIPETRAIN_MALLOC=retain keeps glibc's, with its freed memory kept.
heaps_are() {
  python3 - "$1" "$2" <<'PY'
import json, os, sys
path, wanted = sys.argv[1], sys.argv[2]
if wanted == "default":
    libs = ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib", "/usr/local/lib")
    has = any(os.path.exists(f"{d}/libtcmalloc_minimal.so.4") for d in libs)
    wanted = "tcmalloc" if has else "glibc, freed memory retained"
heaps = {r["heap"] for r in json.load(open(path))["ranks"]}
assert heaps == {wanted}, (heaps, wanted)
PY
}
check "each rank names its heap: tcmalloc where the machine has it" heaps_are "$tmp/summary.json" default
check "PIPETRAIN_MALLOC=retain: glibc" env PIPETRAIN_MALLOC=retain "${train[@]}" --nproc 2 --schedule 1f1b \
  --summary-json "$tmp/retain.json"
check "its ranks on glibc, freed memory kept" heaps_are "$tmp/retain.json" "glibc, freed memory retained"
check "train plans itself" "${train[@]}" --nproc 2 --schedule 1f1b --no-replication --plan-out "$tmp/auto.json"
expect "planner table" "chosen: 1f1b, 2 stages"
check "the plan it trained" grep -q '"pipetrain.plan"' "$tmp/auto.json"
# The profile cache: the same run plans from it at once, --reprofile measures again, and
# so does a run whose cached profile is damaged.
check "the same run again" "${train[@]}" --nproc 2 --schedule 1f1b --no-replication --summary-json "$tmp/cached.json"
expect "its profile came from the cache" "profile: from the cache"
expect "its stage times sharpened the cached profile" "profile sharpened by this run's stage times"
expect "it says what came before training" "before training: profiling"
check "the summary says how long profiling and planning took" python3 - "$tmp/cached.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))["planner"]
assert p["profile"]["cached"] is True and p["profile"]["measured_seconds"] > 0, p["profile"]
assert p["profile"]["runs_merged"] >= 1 and 0 <= p["planning_seconds"] < 60, p
PY
check "--reprofile measures again" "${train[@]}" --nproc 2 --schedule 1f1b --no-replication --reprofile
expect "profiled anew" "kept in the profile cache for the next run"
for f in "$PIPETRAIN_CACHE_DIR"/*.json; do case $f in *.key.json) ;; *) echo '{"format": ' >"$f" ;; esac; done
check "a damaged cached profile is measured again" "${train[@]}" --nproc 2 --schedule 1f1b --no-replication
expect "it says why" "the profile cache's entry cannot be used"
expect "and keeps the new one" "kept in the profile cache for the next run"
refuses "pipeline longer than the model" "too few" "${train[@]}" --nproc 9 --no-replication
check "train zb-h1 3 ranks" "${train[@]}" --nproc 3 --schedule zb-h1 --summary-json "$tmp/three.json"
# Ranks that take turns on the cores teach the profile their time on a core.
expect "3 ranks sharpen the profile's times" "profile sharpened by this run's stage times"
check "3 ranks on 2 cores: each rank's time on a core, and its compute predicted shared and alone" \
  python3 - "$tmp/three.json" <<'PY'
import json, os, sys
s = json.load(open(sys.argv[1]))
chosen = s["planner"]["chosen"]
busy, alone = chosen["rank_busy_seconds"], chosen["rank_core_seconds"]
assert len(busy) == len(alone) == 3 and all(0 < a <= b * (1 + 1e-9) for a, b in zip(alone, busy)), chosen
if os.cpu_count() < 3:  # taking turns on the cores stretches some rank's compute
    assert sum(alone) < sum(busy), chosen
assert all(0 < r["core_run_fraction"] <= 1 for r in s["ranks"]), [r["core_run_fraction"] for r in s["ranks"]]
PY
check "train --batch: the planner splits it" "$bin" train --model mlp --model-option input=16 --model-option width=32 \
  --dataset synthetic --batch 64 --nproc 2 --max-steps 3 --no-eval --timeout 20 --plan-out "$tmp/batch.json"
check "the plan keeps the batch" grep -q '"microbatches"' "$tmp/batch.json"
refuses "--batch with micro-batching" "--batch leaves the micro-batching" "${train[@]}" --nproc 2 --batch 64
# Time to accuracy: calibration trains each update rule that could win, keeps the curves
# beside the profile, and plan ranks by them too (docs/time_to_accuracy.md).
tta=("$bin" train --model mlp --model-option layers=2 --model-option width=32 --dataset fashion-mnist --batch 64
     --nproc 2 --max-steps 3 --no-eval --timeout 20 --allow-async --objective time-to-accuracy --calibration-seconds 1)
check "train --objective time-to-accuracy" "${tta[@]}" --summary-json "$tmp/tta.json"
expect "calibration trains the synchronous rule" "calibrated synchronous, a step per mini-batch of 64"
expect "and asynchronous ones" "calibrated pipedream"
expect "the table ranks by predicted time" "s to target"
expect "and says what the estimate is" "ranked by predicted time to a held-out loss"
check "the summary keeps the calibration" python3 - "$tmp/tta.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))["planner"]
assert p["objective"] == "time-to-accuracy", p["objective"]
c = p["calibration"]
assert c["rules_measured"] >= 2 and c["samples_per_rule"] >= 8 * 64 and c["target_loss"] > 0, c
PY
# (The first run sharpened the profile, so the second may look at a rule more; the
# curves it has are not trained again.)
check "the same run again takes the calibration from its cache" "${tta[@]}"
expect "the curves come from the cache" "from the cache)"
cp "$tmp/out" "$tmp/again.txt"
check "the synchronous rule is not trained again" sh -c '! grep -q "calibrated synchronous" "$1"' sh "$tmp/again.txt"
cal=$(ls "$PIPETRAIN_CACHE_DIR"/*.calibration.json | head -n 1)
check "plan --objective time-to-accuracy from the cached calibration" "$bin" plan --graph "${cal%.calibration.json}" \
  --cluster "$ex/cluster.json" --batch 64 --allow-async --objective time-to-accuracy --calibration "$cal"
expect "plan ranks by it" "s to target"
check "plan --json keeps the estimates" "$bin" plan --graph "${cal%.calibration.json}" --cluster "$ex/cluster.json" \
  --batch 64 --allow-async --objective time-to-accuracy --calibration "$cal" --json
cp "$tmp/out" "$tmp/plan_tta.json"
check "each calibrated candidate has its predicted time" python3 -c '
import json, sys
j = json.load(open(sys.argv[1]))
assert j["objective"] == "time-to-accuracy" and j["target_loss"] > 0, j.get("objective")
timed = [c["to_target"]["seconds"] for c in j["candidates"] if c["to_target"]["calibrated"]]
assert timed and j["to_target"]["calibrated"], j["to_target"]
assert all(s is None or s > 0 for s in timed), timed
' "$tmp/plan_tta.json"
refuses "plan's objective needs the calibration" "needs --calibration" "$bin" plan --graph "${cal%.calibration.json}" \
  --cluster "$ex/cluster.json" --batch 64 --objective time-to-accuracy
refuses "a calibration of another batch" "calibrate at this batch" "$bin" plan --graph "${cal%.calibration.json}" \
  --cluster "$ex/cluster.json" --batch 128 --allow-async --objective time-to-accuracy --calibration "$cal"
refuses "an unknown objective" "accuracy not in {throughput,time-to-accuracy}" "${train[@]}" --nproc 2 --objective accuracy
refuses "an objective for a plan given by hand" "leave it nothing to choose" "${train[@]}" --nproc 2 \
  --stage-bounds 0,2,4 --objective time-to-accuracy
check "train zb-v 2 ranks" "${train[@]}" --nproc 2 --schedule zb-v --no-replication
expect "zb-v plan: 4 stages on 2 ranks" "chosen: zb-v, 4 stages"
check "train dualpipev 2 ranks" "${train[@]}" --nproc 2 --schedule dualpipev --stage-bounds 0,1,2,4,5
check "train from a plan" "$bin" train --model mlp --dataset synthetic --plan "$src/examples/train/mlp_plan.json" \
  --nproc 2 --max-steps 3 --no-eval --timeout 20
# PipeDream's shape, a pipeline copied onto the next ranks (each stage's replicas spread
# over the copies: planner/replicated_pipeline.h), trains as its stages on consecutive
# ranks do: the same synchronous step.
python3 - "$src/examples/train/mlp_plan.json" "$tmp" <<'PLANS'
import json, sys
plan = json.load(open(sys.argv[1]))
plan["microbatches"] = 8
for name, first, second in (("copies", ["rank0", "rank2"], ["rank1", "rank3"]),
                            ("consecutive", ["rank0", "rank1"], ["rank2", "rank3"])):
    plan["stages"][0]["devices"], plan["stages"][1]["devices"] = first, second
    json.dump(plan, open(f"{sys.argv[2]}/{name}_plan.json", "w"))
PLANS
for shape in copies consecutive; do
  check "train a pipeline's $shape" "$bin" train --model mlp --dataset synthetic --plan "$tmp/${shape}_plan.json" \
    --nproc 4 --max-steps 3 --no-eval --timeout 30 --summary-json "$tmp/$shape.json"
done
check "copies train as consecutive stages do" python3 -c '
import json, sys
a, b = (json.load(open(f))["final_loss"] for f in sys.argv[1:])
assert abs(a - b) <= 1e-6 * abs(b), (a, b)' "$tmp/copies.json" "$tmp/consecutive.json"
refuses "plan for another model" "does not have" "$bin" train --model gpt --dataset synthetic \
  --plan "$src/examples/train/mlp_plan.json" --nproc 2 --max-steps 3
refuses "plan for other ranks" "3 ranks" "$bin" train --model mlp --dataset synthetic \
  --plan "$src/examples/train/mlp_plan.json" --nproc 3 --max-steps 3
# asynchronous schedules train from the command line and from a plan file
check "train pipedream" "${train[@]}" --nproc 2 --schedule pipedream --no-replication --summary-json "$tmp/async.json"
expect "async semantics said" "trains asynchronously (pipedream: steps on 1"
# ... but PipeDream on one stage replicated over the whole mini-batch is synchronous SGD
cat > "$tmp/pipedream_dp.json" <<'PLAN'
{"format": "pipetrain.plan", "version": 1, "microbatch_size": 16, "microbatches": 2, "schedule": "pipedream",
 "stages": [{"layers": ["fc0", "fc1", "fc2", "fc3", "head"], "devices": ["rank0", "rank1"]}]}
PLAN
check "train pipedream as data parallelism" "$bin" train --model mlp --dataset synthetic \
  --plan "$tmp/pipedream_dp.json" --nproc 2 --max-steps 3 --no-eval --timeout 20 --summary-json "$tmp/pipedream_dp_summary.json"
expect "synchronous pipedream said" "pipedream here trains as synchronous SGD"
check "synchronous pipedream summary" grep -q -- '"asynchronous": false' "$tmp/pipedream_dp_summary.json"
for key in '"asynchronous": true' '"history"' '"weight_versions": 2' '"weight_bytes"' '"test_loss"'; do
  check "async summary has $key" grep -q -- "$key" "$tmp/async.json"
done
check "train pipedream vertical sync" "${train[@]}" --nproc 3 --schedule pipedream --vertical-sync --stage-bounds 0,2,4,5
check "train pipemare T1 T2" "${train[@]}" --nproc 2 --schedule pipemare --pipemare-t1 true --pipemare-t2 true \
  --pipemare-warmup 3 --pipemare-decay 0.2 --stage-bounds 0,3,5
check "train pipedream replicated" "${train[@]}" --nproc 2 --schedule pipedream --data-parallel
sed 's/"schedule": "1f1b"/"schedule": {"name": "2bw"}/' "$src/examples/train/mlp_plan.json" >"$tmp/2bw_plan.json"
check "train 2bw from a plan" "$bin" train --model mlp --dataset synthetic --plan "$tmp/2bw_plan.json" \
  --nproc 2 --max-steps 3 --no-eval --timeout 20
check "train data parallel" "${train[@]}" --nproc 2 --data-parallel --plan-out "$tmp/dp.json"
check "data-parallel plan written" grep -q '"dev1"' "$tmp/dp.json"
refuses "plan and schedule flags" "decides" "$bin" train --model mlp --dataset synthetic \
  --plan "$src/examples/train/mlp_plan.json" --nproc 2 --schedule gpipe
refuses "plan and schedule options" "--vertical-sync" "$bin" train --model mlp --dataset synthetic \
  --plan "$src/examples/train/mlp_plan.json" --nproc 2 --vertical-sync
refuses "vertical sync elsewhere" "vertical sync" "${train[@]}" --nproc 2 --schedule 2bw --vertical-sync \
  --stage-bounds 0,3,5
refuses "bad pipemare decay" "pipemare_decay" "${train[@]}" --nproc 2 --schedule pipemare --pipemare-decay 1.5 \
  --stage-bounds 0,3,5
check "the planner may pick an async schedule" "${train[@]}" --nproc 2 --schedule auto --allow-async --no-replication
expect "async candidates ranked" "asynchronous: trains with stale weights"
refuses "missing dataset, hand-given plan" "fashion" "$bin" train --model fmnist-cnn --dataset fashion-mnist \
  --nproc 2 --stage-bounds 0,2,4 --max-steps 1 --data-dir /nonexistent
refuses "rank without a plan" "need a plan" env RANK=0 WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=29999 \
  "${train[@]}"
refuses "bad plan bounds" "stages" "${train[@]}" --nproc 2 --stage-bounds 0,1,2,5
refuses "unknown model" "unknown model" "${train[@]}" --nproc 2 --model nope
refuses "missing dataset dir" "fashion" "$bin" train --model fmnist-cnn --dataset fashion-mnist --nproc 2 --max-steps 1 \
  --data-dir /nonexistent
# fmnist-cnn trains on Fashion-MNIST unless told otherwise, not on random noise.
refuses "fmnist-cnn's own data by default" "fashion" "$bin" train --model fmnist-cnn --nproc 2 \
  --stage-bounds 0,2,4 --max-steps 1 --data-dir /nonexistent
check "synthetic data is said" "$bin" train --model mlp --model-option input=8 --model-option layers=2 \
  --model-option width=8 --nproc 2 --data-parallel --microbatches 2 --microbatch-size 4 --max-steps 1 --no-eval
expect "the note on synthetic data" "no --dataset: mlp trains on synthetic data"
# Faults from outside, as a crash or a hang would strike: a killed rank (SIGKILL) and a
# stopped one (SIGSTOP: alive but silent) end the job, naming that rank, with nothing
# left running. `fault SIGNAL` runs a long job on 3 ranks, signals rank 1 two seconds in.
fault() {
  local signal=$1 rank1="" launcher
  start=$(date +%s)
  "${train[@]}" --nproc 3 --stage-bounds 0,2,4,5 --max-steps 100000 --epochs 100 --timeout 3 >"$tmp/fault.out" 2>&1 &
  launcher=$!
  for _ in $(seq 100); do  # until rank 1 runs
    rank1=$(for p in $(pgrep -P "$launcher"); do tr '\0' '\n' <"/proc/$p/environ" | grep -qx RANK=1 && echo "$p"; done)
    [ -n "$rank1" ] && break
    sleep 0.1
  done
  sleep 2
  kill "-$signal" "$rank1"
  wait "$launcher"
  status=$?
  elapsed=$(( $(date +%s) - start ))
  remaining=$(pgrep -P "$launcher" | wc -l)
  kill -0 "$rank1" 2>/dev/null && { remaining=$((remaining + 1)); kill -9 "$rank1"; }
}
fault KILL
[ "$status" -ne 0 ] && grep -q "rank 1 was killed by signal Killed" "$tmp/fault.out" && passed=$((passed + 1)) ||
  { failed=$((failed + 1)); echo "FAIL: killed rank not named (exit $status):"; tail -3 "$tmp/fault.out"; }
[ "$elapsed" -lt 15 ] && [ "$remaining" -eq 0 ] && passed=$((passed + 1)) ||
  { failed=$((failed + 1)); echo "FAIL: killed rank: ${elapsed}s, $remaining processes left"; }
fault STOP
[ "$status" -ne 0 ] && grep -q "rank(s) 1 stopped responding" "$tmp/fault.out" && passed=$((passed + 1)) ||
  { failed=$((failed + 1)); echo "FAIL: stopped rank not named (exit $status):"; tail -3 "$tmp/fault.out"; }
[ "$elapsed" -lt 30 ] && [ "$remaining" -eq 0 ] && passed=$((passed + 1)) ||
  { failed=$((failed + 1)); echo "FAIL: stopped rank: ${elapsed}s, $remaining processes left"; }

# Numbers on the command line: a short message and the usage exit status 2.
"$bin" simulate --schedule 1f1b --stages 2 --microbatches -3 --uniform 1,2 >"$tmp/out" 2>"$tmp/err"
[ $? -eq 2 ] && grep -q "must be a positive number, found -3" "$tmp/err" && [ "$(wc -c <"$tmp/err")" -lt 200 ] &&
  passed=$((passed + 1)) || { failed=$((failed + 1)); echo "FAIL: negative micro-batches:"; cat "$tmp/err"; }
for bad in "--max-steps -5" "--max-steps 0" "--timeout 0" "--epochs -1" "--microbatches -1" "--microbatch-size 0"; do
  # shellcheck disable=SC2086
  refuses "train $bad" "must be a positive number" "${train[@]}" --nproc 2 --data-parallel $bad
done
# Names mistyped: said with the nearest known one, before anything runs.
refuses "a mistyped command" "unknown command 'trian'; did you mean train?" "$bin" trian --model mlp
refuses "a mistyped option" "unknown option --grap for \`pipetrain plan\`; did you mean --graph?" "$bin" plan --grap g.json
refuses "a mistyped train option" "did you mean --microbatches?" "${train[@]}" --nproc 2 --microbatchs 4
refuses "a mistyped schedule, before profiling" "unknown schedule \"1fib\"" "${train[@]}" --nproc 2 --schedule 1fib
if grep -q "profil" "$tmp/out" "$tmp/err"; then failed=$((failed + 1)); echo "FAIL: profiled before the schedule's check"
else passed=$((passed + 1)); fi
check "the version" "$bin" --version
expect "the version names pipetrain" "^pipetrain [0-9]"
refuses "too many stages" "at most 8192" "$bin" schedule --schedule 1f1b --stages 100000 --microbatches 100000
for s in gpipe zb-v interleaved; do
  refuses "the most stages an int holds ($s)" "at most 8192" "$bin" schedule --schedule $s --stages 2147483647 \
    --microbatches 1
done
refuses "too many chunks" "--chunks" "$bin" simulate --schedule interleaved --stages 2 --chunks 100000 \
  --microbatches 4 --uniform 1,2
refuses "too many mini-batches" "mini-batches" "$bin" simulate --schedule 1f1b --stages 2 --microbatches 4 \
  --uniform 1,2 --minibatches 10000000
refuses "NaN times" "--uniform" "$bin" simulate --schedule 1f1b --stages 2 --microbatches 4 --uniform nan,nan,nan

# profile and profile-network: measured files that the simulator accepts
mlp=(--model mlp --model-option input=16 --model-option width=32)
check "profile mlp" "$bin" profile "${mlp[@]}" --batch 4 --repeats 1 --out "$tmp/profile.json"
expect "profile table" "fc3 "
expect "profile wrote" "wrote"
check "a profile measures the LibTorch code its passes paged in and its core's speed" python3 -c '
import json, sys
m = json.load(open(sys.argv[1]))["process_memory"]
assert m["framework_bytes"] > 0 and m["runs"] == 0, m
how = json.load(open(sys.argv[1]))["profiled_as"]
assert 0 < how["probe_seconds"] < 1, how' "$tmp/profile.json"
check "profile with the data the first stage loads" "$bin" profile "${mlp[@]}" --batch 4 --repeats 1 \
  --dataset synthetic --out "$tmp/profile_data.json"
expect "loading said" "includes loading a batch of synthetic"
check "profile at two batch sizes" "$bin" profile "${mlp[@]}" --batch 4,16 --repeats 1 --dataset synthetic \
  --out "$tmp/profile_two.json"
expect "the second size summed" "at batch 16: F + I + W"
check "the second size's times are in the file" python3 -c '
import json, sys
layers = json.load(open(sys.argv[1]))["layers"]
assert all([o["batch"] for o in l["other_batches"]] == [16] for l in layers), layers
assert all(l["other_batches"][0]["forward_seconds"] > 0 for l in layers), layers' "$tmp/profile_two.json"
check "profile until the passes agree, with progress" "$bin" profile "${mlp[@]}" --batch 4 --repeats 9 --min-repeats 2 \
  --spread 1000 --progress --out "$tmp/profile_min.json"
expect "two passes were enough" "means of 2 passes"
refuses "profile: fewer repeats than the least" "least repeats" "$bin" profile "${mlp[@]}" --batch 4 --repeats 2 \
  --min-repeats 3 --out "$tmp/p5.json"
refuses "profile a batch size twice" "lists 4 twice" "$bin" profile "${mlp[@]}" --batch 4,8,4 --out "$tmp/p4.json"
refuses "profile a batch larger than the data" "fewer than --batch" "$bin" profile "${mlp[@]}" --batch 5000 \
  --dataset synthetic --out "$tmp/p2.json"
refuses "profile data that does not fit the model" "fortunes serves byte tokens" "$bin" profile "${mlp[@]}" \
  --batch 4 --dataset fortunes --out "$tmp/p3.json"
check "profile-network 2 ranks" "$bin" profile-network --nproc 2 --sizes 64K,1M --repeats 3 --out "$tmp/cluster.json"
expect "network latency" "latency"
host=$(hostname)
cat >"$tmp/profiled_plan.json" <<EOF
{"format": "pipetrain.plan", "version": 1, "microbatch_size": 4, "microbatches": 4, "schedule": "1f1b",
 "stages": [{"layers": ["fc0", "fc1", "fc2"], "devices": ["$host-0"]},
            {"layers": ["fc3", "head"], "devices": ["$host-1"]}]}
EOF
check "simulate profiled graph and cluster" "$bin" simulate --graph "$tmp/profile.json" \
  --cluster "$tmp/cluster.json" --plan "$tmp/profiled_plan.json"
expect "profiled simulation" "iteration time"
cp "$tmp/out" "$tmp/simulated.out"
# A standalone profile on several threads measures how a step divides over them, the ranks'
# cluster says the threads each computes on, and the simulation prices the profile at them.
check "a profile on more threads than the ranks' is brought to theirs" python3 -c '
import json, sys
how = json.load(open(sys.argv[1]))["profiled_as"]
ranks = [d["threads"] for d in json.load(open(sys.argv[2]))["devices"]]
assert all(t >= 1 for t in ranks), ranks
simulated = open(sys.argv[3]).read()
if how["threads"] > max(ranks):
    assert how["thread_speedup"] > 0, how
    assert "note: the profile was timed on %d threads" % how["threads"] in simulated, simulated
else:
    assert "note: the profile was timed" not in simulated, (how, simulated)' \
  "$tmp/profile.json" "$tmp/cluster.json" "$tmp/simulated.out"
refuses "profile bad batch" "batch" "$bin" profile "${mlp[@]}" --batch 0 --out "$tmp/p0.json"
refuses "profile unknown model" "unknown model" "$bin" profile --model nope --batch 4 --out "$tmp/p1.json"
refuses "profile unwritable" "/nonexistent/g.json" "$bin" profile "${mlp[@]}" --batch 4 --out /nonexistent/g.json
refuses "profile-network one rank" "nproc" "$bin" profile-network --nproc 1 --out "$tmp/c1.json"
# A multi-branch model: profiled with its edges, planned by the graph partitioner, trained
# as a stage graph (the branches on their own ranks, joined by the fusion stage).
check "profile a multi-branch model" "$bin" profile --model fmnist-branch --model-option channels=2 --batch 4 \
  --repeats 1 --out "$tmp/branch.json"
expect "profiled merge" '^ *"conv2",$' "$tmp/branch.json"  # fusion reads conv2 and mlp
check "plan a multi-branch model" "$bin" plan --graph "$tmp/branch.json" --partitioner graph \
  --cluster "$src/examples/clusters/gpu-server.json" --batch 64 --out "$tmp/branch_plan.json"
expect "graph plans say so" " graph "
cat > "$tmp/branch_stages.json" <<'JSON'
{"format": "pipetrain.plan", "version": 1, "microbatch_size": 4, "microbatches": 4, "schedule": {"name": "1f1b"},
 "stages": [{"layers": ["conv1", "conv2"], "devices": ["dev0"]}, {"layers": ["mlp"], "devices": ["dev1"]},
            {"layers": ["fusion", "head"], "devices": ["dev2"]}]}
JSON
check "train a stage graph" "$bin" train --model fmnist-branch --model-option channels=2 --dataset synthetic \
  --nproc 3 --plan "$tmp/branch_stages.json" --max-steps 2 --no-eval
expect "stage graph trained" "trained fmnist-branch with 1f1b on 3 ranks"

# Recomputation where memory binds (docs/planner.md#recomputation): the zoo's gpt as
# profiled, on four devices of 512 MiB.
cat > "$tmp/small_gpus.json" <<'JSON'
{"format": "pipetrain.cluster", "version": 1,
 "devices": [{"count": 4, "name_prefix": "gpu", "kind": "gpu", "speed": 1.0, "memory_bytes": 536870912}],
 "levels": [{"name": "nvlink", "group_size": 4, "bandwidth": 3e11, "latency": 3e-6}]}
JSON
refuses "no plan fits without recomputation" "activation recomputation" "$bin" plan \
  --graph "$src/examples/graphs/gpt.json" --cluster "$tmp/small_gpus.json" --batch 64 --recompute none
check "plan recomputes where it must" "$bin" plan --graph "$src/examples/graphs/gpt.json" \
  --cluster "$tmp/small_gpus.json" --batch 64 --out "$tmp/recompute_plan.json"
expect "the table says which stages recompute" "recompute"
expect "the choice says it" "recomputing activations"
expect "the plan file says it" '"recompute": true' "$tmp/recompute_plan.json"
check "train with every stage recomputing" "${train[@]}" --nproc 2 --stage-bounds 0,2,5 --recompute full \
  --plan-out "$tmp/recompute_hand.json" --no-eval
expect "a hand-made plan recomputes" '"recompute": true' "$tmp/recompute_hand.json"
# Selective recomputation: the first stage recomputes one of its two layers.
sed '0,/"recompute": true/s//"recompute": true, "recompute_layers": 1/' "$tmp/recompute_hand.json" >"$tmp/recompute_part.json"
planned=("$bin" train --model mlp --model-option input=16 --model-option width=32 --dataset synthetic --epochs 1
         --max-steps 5 --timeout 20 --nproc 2 --no-eval)
check "train with part of a stage recomputing" "${planned[@]}" --plan "$tmp/recompute_part.json"
expect "part of a stage recomputed" "trained mlp with"
sed 's/"recompute_layers": 1/"recompute_layers": 3/' "$tmp/recompute_part.json" >"$tmp/recompute_bad.json"
refuses "more layers recomputed than the stage has" "recompute_layers: must be between 1 and 2" \
  "${planned[@]}" --plan "$tmp/recompute_bad.json"
refuses "a size it cannot read" "unknown unit 'parsecs'" "${train[@]}" --nproc 2 --rank-memory "12 parsecs"
refuses "--rank-memory steers the planner only" "--rank-memory steers the planner" "${train[@]}" --nproc 2 \
  --stage-bounds 0,2,5 --rank-memory 1GiB
# What a new user hit (issue 82): a model too big for its ranks refused before any
# profiling, with the numbers; a batch too small to fill a pipeline, and a schedule that
# planned data parallelism, each said.
refuses "weights, gradients and optimizer state beyond the ranks, before profiling" \
  "needs 12.2 MiB of weights, gradients and adam's state before any activation, more than its 2 ranks hold together (2 x 1.0 MiB)" \
  "${planned[@]}" --batch 16 --model-option width=512 --rank-memory 1MiB
check "a batch of 1 on 2 ranks" "${planned[@]}" --batch 1
expect "the unfilled pipeline is said" "a mini-batch of 1 samples makes 1 micro-batch(es) for 2 stages"
# gpt, whose steps dwarf its all-reduce, so that data parallelism wins by far on a loaded
# machine too (the tiny mlp's plan flipped to a pipeline there once, on noise).
check "--schedule 1f1b planned as data parallelism" "$bin" train --model gpt --dataset synthetic --epochs 1 \
  --max-steps 5 --timeout 20 --nproc 2 --no-eval --batch 32 --schedule 1f1b --summary-json "$tmp/dp.json" \
  --report "$tmp/dp_report"
expect "data parallelism under --schedule is said" "1f1b on 2 ranks planned data parallelism"
expect "the report calls it data parallelism" "data parallelism (1f1b&apos;s order of passes)" "$tmp/dp_report/report.html"

# plan: the planner and the exploration table
graph=$src/examples/transformer/graph.json
cluster4=$src/examples/clusters/gpu-cluster-4-nodes.json
check "plan" "$bin" plan --graph "$graph" --cluster "$cluster4" --batch 64 --out "$tmp/planned.json"
expect "plan table" "samples/s"
expect "plan runner-up" "runner-up lost"
expect "plan sync only" "--allow-async adds them"
check "simulate the chosen plan" "$bin" simulate --graph "$graph" --cluster "$cluster4" --plan "$tmp/planned.json"
check "plan json" "$bin" plan --graph "$graph" --cluster "$cluster4" --batch 64 --json
for key in schedule stages layers replicas devices microbatch_size microbatches predicted_throughput \
    peak_memory_bytes search_seconds; do
  expect "plan json $key" "\"$key\""
done
check "plan with async" "$bin" plan --graph "$graph" --cluster "$src/examples/clusters/fpga-ring.json" --batch 64 \
  --allow-async
expect "async marked" "asynchronous: trains with stale weights"
check "plan one schedule" "$bin" plan --graph "$graph" --cluster "$cluster4" --batch 64 --schedule gpipe --json
expect "plan fixed schedule" '"schedule": "gpipe"'
refuses "plan micro-batch" "does not divide" "$bin" plan --graph "$graph" --cluster "$cluster4" --batch 64 \
  --microbatch-sizes 3
# train's narrowing options, on plan too: no replicas, every device, a micro-batch count.
check "plan a pure pipeline on every device" "$bin" plan --graph "$graph" --cluster "$src/examples/clusters/gpu-server.json" --batch 64 \
  --no-replication --use-all-devices --microbatches 8 --out "$tmp/pure.json"
check "its stages hold one device each" "$PIPETRAIN_PYTHON" -c 'import json, sys
p = json.load(open(sys.argv[1]))
assert all(len(s["devices"]) == 1 for s in p["stages"]) and p["microbatches"] == 8, p' "$tmp/pure.json"
refuses "plan micro-batch count" "--microbatches 7 does not divide --batch 64" "$bin" plan --graph "$graph" \
  --cluster "$cluster4" --batch 64 --microbatches 7
cat >"$tmp/tiny.json" <<EOF
{"format": "pipetrain.cluster", "version": 1,
 "devices": [{"count": 2, "name_prefix": "d", "memory_bytes": 1000}],
 "levels": [{"name": "n", "group_size": 2, "bandwidth": 1e9, "latency": 0}]}
EOF
refuses "plan cannot fit" "no plan fits" "$bin" plan --graph "$graph" --cluster "$tmp/tiny.json" --batch 8

finish "cli"
