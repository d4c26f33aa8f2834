#!/usr/bin/env bash
# Elastic restarts: with --min-nproc, a rank lost for good (killed when no restart is
# left) does not end the job. It goes on with the ranks left, under a plan made for them,
# from the newest checkpoint resharded to it; and it trains as a run started on those
# ranks from that checkpoint under that plan does, loss for loss; its metrics log's clock
# runs on across the shrink.
# Usage: PIPETRAIN=path/to/pipetrain elastic_test.sh SOURCE_DIR
set -u
src=${1:?source dir}
bin=${PIPETRAIN:?set PIPETRAIN}
python=${PIPETRAIN_PYTHON:?the Python with the pinned torch (set by CMake)}
. "$(dirname "$0")/harness.sh"

check "the example writes a model and data" "$python" "$src/examples/byo/make_model.py" "$tmp"
common=(train --model-file "$tmp/model.pt" --data-file "$tmp/data.pt" --epochs 2 --no-eval --timeout 5)

refuses "--min-nproc needs checkpoints" "give --checkpoint-dir" "$bin" "${common[@]}" --batch 32 --nproc 3 --min-nproc 2
refuses "--min-nproc re-plans" "drop one of them" "$bin" "${common[@]}" --nproc 3 --min-nproc 2 \
  --checkpoint-dir "$tmp/x" --stage-bounds 0,2,4,7

# Three ranks; once the first checkpoint is complete, rank 2 is killed with no restart left.
# Every checkpoint is kept: the reference starts from the one the job went on from.
"$bin" "${common[@]}" --batch 32 --nproc 3 --min-nproc 2 --checkpoint-dir "$tmp/ckpt" --checkpoint-every 20 \
  --keep-checkpoints 1000 --plan-out "$tmp/plan.json" \
  --log-jsonl "$tmp/elastic.jsonl" --summary-json "$tmp/summary.json" >"$tmp/elastic.out" 2>&1 &
launcher=$!
wait_for_checkpoint "$tmp/ckpt" 600
rank2=$(for p in $(pgrep -P "$launcher"); do tr '\0' '\n' <"/proc/$p/environ" | grep -qx RANK=2 && echo "$p"; done)
if [ -n "$rank2" ] && kill -KILL "$rank2"; then passed=$((passed + 1)); else
  failed=$((failed + 1)); echo "FAIL: found no rank 2 to kill"; fi
wait "$launcher"
status=$?
[ "$status" -eq 0 ] && passed=$((passed + 1)) ||
  { failed=$((failed + 1)); echo "FAIL: the elastic job did not finish (exit $status)"; tail -20 "$tmp/elastic.out"; }
expect "the job went on with 2 ranks" "going on with 2 ranks from checkpoint" "$tmp/elastic.out"
expect "it finished on 2 ranks" "on 2 ranks: " "$tmp/elastic.out"
from=$(grep -o "going on with 2 ranks from checkpoint [^,]*" "$tmp/elastic.out" | head -1 | awk '{print $NF}')

# The reference: the same checkpoint and plan, started on 2 ranks.
check "the same checkpoint and plan on 2 ranks" "$bin" "${common[@]}" --nproc 2 --plan "$tmp/plan.json" \
  --resume "$from" --checkpoint-dir "$tmp/reference" --log-jsonl "$tmp/reference.jsonl"
check "python: the same losses step for step, and the summary says what happened" "$python" - "$tmp/elastic.jsonl" \
  "$tmp/reference.jsonl" "$tmp/summary.json" <<'PY'
import json, sys
def steps(path):
    return [json.loads(l) for l in open(path) if '"event": "step"' in l or '"event":"step"' in l]
elastic, reference, summary = steps(sys.argv[1]), steps(sys.argv[2]), json.load(open(sys.argv[3]))
assert reference, "the reference logged no steps"
tail = elastic[-len(reference):]
for a, b in zip(tail, reference):
    assert (a["epoch"], a["step"]) == (b["epoch"], b["step"]), (a, b)
    assert abs(a["loss"] - b["loss"]) <= 1e-6 * max(1.0, abs(b["loss"])), (a, b)
times = [s["wall_seconds"] for s in elastic]
assert all(b >= a for a, b in zip(times, times[1:])), "the log's clock went back after the shrink"
shrinks = [e for e in summary["events"] if e["event"] == "shrink"]
assert len(shrinks) == 1 and shrinks[0]["ranks"] == 2, summary["events"]
assert summary["world_size"] == 2 and len(summary["ranks"]) == 2
print(f"{len(reference)} steps after the shrink equal; the shrink at {shrinks[0]['seconds']:.1f} s")
PY

finish elastic_test
