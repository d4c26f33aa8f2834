#!/usr/bin/env bash
# Checkpoints from the CLI: a rank killed mid-run leaves an intact checkpoint and a
# message saying how to resume; the resumed run, and a run restarted by --max-restarts,
# end with the parameters of a run that was never interrupted; `export` writes what
# Python loads; what a crash leaves half-written and what is corrupted are refused.
# Usage: PIPETRAIN=path/to/pipetrain checkpoint_test.sh SOURCE_DIR
set -u
src=${1:?source dir}
bin=${PIPETRAIN:?set PIPETRAIN}
python=${PIPETRAIN_PYTHON:?the Python with the pinned torch (set by CMake)}
. "$(dirname "$0")/harness.sh"

check "the example writes a model and data" "$python" "$src/examples/byo/make_model.py" "$tmp"
# Six epochs of 112 mini-batches, a checkpoint every 20: a few seconds, long enough to strike.
train=("$bin" train --model-file "$tmp/model.pt" --data-file "$tmp/data.pt" --nproc 2 --stage-bounds 0,4,7
  --microbatches 2 --microbatch-size 16 --epochs 6 --no-eval --checkpoint-every 20 --timeout 5)

check "uninterrupted run" "${train[@]}" --checkpoint-dir "$tmp/whole" --export "$tmp/whole.pt"

# Starts the run in the background; once its first checkpoint is complete, kills rank 1.
# Sets $status (the launcher's exit status) and $left (processes still running after).
kill_rank1_after_first_checkpoint() {
  local log=$1 launcher rank1=""; shift
  "$@" >"$log" 2>&1 &
  launcher=$!
  wait_for_checkpoint "$tmp/ckpt" 200
  rank1=$(for p in $(pgrep -P "$launcher"); do tr '\0' '\n' <"/proc/$p/environ" | grep -qx RANK=1 && echo "$p"; done)
  kill -KILL "$rank1"
  wait "$launcher"
  status=$?
  left=$(pgrep -P "$launcher" | wc -l)
}

kill_rank1_after_first_checkpoint "$tmp/killed.out" "${train[@]}" --checkpoint-dir "$tmp/ckpt" --export "$tmp/resumed.pt"
[ "$status" -ne 0 ] && [ "$left" -eq 0 ] && passed=$((passed + 1)) ||
  { failed=$((failed + 1)); echo "FAIL: killed run: exit $status, $left processes left"; tail -3 "$tmp/killed.out"; }
expect "the killed rank is named" "rank 1 was killed" "$tmp/killed.out"
expect "how to resume" "run the same command with --resume" "$tmp/killed.out"
# What a crash during a checkpoint's write leaves: files without a manifest, and newer.
mkdir -p "$tmp/ckpt/step-99999999.1"
head -c 1000 /dev/urandom >"$tmp/ckpt/step-99999999.1/rank-0.pt"
check "resume from the newest intact checkpoint" "${train[@]}" --checkpoint-dir "$tmp/ckpt" --resume "$tmp/ckpt" \
  --export "$tmp/resumed.pt"
check "export the final checkpoint" "$bin" export "$tmp/ckpt" --out "$tmp/exported.pt"
expect "exported the last one" "mini-batches trained" 

# Restarted by the launcher itself after the kill.
rm -rf "$tmp/ckpt"
kill_rank1_after_first_checkpoint "$tmp/restarted.out" "${train[@]}" --checkpoint-dir "$tmp/ckpt" --max-restarts 1 \
  --export "$tmp/restarted.pt"
[ "$status" -eq 0 ] && passed=$((passed + 1)) ||
  { failed=$((failed + 1)); echo "FAIL: --max-restarts did not finish the run (exit $status)"; tail -5 "$tmp/restarted.out"; }
expect "restarted from a checkpoint" "restart 1 of 1, from checkpoint" "$tmp/restarted.out"

# The finished run resumed with the same --epochs: refused before any rank starts, and
# without advice to resume the very checkpoint.
refuses "resume a finished run" "leaves nothing to train (raise --epochs)" "${train[@]}" --checkpoint-dir "$tmp/ckpt" \
  --resume "$tmp/ckpt"
