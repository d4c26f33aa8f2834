#!/usr/bin/env python3
"""Where pipetrain's step went in a race: for every pipetrain configuration of a
race.py result file, per rank, the median over the rounds of each action's mean time
(ms) and of the rank's shares of time waiting for a core and in pipetrain's own work.

    python3 bench/race/race_actions.py bench/results/race-20261130-shm-mb2.json
"""
import json
import statistics
import sys


def main(path):
    races = json.load(open(path))["runs"]
    for race, configurations in races.items():
        for name, runs in configurations.items():
            runs = [r for r in runs if "ranks" in r]
            if not runs:
                continue  # a peer's, or every run failed
            sps = statistics.median(r["samples_per_second"] for r in runs)
            print(f"{race}: {name}, {len(runs)} runs, {sps:.1f} samples/s (median); plans: "
                  + "; ".join(sorted({r.get("plan", "?") for r in runs})))
            for rank in range(len(runs[0]["ranks"])):
                actions = {}
                for r in runs:
                    for a in r["ranks"][rank]["action_seconds"]:
                        actions.setdefault(a["type"], []).append(a["seconds"] * 1e3)
                cells = [f"{t} {statistics.median(v):.1f}" for t, v in actions.items()]
                for share in ("core_wait_fraction", "overhead_fraction"):
                    value = statistics.median(r["ranks"][rank][share] for r in runs)
                    cells.append(f"{share} {100 * value:.1f}%")
                print(f"  rank {rank}: " + ", ".join(cells) + " (ms per action)")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
