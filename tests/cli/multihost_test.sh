#!/usr/bin/env bash
# Several hosts for real: two network namespaces joined by a veth pair, each its own
# address, one rank in each, started by hand with torchrun's variables. The run must
# match the same run on one host; cutting the link must end both ranks within the
# timeout, naming the peer, with the last checkpoint intact; resuming then finishes.
# Needs root (CAP_SYS_ADMIN) and iproute2; exits 77 (skipped) where it cannot make them.
# Usage: PIPETRAIN=path/to/pipetrain multihost_test.sh SOURCE_DIR
set -u
bin=${PIPETRAIN:?set PIPETRAIN}
. "$(dirname "$0")/harness.sh"

a=pt-host-a-$$ b=pt-host-b-$$
cleanup() { ip netns del "$a" 2>/dev/null; ip netns del "$b" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
# Addresses from the process id, so two runs at once do not collide.
net=10.$((200 + $$ % 50)).$(($$ / 50 % 250))
if ! { ip netns add "$a" && ip netns add "$b" &&
       ip link add "va$$" netns "$a" type veth peer name "vb$$" netns "$b" &&
       ip -n "$a" addr add "$net.1/24" dev "va$$" && ip -n "$b" addr add "$net.2/24" dev "vb$$" &&
       ip -n "$a" link set "va$$" up && ip -n "$b" link set "vb$$" up &&
       ip -n "$a" link set lo up && ip -n "$b" link set lo up; } 2>"$tmp/netns.err"; then
  echo "multihost_test: skipped: cannot make network namespaces here ($(head -1 "$tmp/netns.err"))"
  exit 77
fi

job=(train --model mlp --dataset synthetic --stage-bounds 0,3,5 --microbatches 4 --microbatch-size 8 --no-eval)
# on_hosts LOG_PREFIX PORT ARGS...: rank 0 on host a (the master), rank 1 on host b, at once.
# One thread each, as the local launcher gives two ranks on two cores: sums over other
# thread counts round differently, and the runs are compared exactly.
on_hosts() {
  local log=$1 port=$2; shift 2
  ip netns exec "$a" env MASTER_ADDR="$net.1" MASTER_PORT="$port" RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 OMP_NUM_THREADS=1 \
    "$bin" "$@" >"$log.0" 2>&1 &
  pid0=$!
  ip netns exec "$b" env MASTER_ADDR="$net.1" MASTER_PORT="$port" RANK=1 WORLD_SIZE=2 LOCAL_RANK=0 OMP_NUM_THREADS=1 \
    "$bin" "$@" >"$log.1" 2>&1 &
  pid1=$!
}

# 1. Two hosts train as one job, exactly as two ranks on one host do.
on_hosts "$tmp/two" 29611 "${job[@]}" --max-steps 20
wait "$pid0"; s0=$?; wait "$pid1"; s1=$?
[ "$s0" -eq 0 ] && [ "$s1" -eq 0 ] && passed=$((passed + 1)) ||
  { failed=$((failed + 1)); echo "FAIL: two hosts: exit $s0 $s1"; tail -n 3 "$tmp/two.0" "$tmp/two.1"; }
check "the same job on one host" "$bin" "${job[@]}" --max-steps 20 --nproc 2 --summary-json "$tmp/one.json"
two=$(sed -n 's/.*, loss \([0-9.]*\)$/\1/p' "$tmp/two.1")
one=$(sed -n 's/.*"final_loss": \([0-9.]*\).*/\1/p' "$tmp/one.json")
[ -n "$two" ] && [ "$(printf '%.6f' "$two")" = "$(printf '%.6f' "$one")" ] && passed=$((passed + 1)) ||
  { failed=$((failed + 1)); echo "FAIL: two hosts' final loss '$two', one host's '$one'"; }

# 2. The link between the hosts is cut after the first checkpoint.
on_hosts "$tmp/cut" 29612 "${job[@]}" --epochs 100 --timeout 3 --checkpoint-dir "$tmp/ckpt" --checkpoint-every 10
for _ in $(seq 200); do
  compgen -G "$tmp/ckpt/step-*/manifest.json" >/dev/null && break
  sleep 0.05
done
ip -n "$a" link set "va$$" down
cut=$(date +%s%N)
wait "$pid0"; s0=$?; wait "$pid1"; s1=$?
seconds=$(( ($(date +%s%N) - cut) / 1000000 ))
echo "multihost_test: link cut; both ranks ended ${seconds} ms later (timeout 3000 ms)"
[ "$s0" -ne 0 ] && [ "$s1" -ne 0 ] && [ "$seconds" -lt 8000 ] && passed=$((passed + 1)) ||
  { failed=$((failed + 1)); echo "FAIL: link cut: exit $s0 $s1 after ${seconds} ms"; }
# Whatever it waited in (a receive, a send, a checkpoint's all-reduce), each names the other.
expect "rank 0 names its peer" "rank 0: .* rank\((s)\)\? 1 failed" "$tmp/cut.0"
expect "rank 1 names its peer" "rank 1: .* rank\((s)\)\? 0 failed" "$tmp/cut.1"
check "the last checkpoint is intact" "$bin" export "$tmp/ckpt" --out "$tmp/model.pt"

# 3. The link back, the job resumes from that checkpoint on both hosts and finishes.
ip -n "$a" link set "va$$" up
on_hosts "$tmp/resumed" 29613 "${job[@]}" --epochs 2 --timeout 10 --checkpoint-dir "$tmp/ckpt" --resume "$tmp/ckpt"
wait "$pid0"; s0=$?; wait "$pid1"; s1=$?
[ "$s0" -eq 0 ] && [ "$s1" -eq 0 ] && passed=$((passed + 1)) ||
  { failed=$((failed + 1)); echo "FAIL: resumed on two hosts: exit $s0 $s1"; tail -n 3 "$tmp/resumed.0" "$tmp/resumed.1"; }

finish multihost_test
