#!/usr/bin/env python3
"""The heap the ranks run on, compared: each rank's peak memory added by training, the
run's throughput and the whole job's minor page faults, under glibc with its freed memory
kept (PIPETRAIN_MALLOC=retain), tcmalloc (pipetrain's default where the machine has it)
and jemalloc 5 preloaded with its freed pages kept, for fixed plans, in alternating runs
(docs/runtime.md#the-heap).

Usage: bench/allocators.py [--build build] [--rounds 2] [--only "NAME|NAME..."] [--out F.json]
       bench/allocators.py --from F.json   (the table of an earlier run)
"""
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile

from fixed_plans import GPT, GPT_LAYERS, alternate, arguments, chosen, plan, span

LIBS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib", "/usr/local/lib")
JEMALLOC = next((f"{d}/libjemalloc.so.2" for d in LIBS if os.path.exists(f"{d}/libjemalloc.so.2")), None)
HEAPS = {"glibc, freed memory kept": {"PIPETRAIN_MALLOC": "retain"},
         "tcmalloc": {},
         # tcmalloc is not preloaded in front of it: PIPETRAIN_MALLOC=retain
         "jemalloc": {"PIPETRAIN_MALLOC": "retain", "LD_PRELOAD": JEMALLOC or "",
                      "MALLOC_CONF": "dirty_decay_ms:-1,muzzy_decay_ms:-1"}}

CASES = [
    ("gpt, PipeMare, 2 stages (32 x 1)", GPT,
     plan("pipemare", 32, 1, [(GPT_LAYERS[:3], [0]), (GPT_LAYERS[3:], [1])])),
    ("gpt, data parallel on 2 ranks (16 x 2)", GPT, plan("gpipe", 16, 2, [(GPT_LAYERS, [0, 1])])),
    ("gpt, 1F1B, 4 blocks on 2 replicas, the head on a third rank (8 x 4)", GPT,
     plan("1f1b", 8, 4, [(GPT_LAYERS[:5], [0, 1]), (GPT_LAYERS[5:], [2])])),
    ("mlp, 1F1B, 2 stages (64 x 4)", ["--model", "mlp", "--dataset", "synthetic", "--epochs", "8"],
     plan("1f1b", 64, 4, [(["fc0", "fc1", "fc2"], [0]), (["fc3", "head"], [1])])),
    ("fmnist-cnn, GPipe, 4 ranks (64 x 2)", ["--model", "fmnist-cnn", "--dataset", "fashion-mnist", "--max-steps", "80"],
     plan("gpipe", 64, 2, [(["conv1"], [0, 1]), (["conv2", "flatten_fc1", "fc2"], [2, 3])])),
]


def run(binary, args, plan_file, heap, work):
    env = {k: v for k, v in os.environ.items() if k not in ("PIPETRAIN_MALLOC", "LD_PRELOAD", "MALLOC_CONF")}
    env.update(HEAPS[heap])
    env["PIPETRAIN_CACHE_DIR"] = work
    summary = f"{work}/summary.json"
    faults = resource.getrusage(resource.RUSAGE_CHILDREN).ru_minflt
    ranks = len({d for stage in json.load(open(plan_file))["stages"] for d in stage["devices"]})
    proc = subprocess.run([binary, "train"] + args + ["--plan", plan_file, "--nproc", str(ranks), "--no-eval",
                                                      "--summary-json", summary],
                          env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        return {"error": (proc.stdout + proc.stderr).strip().splitlines()[-1]}
    s = json.load(open(summary))
    return {"samples_per_second": s["throughput"],
            "added_mib": [(r["peak_memory_bytes"] - r["start_memory_bytes"]) / 2**20 for r in s["ranks"]],
            "heap_free_mib": [r["heap_free_bytes"] / 2**20 for r in s["ranks"]],
            "heaps": sorted({r["heap"] for r in s["ranks"]}),
            "minor_faults": resource.getrusage(resource.RUSAGE_CHILDREN).ru_minflt - faults}


def table(runs, names, heaps, rounds):
    print(f"{rounds} rounds in random order; peak memory training added per rank, MiB (ranges over the rounds, "
          "rank by rank, ranks sharing a role together), samples/s (median, range), the job's minor page faults")
    print("| run | " + " | ".join(heaps) + " |\n|---|" + "---|" * len(heaps))
    for name in names:
        cells = []
        for heap in heaps:
            ok = [m for m in runs if m["case"] == name and m["heap"] == heap and "error" not in m]
            if not ok:
                cells.append("failed")
                continue
            ranks = len(ok[0]["added_mib"])
            memory = " / ".join(span([m["added_mib"][k] for m in ok]) for k in range(ranks))
            speed = [m["samples_per_second"] for m in ok]
            cells.append(f"{memory} MiB; {statistics.median(speed):.0f} ({span(speed, '{:.0f}')}) samples/s; "
                         f"{span([m['minor_faults'] for m in ok], '{:,}')} faults")
        print(f"| {name} | " + " | ".join(cells) + " |")


def main():
    a = arguments(__doc__, 2)
    if a.earlier:
        runs = json.load(open(a.earlier))
        names = list(dict.fromkeys(m["case"] for m in runs))
        heaps = list(dict.fromkeys(m["heap"] for m in runs))
        return table(runs, names, heaps, max(m["round"] for m in runs))
    heaps = [h for h in HEAPS if h != "jemalloc" or JEMALLOC]
    cases = chosen(CASES, a.only)
    if not JEMALLOC:
        print("no libjemalloc.so.2 here (Debian: libjemalloc2): jemalloc left out", file=sys.stderr)
    work = tempfile.mkdtemp(prefix="pipetrain-allocators-")
    binary = os.path.join(a.build, "pipetrain")
    runs = alternate(cases, heaps, a.rounds, lambda args, plan_file, heap: run(binary, args, plan_file, heap, work),
                     work, "heap")
    table(runs, [c[0] for c in cases], heaps, a.rounds)
    if a.out:
        json.dump(runs, open(a.out, "w"), indent=1)


if __name__ == "__main__":
    main()
