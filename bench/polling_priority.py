#!/usr/bin/env python3
"""Gloo's polling threads at the lowest priority (what `train` gives them where ranks
outnumber the cores) against the training thread's own, for fixed plans, in alternating
runs (PIPETRAIN_POLLING_NICE=19 and =0; docs/runtime.md#the-transports-polling-thread):
each run's steady throughput, the ratio of the two in each round, each rank's time
waiting for a core, and the simulator's error from the run's own action times.

Usage: bench/polling_priority.py [--build build] [--rounds 4] [--only "NAME|NAME..."] [--out F.json]
       bench/polling_priority.py --from F.json   (the table of an earlier run)
"""
import json
import os
import statistics
import subprocess
import tempfile

from fixed_plans import GPT, GPT_LAYERS, alternate, arguments, chosen, plan, span
from prediction_cases import steady

SETTINGS = {"lowest (19)": "19", "the training thread's (0)": "0"}
FMNIST = ["--model", "fmnist-cnn", "--dataset", "fashion-mnist", "--max-steps", "120"]

CASES = [
    ("fmnist-cnn, 1F1B, conv layers on 2 replicas, fc2 on a third rank: 3 ranks on 2 cores (32 x 4)", FMNIST,
     plan("1f1b", 32, 4, [(["conv1", "conv2", "flatten_fc1"], [0, 1]), (["fc2"], [2])])),
    ("gpt, 1F1B, 3 stages: 3 ranks on 2 cores (8 x 4)", GPT,
     plan("1f1b", 8, 4, [(GPT_LAYERS[:2], [0]), (GPT_LAYERS[2:4], [1]), (GPT_LAYERS[4:], [2])])),
    ("gpt, interleaved, 4 stages on 2 ranks (8 x 4)", GPT,
     dict(plan("interleaved", 8, 4, [(GPT_LAYERS[:2], [0]), (GPT_LAYERS[2:3], [1]), (GPT_LAYERS[3:4], [0]),
                                     (GPT_LAYERS[4:], [1])]), schedule={"name": "interleaved", "chunks": 2})),
    ("gpt, 1F1B, 2 stages (8 x 4)", GPT, plan("1f1b", 8, 4, [(GPT_LAYERS[:3], [0]), (GPT_LAYERS[3:], [1])])),
    ("gpt, data parallel on 2 ranks (16 x 2)", GPT, plan("gpipe", 16, 2, [(GPT_LAYERS, [0, 1])])),
]


def run(binary, args, plan_file, setting, work):
    env = dict(os.environ, PIPETRAIN_POLLING_NICE=SETTINGS[setting], PIPETRAIN_CACHE_DIR=work)
    summary, log = f"{work}/summary.json", f"{work}/steps.jsonl"
    ranks = len({d for stage in json.load(open(plan_file))["stages"] for d in stage["devices"]})
    if os.path.exists(log):
        os.remove(log)
    proc = subprocess.run([binary, "train"] + args + ["--plan", plan_file, "--nproc", str(ranks), "--epochs", "1",
                                                      "--no-eval", "--summary-json", summary, "--log-jsonl", log],
                          env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        return {"error": (proc.stdout + proc.stderr).strip().splitlines()[-1]}
    s = json.load(open(summary))
    measured = steady(log, s["samples"])
    return {"samples_per_second": measured,
            "core_wait": [r["core_wait_fraction"] for r in s["ranks"]],
            "own_prediction_error": s["predicted_throughput"] / measured - 1 if measured else None}


def table(runs, names, rounds):
    low, same = SETTINGS
    print(f"{rounds} rounds, the settings in random order within each; samples/s at the steady state (median, "
          "range), the ratio lowest / the training thread's per round (median, range), each rank's time waiting "
          "for a core (median %), and the simulator's error from the run's own action times (median)")
    print(f"| run | {low} | {same} | ratio | core wait, {low} | core wait, {same} | own-times error, {low} | "
          f"own-times error, {same} |\n|---|---|---|---|---|---|---|---|")
    for name in names:
        by = {k: {m["round"]: m for m in runs if m["case"] == name and m["setting"] == k and "error" not in m}
              for k in SETTINGS}
        if not by[low] or not by[same]:
            print(f"| {name} | failed |")
            continue
        speed = {k: [m["samples_per_second"] for m in by[k].values()] for k in SETTINGS}
        ratios = [by[low][r]["samples_per_second"] / by[same][r]["samples_per_second"]
                  for r in by[low] if r in by[same]]
        wait = {k: " / ".join(f"{100 * statistics.median(m['core_wait'][i] for m in by[k].values()):.1f}"
                              for i in range(len(next(iter(by[k].values()))["core_wait"]))) for k in SETTINGS}
        own = {k: f"{100 * statistics.median(m['own_prediction_error'] for m in by[k].values()):+.1f}%"
               for k in SETTINGS}
        print(f"| {name} | {statistics.median(speed[low]):.0f} ({span(speed[low], '{:.0f}')}) | "
              f"{statistics.median(speed[same]):.0f} ({span(speed[same], '{:.0f}')}) | "
              f"{statistics.median(ratios):.2f} ({span(ratios, '{:.2f}')}) | {wait[low]} | {wait[same]} | "
              f"{own[low]} | {own[same]} |")


def main():
    a = arguments(__doc__, 4)
    if a.earlier:
        runs = json.load(open(a.earlier))
        return table(runs, list(dict.fromkeys(m["case"] for m in runs)), max(m["round"] for m in runs))
    cases = chosen(CASES, a.only)
    work = tempfile.mkdtemp(prefix="pipetrain-polling-")
    binary = os.path.join(a.build, "pipetrain")
    runs = alternate(cases, SETTINGS, a.rounds,
                     lambda args, plan_file, setting: run(binary, args, plan_file, setting, work), work, "setting")
    table(runs, [c[0] for c in cases], a.rounds)
    if a.out:
        json.dump(runs, open(a.out, "w"), indent=1)


if __name__ == "__main__":
    main()
