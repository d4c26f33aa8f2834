#!/usr/bin/env python3
"""The race where the network binds: pipetrain against DDP and torch.distributed.pipelining
on hosts joined by shaped links (bench/hosts/hosts.py: network namespaces on a bridge, each
link shaped with tc), one rank per host, for each of `--rates`.

Who runs what, every process under torchrun (one agent per host, static rendezvous at host
0), on one thread (OMP_NUM_THREADS=1) and one allocator setting (race.py's "tuned"):
- DDP (ddp_peer.py) at its documented best settings, 25 MiB buckets; and, as a row of its
  own marked lossy, with torch's bf16_compress_hook (gradients all-reduced in bfloat16);
- torch.distributed.pipelining (pipelining_peer.py): ScheduleGPipe and Schedule1F1B at 4
  micro-batches per rank on the even cut, and at 2, 4 and 8 on the cut of pipetrain's best
  plan under 1F1B (where that plan is a pipeline of one stage per rank);
  torch's Gloo is told the interface (GLOO_SOCKET_IFNAME=eth0, its documented setting);
- pipetrain: its plan (`train --batch N`, no plan given: the job measures the link and
  plans for it), its plan under 1F1B (`--schedule 1f1b`), and its data parallelism over
  the same link (`--data-parallel`); where the plan puts its stages on the hosts in
  another order than the ranks' (links of unlike rates, `--rate-of`), the same plan with
  stage s on rank s (`--plan`, "placed naively"), and both simulated on the measured
  network (`pipetrain simulate`, the race's `simulated` record).
Timing as race.py: `--warmup-steps` untimed mini-batches, then `--steps` timed (the peers
barrier to barrier, pipetrain from its per-step log); `--rounds` rounds, each running every
configuration once in a random order; paired ratios by round. Each pipetrain plan's
prediction (the planner's, before the run) is set beside its measured rate.

    bench/race/network_race.py [--models tv-vgg] [--rates 100mbit,1gbit,10gbit,none]
                               [--rounds 3] [--steps 5] [--warmup-steps 2] [--out F.json]

Needs root (network namespaces); exits 77 where they cannot be made.
"""
import argparse
import datetime
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time

import race
from race import HERE, MALLOC, REPO, machine, timed_window
from race_stats import describe, paired

sys.path.insert(0, os.path.join(REPO, "bench", "hosts"))
from hosts import SKIP, Hosts, Unavailable, parse_rates, stop_on_signals, torchrun_command  # noqa: E402

LR = 0.01
MICROBATCH_SIZE = {"tv-vgg": 8, "gpt": 8, "hf-gpt2": 8, "mlp": 32}
MICROBATCHES_PER_RANK = 4
PEERS_SCHEDULE_PLAN = "pipetrain's plan under 1f1b"
NAIVE = "pipetrain's plan, placed naively (stage s on rank s)"
# Where DDP's step went (ddp_peer.py), kept beside pipetrain's per-action times.
DDP_PHASES = ("phase_seconds", "backward_without_allreduce_seconds", "allreduce_alone_seconds", "gradient_bytes")


class Configuration:
    def __init__(self, name, command, kind, versus=None, env=None, lossy=False):
        self.name, self.command, self.kind, self.versus = name, command, kind, versus
        self.env, self.lossy = env or {}, lossy


