#!/usr/bin/env bash
# Two hosts joined by a 100 Mb/s link, made by bench/hosts/hosts.py (network namespaces
# on a bridge, shaped with tc), one torchrun agent and one rank on each:
# - profile-network across the link measures the rate tc set, within 10%;
# - a torchrun job given no plan measures the link, plans for it (a pipeline, whose
#   activations cross the link, where data parallelism would all-reduce every weight),
#   says what crosses the link, and trains; the next job on the same hosts takes the
#   link from the cache; ranks started by hand, without torchrun's agent, do the same;
# - across three hosts, one of whose links is 10x slower, every pair of hosts is
#   measured and the slow link told apart from the others;
# - nothing is left behind: no namespace of ours survives, even when a run fails.
# Needs root; exits 77 (skipped) where hosts.py cannot make the namespaces.
# Usage: PIPETRAIN=path/to/pipetrain PIPETRAIN_PYTHON=python hosts_test.sh SOURCE_DIR
set -u
bin=${PIPETRAIN:?set PIPETRAIN}
src=${1:?source dir}
python=${PIPETRAIN_PYTHON:-python3}
. "$(dirname "$0")/harness.sh"

tag=pt$$
hosts=("$python" "$src/bench/hosts/hosts.py" --hosts 2 --rate 100mbit --timeout 300 --logs "$tmp/host" --tag "$tag")
ours() { ip netns list 2>/dev/null | grep -c "^$tag-" || true; }

# Where it cannot make hosts, it says so and exits 77, having made nothing.
"${hosts[@]}" -- true >"$tmp/probe" 2>&1
status=$?
if [ "$status" -eq 77 ]; then
  echo "hosts_test: skipped: $(cat "$tmp/probe")"
  exit 77
fi
[ "$status" -eq 0 ] && passed=$((passed + 1)) || { failed=$((failed + 1)); echo "FAIL: hosts.py made no hosts"; cat "$tmp/probe"; }

# PIPETRAIN_CACHE_DIR (harness.sh) holds this script's profiles and the network it measures.
rank=(env OMP_NUM_THREADS=1 "$bin")
on_hosts() {  # on_hosts NAME PORT ARGS...: one torchrun agent per host over `pipetrain ARGS`
  local name=$1 port=$2; shift 2
  "${hosts[@]}" --torchrun 1 --port "$port" -- "${rank[@]}" "$@" >"$tmp/$name.hosts" 2>&1
  local s=$?
  cat "$tmp/$name.hosts" "$tmp/host.0" >"$tmp/$name.0" 2>/dev/null
  cp "$tmp/host.1" "$tmp/$name.1" 2>/dev/null
  return $s
}

# 1. profile-network measures the link's rate (12.5 MB/s), within 10%.
on_hosts network 29631 profile-network --sizes 256K,2M --repeats 5 --out "$tmp/cluster.json" &&
  passed=$((passed + 1)) || { failed=$((failed + 1)); echo "FAIL: profile-network across the hosts"; tail -5 "$tmp/network.0" "$tmp/network.1"; }
"$python" - "$tmp/cluster.json" <<'EOF' && passed=$((passed + 1)) || failed=$((failed + 1))
import json, sys
c = json.load(open(sys.argv[1]))
top = c["levels"][-1]
rate = top["bandwidth"]
print(f"hosts_test: profile-network measured {rate / 1e6:.2f} MB/s over level '{top['name']}' (tc: 12.50 MB/s)")
names = [d["name"] for d in c["devices"]]
if len(set(n.split("-")[0] for n in names)) != 2:
    sys.exit(f"FAIL: two hosts expected, devices {names}")
if abs(rate / 12.5e6 - 1) > 0.10:
    sys.exit(f"FAIL: the link measured {rate:.0f} B/s, not within 10% of 12.5e6")
EOF

# 2. No plan given: the job measures the link, plans for it and trains.
job=(train --model mlp --dataset synthetic --batch 64 --max-steps 20 --epochs 1 --no-eval --timeout 60)
on_hosts planned 29632 "${job[@]}" --summary-json "$tmp/planned.json" &&
  passed=$((passed + 1)) || { failed=$((failed + 1)); echo "FAIL: a planned job across the hosts"; tail -8 "$tmp/planned.0" "$tmp/planned.1"; }
