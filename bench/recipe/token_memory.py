#!/usr/bin/env python3
"""Data larger than memory: a token stream of 10 GB trains with the resident memory of one
of 100 MB.

Writes two token streams (sparse files: every token 0, which the zoo's gpt accepts; the
pages a window touches read as zeros from the page cache) of `--small` and `--large`
bytes, trains the zoo's gpt on each for `--steps` mini-batches on 2 ranks
(`--data-file FILE.bin`, a fixed 2-stage plan, no evaluation), and prints each rank's
peak resident memory and the memory its data took (the summary's `peak_memory_bytes`
and `data_memory_bytes`), the large run's over the small's. Each pair runs `--rounds`
times, alternating, for the machine's drift.

    token_memory.py [--large 10G] [--small 100M] [--steps 50] [--rounds 2]
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def size_of(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(float(text[:-1]) * units[text[-1]]) if text[-1] in units else int(text)


def run(pipetrain, stream, steps, tmp):
    summary = f"{tmp}/summary.json"
    subprocess.run([pipetrain, "train", "--model", "gpt", "--data-file", stream, "--nproc", "2",
                    "--stage-bounds", "0,3,6", "--microbatches", "4", "--microbatch-size", "8",
                    "--max-steps", str(steps), "--no-eval", "--summary-json", summary],
                   check=True, stdout=subprocess.DEVNULL, env=dict(os.environ, PIPETRAIN_CACHE_DIR=f"{tmp}/cache"))
    ranks = json.load(open(summary))["ranks"]
    return [r["peak_memory_bytes"] for r in ranks], [r["data_memory_bytes"] for r in ranks]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--large", default="10G")
    p.add_argument("--small", default="100M")
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--pipetrain", default=f"{REPO}/build/pipetrain")
    a = p.parse_args()
    mib = 1 << 20
    with tempfile.TemporaryDirectory() as tmp:
        streams = {}
        for name in ("small", "large"):
            streams[name] = f"{tmp}/{name}.bin"
            with open(streams[name], "wb") as f:
                f.truncate(size_of(getattr(a, name)) // 2 * 2)
        peaks = {"small": [], "large": []}
        data = {"small": [], "large": []}
        for _ in range(a.rounds):
            for name in ("small", "large"):
                peak, held = run(a.pipetrain, streams[name], a.steps, tmp)
                peaks[name].append(max(peak))
                data[name].append(max(held))
                print(f"{name} ({getattr(a, name)}B): peak resident {max(peak) / mib:.0f} MiB per rank at most, "
                      f"data {max(held) / mib:.1f} MiB")
    ratio = statistics.median(peaks["large"]) / statistics.median(peaks["small"])
    print(f"peak resident memory, {a.large}B stream over {a.small}B: {ratio:.3f} (medians of {a.rounds} rounds); "
          f"data held {statistics.median(data['large']) / mib:.1f} MiB against {statistics.median(data['small']) / mib:.1f}")


if __name__ == "__main__":
    main()
