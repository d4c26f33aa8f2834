#!/usr/bin/env python3
"""GraphPipe's comparison in the simulator: its three multi-branch models at the sizes
its paper names (graphpipe_graphs.py) on Summit-like clusters of 16 GiB V100s, planned
by the graph partitioner (`plan --partitioner graph`: GraphPipe's series-parallel search
with this project's joins) against the sequential one (`--partitioner chain`: PipeDream's
DP over the layers in the order the branches are listed, branch after branch).

As the paper runs them: synchronous 1F1B, no activation recomputation, micro-batch sizes
swept over powers of two, the global batch growing with the GPUs (per GPU: 16 samples of
the transformer, 2048 of the two MLP models, about what keeps one V100 near its 16 GiB
in data parallelism). Two views per cell: pure pipelines (`--no-replication`, the
paper's pipeline-against-pipeline setting, where depth and memory decide) and any plan
(stages may be replicated, data parallelism included).

Clusters: nodes of 4 V100s (the paper's 4 of Summit's 6), NVLink 50 GB/s within a node,
EDR InfiniBand 12.5 GB/s between nodes. Prints one row per model x GPUs x view with the
predicted samples/s of each partitioner's chosen plan, graph / chain, both plans' depth,
micro-batch size, peak memory and proposer (graph, sequential, chain or refined), and
notes (the graph search's budget running out).

Then the same race on the project's own multi-branch example graphs (examples/graphs) on
its example clusters (examples/clusters), as `plan` runs by default (every schedule,
recomputation where memory needs it), batch 256: graph / chain per cell, and `auto` (both
partitioners, the simulator choosing) against the better of the two.
Usage: bench/graphpipe/graphpipe_bench.py [--build build] [--out results.json] [--gpus 4 8 16 32]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import graphpipe_graphs  # noqa: E402

GIB = 1 << 30
PER_GPU_BATCH = {"mmt": 16, "dlrm": 2048, "candle-uno": 2048}


def cluster(devices):
    levels = [{"name": "nvlink", "group_size": min(devices, 4), "bandwidth": 50e9, "latency": 5e-6}]
    if devices > 4:
        levels.append({"name": "infiniband", "group_size": devices, "bandwidth": 12.5e9, "latency": 5e-6})
    return {"format": "pipetrain.cluster", "version": 1,
            "devices": [{"count": devices, "name_prefix": "v100", "kind": "gpu", "speed": 1.0,
                         "memory_bytes": 16 * GIB}],
            "levels": levels}


EXAMPLE_GRAPHS = ["fmnist-branch", "candle-uno", "dlrm", "multimodal"]
EXAMPLE_CLUSTERS = ["gpu-server", "gpu-cluster-4-nodes", "heterogeneous", "fpga-ring"]


def plan(binary, graph, cluster_path, batch, partitioner, pipelines, as_paper=True):
    args = [binary, "plan", "--graph", graph, "--cluster", cluster_path, "--batch", str(batch),
            "--partitioner", partitioner, "--json"]
    if as_paper:
        args += ["--schedule", "1f1b", "--recompute", "none"]
    if pipelines:
        args.append("--no-replication")
    started = time.monotonic()
    run = subprocess.run(args, capture_output=True, text=True)
    elapsed = time.monotonic() - started
    if run.returncode != 0:
        reason = (run.stderr.strip().splitlines() or ["exit %d" % run.returncode])[-1]
        return {"fits": False, "reason": reason, "seconds": elapsed}
    j = json.loads(run.stdout)
    return {"fits": True, "throughput": j["predicted_throughput"], "stages": len(j["stages"]),
            "depth": j.get("depth"), "by": j.get("partitioner"), "replicas": [s["replicas"] for s in j["stages"]],
            "microbatch_size": j["microbatch_size"], "peak_memory_bytes": max(j["peak_memory_bytes"].values()),
            "notes": j.get("graph_notes", []), "seconds": elapsed}


def describe(r):
    if not r["fits"]:
        return "no plan"
    shape = "%dst d%s mb%d %.1fG %s" % (r["stages"], r["depth"] if r["depth"] is not None else "?",
                                         r["microbatch_size"], r["peak_memory_bytes"] / GIB, r["by"])
    return "%9.1f (%s)" % (r["throughput"], shape)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--out", help="write every result as JSON here")
    ap.add_argument("--gpus", type=int, nargs="+", default=[4, 8, 16, 32])
    ap.add_argument("--models", nargs="+", default=list(graphpipe_graphs.MODELS))
    args = ap.parse_args()
    binary = os.path.join(args.build, "pipetrain")
    if not os.access(binary, os.X_OK):
        sys.exit("no %s: build first" % binary)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for model in args.models:
            graph = os.path.join(tmp, model + ".json")
            with open(graph, "w") as f:
                json.dump(graphpipe_graphs.graph(model), f)
            for gpus in args.gpus:
                cluster_path = os.path.join(tmp, "v100x%d.json" % gpus)
                with open(cluster_path, "w") as f:
                    json.dump(cluster(gpus), f)
                batch = PER_GPU_BATCH[model] * gpus
                for pipelines in (True, False):
                    row = {"model": model, "gpus": gpus, "batch": batch,
                           "view": "pipelines" if pipelines else "any plan"}
                    for partitioner in ("graph", "chain"):
                        row[partitioner] = plan(binary, graph, cluster_path, batch, partitioner, pipelines)
                    if row["graph"]["fits"] and row["chain"]["fits"]:
                        row["graph_over_chain"] = row["graph"]["throughput"] / row["chain"]["throughput"]
                    rows.append(row)
                    notes = "; ".join(row["graph"].get("notes", []))
                    print("%-10s %2d GPUs batch %6d %-9s | graph %-47s | chain %-47s | %s | %.1f s %s" % (
                        model, gpus, batch, row["view"], describe(row["graph"]), describe(row["chain"]),
                        "%.2f" % row["graph_over_chain"] if "graph_over_chain" in row else "  - ",
                        row["graph"]["seconds"], notes), flush=True)
    examples = []
    for g in EXAMPLE_GRAPHS:
        graph = os.path.join(ROOT, "examples", "graphs", g + ".json")
        for c in EXAMPLE_CLUSTERS:
            cluster_path = os.path.join(ROOT, "examples", "clusters", c + ".json")
            row = {"model": g, "cluster": c, "batch": 256}
            for partitioner in ("graph", "chain", "auto"):
                row[partitioner] = plan(binary, graph, cluster_path, 256, partitioner, False, as_paper=False)
            if row["graph"]["fits"] and row["chain"]["fits"]:
                row["graph_over_chain"] = row["graph"]["throughput"] / row["chain"]["throughput"]
                if row["auto"]["fits"]:
                    row["auto_over_better"] = row["auto"]["throughput"] / max(row["graph"]["throughput"],
                                                                              row["chain"]["throughput"])
            examples.append(row)
            print("%-13s on %-19s | graph %-47s | chain %-47s | %s | auto / better %s" % (
                g, c, describe(row["graph"]), describe(row["chain"]),
                "%.3f" % row["graph_over_chain"] if "graph_over_chain" in row else "  - ",
                "%.3f" % row["auto_over_better"] if "auto_over_better" in row else "-"), flush=True)
    below = [r for r in examples if r.get("graph_over_chain", 0) < 0.999]
    print("example graphs: graph / chain below 1.0 in %d of %d cells" % (len(below), len(examples)))
    short = [r for r in examples if r.get("auto_over_better", 0) < 0.999]
    print("example graphs: auto below the better of graph and chain in %d of %d cells" % (len(short), len(examples)))
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"cases": rows, "examples": examples}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