expect "it measures the link" "measuring the network between the job's 2 ranks" "$tmp/planned.0"
expect "and says what it found" "level 'network' (groups of 2)" "$tmp/planned.0"
expect "it says what crosses the link" "stages 0 -> 1 over 'network'" "$tmp/planned.0"
expect "it trains" "trained mlp with" "$tmp/planned.0"
"$python" - "$tmp/planned.json" <<'EOF' && passed=$((passed + 1)) || failed=$((failed + 1))
import json, sys
s = json.load(open(sys.argv[1]))
links = s["planner"]["links"]
print("hosts_test: the plan's traffic:", ", ".join(f"{t['what']} over {t['link']}: {t['bytes']:.0f} B" for t in links))
# Over 100 Mb/s the mlp's all-reduce (1.6 MB a step) costs 50x its activations: a pipeline.
if any("all-reduce" in t["what"] for t in links) or not any(t["link"] == "network" for t in links):
    sys.exit("FAIL: the plan should pipeline across the slow link, not all-reduce over it")
EOF

# 3. The next job on the same hosts plans at once: the link comes from the cache. Both
#    jobs run on one set of hosts (each new set is new hosts, measured anew).
torchrun=$(dirname "$python")/torchrun
agent() {  # agent PORT: this host's torchrun agent over the job, placeholders for hosts.py
  echo "$torchrun --nnodes=2 --node-rank={host} --nproc-per-node=1 --master-addr={master} --master-port=$1" \
    "--no-python ${rank[*]} ${job[*]} --max-steps 5"
}
"${hosts[@]}" -- sh -c "$(agent 29633) && $(agent 29634)" >"$tmp/again.hosts" 2>&1 &&
  passed=$((passed + 1)) || { failed=$((failed + 1)); echo "FAIL: two jobs on the same hosts"; tail -5 "$tmp/host.0"; }
expect "the first measures the link" "measuring the network between" "$tmp/host.0"
expect "the next job takes it from the cache" "as measured before" "$tmp/host.0"

# 4. Ranks started by hand (no torchrun agent), no plan given: rank 0 serves the job's
#    store, and the job measures the link, plans for it and trains as under torchrun.
"${hosts[@]}" -- env RANK={host} WORLD_SIZE=2 LOCAL_RANK=0 MASTER_ADDR={master} MASTER_PORT=29636 \
  "${rank[@]}" "${job[@]}" --max-steps 5 >"$tmp/byhand.hosts" 2>&1 &&
  passed=$((passed + 1)) || { failed=$((failed + 1)); echo "FAIL: ranks started by hand"; tail -5 "$tmp/host.0" "$tmp/host.1"; }
expect "ranks started by hand measure the link" "measuring the network between the job's 2 ranks" "$tmp/host.0"
expect "plan for it and train" "trained mlp with" "$tmp/host.0"

# 5. Three hosts, host 1's link 10x slower than the others' (100 Mb/s against 1 Gb/s):
#    profile-network measures every pair of hosts, not only rank 0's; the network level
#    takes the slow rate, and hosts 0 and 2 get a link of their own at the fast one.
three=("$python" "$src/bench/hosts/hosts.py" --hosts 3 --rate 1gbit --rate-of 1=100mbit --timeout 300
       --logs "$tmp/three" --tag "${tag}t")
"${three[@]}" --torchrun 1 --port 29635 -- "${rank[@]}" profile-network --sizes 256K,2M --repeats 5 \
  --out "$tmp/three.json" >"$tmp/three.hosts" 2>&1 &&
  passed=$((passed + 1)) || { failed=$((failed + 1)); echo "FAIL: profile-network across 3 hosts"; tail -5 "$tmp/three.hosts" "$tmp/three.0"; }
expect "it measures the pair rank 0 is not on" "rank 1 (" "$tmp/three.0"
"$python" - "$tmp/three.json" <<'PY' && passed=$((passed + 1)) || failed=$((failed + 1))
import json, sys
c = json.load(open(sys.argv[1]))
slow, links = c["levels"][-1]["bandwidth"], c.get("links", [])
print(f"hosts_test: 3 hosts: network {slow / 1e6:.2f} MB/s (tc: 12.50), links",
      ", ".join(f"{l['a']}-{l['b']} {l['bandwidth'] / 1e6:.1f} MB/s" for l in links))
if abs(slow / 12.5e6 - 1) > 0.10:
    sys.exit(f"FAIL: the slow links measured {slow:.0f} B/s, not within 10% of 12.5e6")
if len(links) != 1 or {links[0]["a"], links[0]["b"]} != {"10.99.0.1-0", "10.99.0.3-0"} or links[0]["bandwidth"] < 5 * slow:
    sys.exit(f"FAIL: expected one fast link between hosts 0 and 2, found {links}")
PY

# 6. Nothing of ours is left: not after the runs, nor after one that fails.
"${hosts[@]}" -- false >/dev/null 2>&1
[ "$(ours)" = 0 ] && passed=$((passed + 1)) ||
  { failed=$((failed + 1)); echo "FAIL: namespaces left behind: $(ip netns list)"; }

finish hosts_test
