#!/usr/bin/env python3
"""What data-parallel ranks' all-reduces took beyond their price, from `train
--summary-json` files: each rank's mean ALLREDUCE action (its wait for the last replica
and the sum), their mean over the ranks, the price the run's own prediction gave it (the
simulator from the run's own action times, `predicted_timeline`), and the difference as
a share of a mini-batch's compute on rank 0 (its F, B, I, W and STEP in the typical
mini-batch of `measured_timeline`); and, in that typical mini-batch, how long the sum ran
after the last rank's compute before it ended. Ranks of one replica group meet at each
all-reduce, so the difference is what waiting for the last of them costs beyond the
price (docs/predictions.md, "Replicas wait for the last to arrive").
Usage: python3 bench/meeting_wait.py SUMMARY.json ...
"""
import json
import statistics
import sys


def row(path):
    d = json.load(open(path))
    measured = [a["seconds"] for r in d["ranks"] for a in r["action_seconds"] if a["type"] == "ALLREDUCE"]
    priced = [end - start for name, start, end in d["predicted_timeline"]["ranks"][0] if "ALLREDUCE" in name]
    if not measured or not priced:
        return None
    timeline = d["measured_timeline"]["ranks"]
    compute = sum(end - start for name, start, end in timeline[0] if "ALLREDUCE" not in name)
    arrived, ended = [], []  # per rank: its compute's end before its all-reduce, and the all-reduce's end
    for rank in timeline:
        for i, (name, start, end) in enumerate(rank):
            if "ALLREDUCE" in name and i > 0:
                arrived.append(rank[i - 1][2])
                ended.append(end)
    after_last = max(ended) - max(arrived) if arrived else float("nan")
    mean = statistics.mean(measured)
    excess = mean - priced[0]
    print(f"{path}: weights {d['ranks'][0]['weight_bytes'] / 1e6:.2f} MB, compute {1e3 * compute:.2f} ms a "
          f"mini-batch; all-reduce {1e3 * mean:.3f} ms (ranks {', '.join(f'{1e3 * x:.3f}' for x in measured)}), "
          f"priced {1e3 * priced[0]:.3f} ms: {1e3 * excess:+.3f} ms, {100 * excess / compute:+.1f}% of the compute; "
          f"the typical mini-batch's sum after the last rank arrived {1e3 * after_last:.3f} ms")
    return excess / compute


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    shares = [s for s in map(row, sys.argv[1:]) if s is not None]
    if shares:
        print(f"median over {len(shares)} run(s): {100 * statistics.median(shares):+.1f}% of the compute")


if __name__ == "__main__":
    main()