if grep -q -- "--resume" "$tmp/err"; then
  failed=$((failed + 1)); echo "FAIL: a finished run's refusal advises --resume:"; cat "$tmp/err"
else passed=$((passed + 1)); fi

check "python: every run ends with the same parameters" "$python" - "$tmp/whole.pt" "$tmp/resumed.pt" \
  "$tmp/exported.pt" "$tmp/restarted.pt" <<'PY'
import sys
import torch
models = [torch.jit.load(p) for p in sys.argv[1:]]
want = dict(models[0].named_parameters())
for path, m in zip(sys.argv[2:], models[1:]):
    got = dict(m.named_parameters())
    assert got.keys() == want.keys(), path
    worst = max((got[k] - want[k]).abs().max().item() for k in want)
    print(f"{path}: largest difference {worst:.3g}")
    assert worst == 0.0, path
x = torch.randn(5, *[int(d) for d in torch.load(sys.argv[1].replace("whole.pt", "data.pt"))["inputs"].shape[1:]])
assert torch.equal(models[0](x), models[2](x))
PY

# A zoo model's checkpoint exports as a dict of tensors for torch.load.
check "zoo checkpoint" "$bin" train --model mlp --dataset synthetic --model-option input=8 --model-option layers=3 \
  --model-option width=16 --model-option classes=4 --nproc 2 --data-parallel --microbatches 2 --microbatch-size 4 \
  --max-steps 3 --no-eval --checkpoint-dir "$tmp/zoo"
check "zoo export" "$bin" export "$tmp/zoo" --out "$tmp/zoo.pt"
check "python loads the zoo export" "$python" -c "
import sys, torch
d = torch.load('$tmp/zoo.pt')
assert 'fc0.body.0.weight' in d and d['fc0.body.0.weight'].shape == (16, 8), sorted(d)
"

# A model whose layers hold submodules (the DAG example's branches are Sequentials):
# its checkpoint exports under the module's own names, as the train-time export does.
check "nested layers' run" "$bin" train --model-file "$tmp/dag_model.pt" --data-file "$tmp/data.pt" --nproc 2 \
  --stage-bounds 0,1,3 --microbatches 2 --microbatch-size 16 --max-steps 3 --no-eval --checkpoint-dir "$tmp/dag" \
  --export "$tmp/dag_trained.pt"
check "nested layers' export" "$bin" export "$tmp/dag" --out "$tmp/dag_exported.pt"
check "python: the nested export is the trained model" "$python" - "$tmp/dag_trained.pt" "$tmp/dag_exported.pt" <<'PY'
import sys
import torch
trained, exported = (dict(torch.jit.load(p).named_parameters()) for p in sys.argv[1:])
assert trained.keys() == exported.keys() and "deep.2.weight" in exported, sorted(exported)
assert all(torch.equal(trained[k], exported[k]) for k in trained)
PY

# Broken checkpoints are refused, naming the file and the fault.
newest=$(ls -d "$tmp/zoo"/step-* | tail -1)
cp -r "$newest" "$tmp/broken"
truncate -s 100 "$tmp/broken/rank-0.pt"
refuses "truncated checkpoint" "rank-0.pt: truncated, 100 of" "$bin" export "$tmp/broken" --out "$tmp/x.pt"
echo '{"format": "pipetrain.checkpoint", "version": 1, "position": 7}' >"$tmp/broken/manifest.json"
refuses "bad manifest" "manifest.json: position: expected" "$bin" export "$tmp/broken" --out "$tmp/x.pt"
refuses "not a checkpoint" "checkpoint $tmp/nowhere: no such checkpoint folder" "$bin" export "$tmp/nowhere" --out "$tmp/x.pt"
refuses "resume another model" "does not match this run: the model" "$bin" train --model-file "$tmp/dag_model.pt" \
  --data-file "$tmp/data.pt" --nproc 2 --stage-bounds 0,1,3 --microbatches 2 --microbatch-size 16 --resume "$tmp/ckpt"
test ! -e "$tmp/x.pt" && passed=$((passed + 1)) || { failed=$((failed + 1)); echo "FAIL: a refused export wrote"; }

finish checkpoint_test
