"""What the benches that compare settings on fixed plans share: plan files, gpt's layers,
and runs of every case under every setting, alternated in a random order each round
(this machine's speed drifts). Used by bench/allocators.py and bench/polling_priority.py."""
import argparse
import json
import os
import random
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

GPT = ["--model", "gpt", "--dataset", "fortunes", "--max-steps", "48"]
GPT_LAYERS = ["embed", "block0", "block1", "block2", "block3", "head"]


def plan(schedule, size, count, stages):
    """A plan file's JSON: `stages` as (layers, ranks)."""
    return {"format": "pipetrain.plan", "version": 1, "microbatch_size": size, "microbatches": count,
            "schedule": {"name": schedule},
            "stages": [{"layers": layers, "devices": [f"dev{r}" for r in ranks]} for layers, ranks in stages]}


def span(xs, fmt="{:.1f}"):
    return fmt.format(min(xs)) if min(xs) == max(xs) else f"{fmt.format(min(xs))}–{fmt.format(max(xs))}"


def alternate(cases, settings, rounds, measure, work, key):
    """Every case (name, train args, plan) under every setting, `rounds` times, in a random
    order each round; `measure(args, plan_file, setting)` returns a run's figures, which
    come back with its case, its setting (under `key`) and its round."""
    runs = []
    for r in range(rounds):
        order = [(c, s) for c in range(len(cases)) for s in settings]
        random.shuffle(order)
        for c, setting in order:
            name, args, the_plan = cases[c]
            plan_file = f"{work}/plan.json"
            json.dump(the_plan, open(plan_file, "w"))
            m = measure(args, plan_file, setting)
            m.update({"case": name, key: setting, "round": r + 1})
            runs.append(m)
            print(f"round {r + 1}: {name}, {setting}: {m}", file=sys.stderr, flush=True)
    return runs


def arguments(doc, rounds):
    """The command line these benches share: --build, --rounds, --only, --out and --from."""
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--rounds", type=int, default=rounds)
    p.add_argument("--only", default="", help="the cases whose names hold one of these, |-separated")
    p.add_argument("--out", default="")
    p.add_argument("--from", dest="earlier", help="print the table of an earlier run's --out file")
    return p.parse_args()


def chosen(cases, only):
    """The cases whose names hold one of `only`'s |-separated parts (all for "")."""
    return [c for c in cases if not only or any(o in c[0] for o in only.split("|"))]
