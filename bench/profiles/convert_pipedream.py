#!/usr/bin/env python3
"""Convert a PipeDream layer profile (msr-fiddle/pipedream, profiler/*/profiles/<model>/graph.txt)
into a pipetrain layer graph.

PipeDream's file lists one node per line,
    nodeN -- Kind(args) -- forward_compute_time=MS, backward_compute_time=MS, activation_size=BYTES, parameter_size=BYTES
then one edge per line, `<TAB>nodeA -- nodeB`. Times are milliseconds at the profiled
batch. The Input node (the data loader's) is dropped with its edges, since pipetrain's
first stage reads the batch itself. Layers are written in a topological order (ties by
node number), activation_size becomes output_bytes and parameter_size param_bytes.

Usage: convert_pipedream.py GRAPH_TXT BATCH OUT_JSON
"""
import heapq
import json
import re
import sys

NODE = re.compile(r"^(node\d+) -- (.*) -- forward_compute_time=([0-9.]+), backward_compute_time=([0-9.]+), "
                  r"activation_size=([0-9.]+), parameter_size=([0-9.]+)$")
EDGE = re.compile(r"^\t(node\d+) -- (node\d+)$")


def convert(text, batch):
    nodes, edges = {}, []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        if m := NODE.match(line):
            name, desc, fwd, bwd, act, params = m.groups()
            nodes[name] = {"kind": re.split(r"[(\s]", desc, 1)[0], "fwd": float(fwd), "bwd": float(bwd),
                           "act": float(act), "params": float(params)}
        elif m := EDGE.match(line):
            edges.append(m.groups())
        else:
            sys.exit(f"line {number}: neither a node nor an edge: {line[:80]!r}")
    for a, b in edges:
        for n in (a, b):
            if n not in nodes:
                sys.exit(f"edge {a} -- {b}: {n} has no node line")
    inputs = {n for n, v in nodes.items() if v["kind"] == "Input"}
    preds = {n: [] for n in nodes if n not in inputs}
    for a, b in edges:
        if a not in inputs and b not in inputs:
            preds[b].append(a)
    number = lambda n: int(n[4:])
    waiting = {n: len(p) for n, p in preds.items()}
    succs = {n: [] for n in preds}
    for b, ps in preds.items():
        for a in ps:
            succs[a].append(b)
    ready = [(number(n), n) for n, k in waiting.items() if k == 0]
    heapq.heapify(ready)
    layers = []
    while ready:
        _, n = heapq.heappop(ready)
        v = nodes[n]
        layers.append({"name": n, "kind": v["kind"], "inputs": sorted(preds[n], key=number),
                       "forward_seconds": v["fwd"] / 1e3, "backward_seconds": v["bwd"] / 1e3,
                       "output_bytes": int(v["act"]), "param_bytes": int(v["params"])})
        for s in succs[n]:
            waiting[s] -= 1
            if waiting[s] == 0:
                heapq.heappush(ready, (number(s), s))
    if len(layers) != len(preds):
        sys.exit("the graph has a cycle")
    return {"format": "pipetrain.layer_graph", "version": 1, "batch_size": batch, "layers": layers}


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    with open(sys.argv[1]) as f:
        graph = convert(f.read(), int(sys.argv[2]))
    with open(sys.argv[3], "w") as f:
        json.dump(graph, f, indent=1)
        f.write("\n")