class NetworkRace:
    def __init__(self, a, work):
        self.a, self.work = a, work
        self.bin = os.path.abspath(os.path.join(a.build, "pipetrain"))
        self.port = 29700
        self.plan_cut = {}  # model -> the cut in pieces of pipetrain's 1F1B plan, once it has run
        self.naive_plan = {}  # model -> its plan with stage s on rank s, where the planner placed them otherwise
        self.simulated = {}  # model -> both placements simulated on the measured network

    def configurations(self, model, hosts):
        p = hosts.n
        b = MICROBATCH_SIZE.get(model, 8)
        batch = MICROBATCHES_PER_RANK * p * b
        pieces = json.load(open(f"{self.work}/{model}.pieces.json"))
        steps = ["--steps", str(self.a.steps), "--warmup-steps", str(self.a.warmup_steps)]
        peer = ["--model", model, "--dir", self.work, "--lr", str(LR), "--timeout", str(self.a.timeout)] + steps
        torch_env = {"GLOO_SOCKET_IFNAME": "eth0"}
        ours = [self.bin, "train", "--model-file", f"{self.work}/{model}.pt", "--data-file",
                f"{self.work}/{model}.data.pt", "--optimizer", "sgd", "--lr", str(LR), "--epochs", "1",
                "--max-steps", str(self.a.warmup_steps + self.a.steps), "--no-eval", "--timeout", "300",
                "--summary-json", f"{self.work}/summary.json", "--log-jsonl", f"{self.work}/steps.jsonl"]
        runs = [Configuration("torch DDP, 25 MiB buckets", [sys.executable, f"{HERE}/ddp_peer.py", "--batch",
                                                            str(batch), "--bucket-mb", "25"] + peer, "ddp",
                              env=torch_env),
                Configuration("torch DDP, bf16_compress_hook (lossy)",
                              [sys.executable, f"{HERE}/ddp_peer.py", "--batch", str(batch), "--bucket-mb", "25",
                               "--hook", "bf16"] + peer, "ddp", env=torch_env, lossy=True)]
        cuts = {"even cut": race.even_bounds(len(pieces["pieces"]), p)}
        if model in self.plan_cut and self.plan_cut[model] != cuts["even cut"]:
            cuts["pipetrain's 1f1b cut"] = self.plan_cut[model]
        for label, cut in cuts.items():
            # Every micro-batch count on the best cut there is (the plan's where it has run).
            counts = (2, 4, 8) if label == list(cuts)[-1] else (MICROBATCHES_PER_RANK,)
            for schedule in ("ScheduleGPipe", "Schedule1F1B"):
                for k in counts:
                    m = k * p
                    runs.append(Configuration(
                        f"torch {schedule} {m}x{batch // m}, {label} {','.join(map(str, cut))}",
                        [sys.executable, f"{HERE}/pipelining_peer.py", "--schedule", schedule, "--stage-bounds",
                         ",".join(map(str, cut)), "--microbatches", str(m), "--microbatch-size", str(batch // m)]
                        + peer, "peer", env=torch_env))
        runs.append(Configuration("pipetrain's plan", ours + ["--batch", str(batch)], "plan"))
        if model in self.naive_plan:
            runs.append(Configuration(NAIVE, ours + ["--plan", self.naive_plan[model]], "plan"))
        runs.append(Configuration(PEERS_SCHEDULE_PLAN, ours + ["--batch", str(batch), "--schedule", "1f1b"], "plan"))
        runs.append(Configuration("pipetrain data parallel", ours + ["--data-parallel", "--microbatches", str(p),
                                                                     "--microbatch-size", str(batch // p)], "ours"))
        return runs

    def run(self, c, hosts, malloc="tuned"):
        self.port += 1  # a fresh rendezvous port: the last agent's may linger in TIME_WAIT
        for f in ("summary.json", "steps.jsonl"):
            if os.path.exists(f"{self.work}/{f}"):
                os.remove(f"{self.work}/{f}")
        env = dict(MALLOC[malloc], OMP_NUM_THREADS="1", PYTHONPATH=HERE, **c.env)
        logs = lambda i: f"{self.work}/host.{i}.log"  # noqa: E731
        command = torchrun_command(hosts, 1, self.port, c.command)
        statuses = hosts.run(lambda i: command, env=env, timeout=self.a.timeout, logs=logs)
        out = open(logs(0)).read()
        if statuses[0] is None:
            return {"error": f"timed out after {self.a.timeout:.0f} s"}
        results = [l for l in out.splitlines() if l.startswith("{")]
        if any(statuses) and c.kind in ("ddp", "peer") and results:
            # The peer printed its result and then aborted on the way out (torch's Gloo at
            # exit, now and then): the result counts, and the abort is reported beside it.
            result = json.loads(results[-1])
            return dict({"samples_per_second": result["samples_per_second"],
                         "peak_rss_bytes": max(result["peak_rss_bytes"]), "aborted_at_exit": statuses},
                        **{k: result[k] for k in DDP_PHASES if k in result})
        if any(statuses):
            lines = (out + open(logs(1)).read()).splitlines()
            errors = [l for l in lines if "Error" in l or "error:" in l]
            return {"error": f"exit {statuses}: " + (errors[0] if errors else lines[-1] if lines else "")[:200],
                    "output_tail": lines[-30:]}
        if c.kind in ("plan", "ours"):
            return self.ours(c, out)
        result = json.loads(results[-1])
        return dict({"samples_per_second": result["samples_per_second"], "peak_rss_bytes": max(result["peak_rss_bytes"])},
                    **{k: result[k] for k in DDP_PHASES if k in result})

    def place_naively(self, model):
        """After the plan's first run: where its stages are not on the ranks in order, the same
        plan with stage s on rank s, and both placements simulated on the measured network."""
        summary = json.load(open(f"{self.work}/summary.json"))
        plan, planner = summary["plan"], summary.get("planner") or {}
        folder = f"{self.work}/cache/network"
        # The network these hosts measured: the newest (each rate's hosts are new hosts).
        networks = sorted((f for f in os.listdir(folder) if not f.endswith(".key.json")),
                          key=lambda f: os.path.getmtime(os.path.join(folder, f)))
        if not networks or "profile" not in planner:
            return
        cluster = os.path.join(folder, networks[-1])
        ranks = [d["name"] for d in json.load(open(cluster))["devices"]]  # the job's rank order
        placed = list(dict.fromkeys(d for stage in plan["stages"] for d in stage["devices"]))
        if placed == ranks[:len(placed)]:
            return
        rename = dict(zip(placed, ranks))
        naive = json.loads(json.dumps(plan))
        for stage in naive["stages"]:
            stage["devices"] = [rename[d] for d in stage["devices"]]
        paths = {"planned": f"{self.work}/{model}.plan.json", "naive": f"{self.work}/{model}.naive-plan.json"}
        json.dump(plan, open(paths["planned"], "w"))
        json.dump(naive, open(paths["naive"], "w"))
        self.naive_plan[model] = paths["naive"]
        self.simulated[model] = {"cluster": json.load(open(cluster))}
        for label, path in paths.items():
            out = subprocess.run([self.bin, "simulate", "--graph", planner["profile"]["path"], "--cluster", cluster,
                                  "--plan", path, "--json"], stdout=subprocess.PIPE, text=True, check=True).stdout
            report = json.loads(out[out.index("{"):])
            self.simulated[model][label] = {"devices": list(dict.fromkeys(
                d for stage in json.load(open(path))["stages"] for d in stage["devices"])),
                "samples_per_second": report.get("throughput")}
        print(f"{model}: simulated on the measured network: " + ", ".join(
            f"{k} {v['devices']} {v['samples_per_second']:.2f} samples/s" for k, v in self.simulated[model].items()
            if k != "cluster"), file=sys.stderr, flush=True)

    def ours(self, c, console):
        """As race.py's window (race.timed_window), and the planner's prediction."""
        summary = json.load(open(f"{self.work}/summary.json"))
        out = timed_window(summary, f"{self.work}/steps.jsonl", self.a.warmup_steps, self.a.steps)
        if "error" in out:
            return out
        # Where each rank's time went, and each action's mean time (as race.py keeps them).
        out["ranks"] = [{k: r[k] for k in ("wait_fraction", "core_wait_fraction", "overhead_fraction",
                                            "allreduce_fraction", "bubble_fraction", "action_seconds")}
                        for r in summary["ranks"]]
        planner = summary.get("planner") or {}
        if planner.get("chosen"):
            out["predicted_samples_per_second"] = planner["chosen"]["throughput"]
            out["links"] = planner.get("links")
        out["measured_network"] = "measuring the network" in console
        # What the job said before training: the link it measured, the planner's table.
        said = [l for l in console.splitlines() if not l.startswith(("PROGRESS", "[W", "epoch "))]
        out["console"] = said[:said.index(next((l for l in said if l.startswith("trained ")), said[-1]))] \
            if said else []
        return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(REPO, "build"))
    ap.add_argument("--models", default="tv-vgg")
    ap.add_argument("--rates", default="100mbit,1gbit,10gbit,none", help="tc rates; none: unshaped")
    ap.add_argument("--hosts", type=int, default=2)
    ap.add_argument("--rate-of", action="append", metavar="HOST=RATE",
                    help="one host's link at its own rate, the others at --rates' (repeatable; hosts.py's)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup-steps", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=900, help="seconds one run may take")
    ap.add_argument("--runs", default="ddp,peer,plan,ours",
                    help="which kinds run: ddp, peer (torch.distributed.pipelining), plan (pipetrain's plans), "
                         "ours (pipetrain's data parallelism)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=os.path.join(REPO, "bench", "results",
                                                  f"network-race-{datetime.datetime.now():%Y%m%d-%H%M}.json"))
    a = ap.parse_args()
    random.seed(a.seed)
    stop_on_signals()  # interrupted, the hosts are torn down all the same
    results, ratios = {}, {}
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)

    def keep():
        json.dump({"machine": machine(), "arguments": vars(a), "ratios": ratios, "runs": results,
                   "simulated": race_.simulated}, open(a.out, "w"), indent=1)
    with tempfile.TemporaryDirectory() as work:
        os.environ["PIPETRAIN_CACHE_DIR"] = f"{work}/cache"  # each job's profile and network, this race's own
        race_ = NetworkRace(a, work)
        models = a.models.split(",")
        for model in models:
            samples = (a.warmup_steps + a.steps) * MICROBATCHES_PER_RANK * a.hosts * MICROBATCH_SIZE.get(model, 8)
            subprocess.run([sys.executable, f"{HERE}/race_models.py", model, work, "--samples", str(samples)],
                           check=True)
        for rate in a.rates.split(","):
            try:
                with Hosts(a.hosts, None if rate == "none" else rate, parse_rates(a.rate_of)) as hosts:
                    for model in models:
                        key = f"{model} at {rate}"
                        # The plans first, once, untimed: the first profiles the model and measures
                        # the link. The peer also runs on the cut of pipetrain's best plan under its
                        # own schedule, 1F1B, one stage per rank.
                        for c in race_.configurations(model, hosts):
                            if c.kind != "plan":
                                continue
                            first = race_.run(c, hosts)
                            print(f"{key} {c.name} (untimed first run): {first}", file=sys.stderr, flush=True)
                            if c.name == "pipetrain's plan" and "error" not in first:
                                race_.place_naively(model)
                            if c.name == PEERS_SCHEDULE_PLAN and f"{a.hosts} stage(s) of {'/'.join(['1'] * a.hosts)}" \
                                    in first.get("plan", ""):
                                race_.plan_cut[model] = plan_cut(f"{work}/summary.json", f"{work}/{model}.pieces.json")
                        runs = [c for c in race_.configurations(model, hosts) if c.kind in a.runs.split(",")]
                        got = {c.name: [] for c in runs}
                        for r in range(a.rounds):
                            order = list(runs)
                            random.shuffle(order)
                            for c in order:
                                began = time.perf_counter()
                                got[c.name].append(dict(race_.run(c, hosts), round=r + 1,
                                                        wall_seconds=round(time.perf_counter() - began, 1)))
                                print(f"round {r + 1}/{a.rounds} {key} {c.name}: {got[c.name][-1]}", file=sys.stderr,
                                      flush=True)
                        results[key] = got
                        keep()  # the runs first: a fault in the report below must not lose them
                        ratios.update(report(key, runs, got))
                        keep()
            except Unavailable as e:
                print(f"network_race: skipped: cannot make network namespaces here ({e})", file=sys.stderr)
                return SKIP
    print(f"\nevery run's figures: {a.out}")
    return 0


def plan_cut(summary_path, pieces_path):
    """The plan's stage bounds in pieces (the race's layers are the pieces for tv-vgg and the zoo)."""
    plan = json.load(open(summary_path))["plan"]
    bounds = json.load(open(pieces_path))["layer_bounds"]
    cut, first = [0], 0
    for stage in plan["stages"][:-1]:
        first += len(stage["layers"])
        cut.append(bounds.index(first) if first in bounds else first)
    return cut + [len(bounds) - 1]


def report(key, runs, got):
    sps = {name: [x.get("samples_per_second") for x in xs] for name, xs in got.items()}
    ok = {name: [v for v in xs if v] for name, xs in sps.items()}
    median = {name: statistics.median(v) for name, v in ok.items() if v}
    exact = lambda kind: [c.name for c in runs if c.kind == kind and c.name in median and not c.lossy]  # noqa: E731
    best_peer = max(exact("peer"), key=median.get, default=None)
    best_ddp = max(exact("ddp"), key=median.get, default=None)
    print(f"\n{key}: {len(runs)} configurations")
    print("| configuration | samples/s | range | predicted | paired ratio |")
    print("|---|---|---|---|---|")
    every = {}
    for c in runs:
        failures = [x["error"] for x in got[c.name] if "error" in x]
        if c.name not in median:
            print(f"| {c.name} | — | {failures[0] if failures else ''} | | |")
            continue
        cells = []
        if c.kind in ("plan", "ours"):
            for other, label in ((best_ddp, "DDP's best"), (best_peer, "the peer's best pipeline")):
                if other:
                    r = paired(sps[c.name], sps[other])
                    if r is None:  # one round: the ratio of the two runs
                        r = {"median": median[c.name] / median[other], "rounds": 1}
                        cells.append(f"{r['median']:.2f}x (1 round) against {label}")
                    else:
                        cells.append(f"{describe(r)} against {label}")
                    every[f"{key}: {c.name} / {label} ({other})"] = r
        predicted = [x["predicted_samples_per_second"] for x in got[c.name] if "predicted_samples_per_second" in x]
        pred = f"{statistics.median(predicted):.1f} ({statistics.median(predicted) / median[c.name] - 1:+.0%})" \
            if predicted else ""
        aborts = sum(1 for x in got[c.name] if "aborted_at_exit" in x)
        note = f" ({len(failures)} failed: {failures[0]})" if failures else ""
        note += f" ({aborts} aborted at exit after printing their result)" if aborts else ""
        print(f"| {c.name} | {median[c.name]:.2f} | {min(ok[c.name]):.2f}–{max(ok[c.name]):.2f} | {pred} | "
              f"{'; '.join(cells)}{note} |")
    chosen = {x.get("plan") for c in runs if c.kind == "plan" for x in got[c.name] if x.get("plan")}
    if chosen:
        print("plan chosen: " + "; ".join(sorted(chosen)))
    print("where a step went (the median round's run of each configuration):")
    for c in runs:
        if c.name in median:
            typical = min(got[c.name], key=lambda x: abs((x.get("samples_per_second") or 0) - median[c.name]))
            parts = step_parts(typical)
            if parts:
                print(f"- {c.name}: {parts}")
    return every


def step_parts(x):
    """Where a run's step went, in ms: DDP's phases (ddp_peer.py), or pipetrain's actions
    per rank (each action's median, by type) and its shares of the step."""
    ms = lambda seconds: f"{1e3 * seconds:.1f}"  # noqa: E731
    if "phase_seconds" in x:
        p = x["phase_seconds"]
        return (f"forward {ms(p['forward'])}, backward with the all-reduce it overlaps {ms(p['backward'])} "
                f"(apart: backward {ms(x['backward_without_allreduce_seconds'])}, all-reduce of "
                f"{x['gradient_bytes'] / 2**20:.0f} MiB {ms(x['allreduce_alone_seconds'])}), step {ms(p['step'])}")
    if "ranks" not in x:
        return ""
    out = []
    for i, r in enumerate(x["ranks"]):
        actions = ", ".join(f"{a['type']}{a['stage']} {ms(a['seconds'])}" for a in r["action_seconds"])
        out.append(f"rank {i}: {actions}; of the training time: all-reduce {r.get('allreduce_fraction', 0):.0%}, "
                   f"waiting {r['wait_fraction']:.0%}, framework {r['overhead_fraction']:.0%}, not computing "
                   f"{r['bubble_fraction']:.0%}")
    return "; ".join(out)


if __name__ == "__main__":
    sys.exit(main())
