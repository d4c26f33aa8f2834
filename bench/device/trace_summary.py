#!/usr/bin/env python3
"""Where a traced step's time goes, from Chrome traces of LibTorch's profiler (Kineto):
`train --torch-trace`, `plain_loop --trace` and `torch_loop.py --trace` write them
(docs/gpu.md). For each trace: the span from its first GPU kernel to its last, the
time the GPU ran kernels and copies in it (their union), the idle remainder, and the
kernels that took most of it, by name. Prints one JSON line per trace:

    trace_summary.py pipetrain.rank0.json plain.json torch_loop.json [--top 8]
    trace_summary.py --compare pipetrain.rank0.json torch_loop.json [--top 8]

`--compare A B`: the kernels whose time differs most between two traces, by full name,
with their counts: where one program does arithmetic the other does not (a bias added
apart from its matrix product, say). Traces may be gzipped.

Idle time on the GPU inside the span is the host not keeping up (launches, syncs, the
optimizer's many small kernels); kernels that take longer than their peer's are the
arithmetic done differently.
"""
import argparse
import collections
import gzip
import json
import os


def device_events(trace):
    """Kernels, copies and sets on the GPU: (start us, end us, name, category)."""
    out = []
    for e in trace.get("traceEvents", []):
        if e.get("ph") != "X" or "dur" not in e:
            continue
        category = e.get("cat", "")
        if category in ("kernel", "gpu_memcpy", "gpu_memset"):
            out.append((float(e["ts"]), float(e["ts"]) + float(e["dur"]), e.get("name", "?"), category))
    return sorted(out)


def union_seconds(intervals):
    total, end = 0.0, float("-inf")
    for start, stop, *_ in intervals:
        if stop <= end:
            continue
        total += stop - max(start, end)
        end = stop
    return total / 1e6


def load(path):
    return json.load(gzip.open(path) if path.endswith(".gz") else open(path))


def summarize(path, top):
    events = device_events(load(path))
    if not events:
        return {"trace": os.path.basename(path), "error": "no GPU events (a CPU trace, or CUPTI saw nothing)"}
    span = (max(e[1] for e in events) - events[0][0]) / 1e6
    busy = union_seconds(events)
    by_name = collections.Counter()
    for start, stop, name, _ in events:
        by_name[name[:80]] += (stop - start) / 1e6
    return {"trace": os.path.basename(path), "span_seconds": span, "gpu_busy_seconds": busy,
            "gpu_idle_fraction": 1 - busy / span if span > 0 else 0.0,
            "kernels": sum(1 for e in events if e[3] == "kernel"),
            "copies": sum(1 for e in events if e[3] != "kernel"),
            "top": [{"name": n, "seconds": s} for n, s in by_name.most_common(top)]}


def compare(a_path, b_path, top):
    """One JSON line per kernel name, largest difference in time first."""
    def per_name(path):
        seconds, count = collections.Counter(), collections.Counter()
        for start, stop, name, _ in device_events(load(path)):
            seconds[name] += (stop - start) / 1e6
            count[name] += 1
        return seconds, count
    (a_s, a_n), (b_s, b_n) = per_name(a_path), per_name(b_path)
    names = sorted(set(a_s) | set(b_s), key=lambda n: -abs(a_s[n] - b_s[n]))
    print(json.dumps({"a": os.path.basename(a_path), "b": os.path.basename(b_path),
                      "a_seconds": sum(a_s.values()), "b_seconds": sum(b_s.values())}))
    for n in names[:top]:
        print(json.dumps({"a_seconds": a_s[n], "a_count": a_n[n], "b_seconds": b_s[n], "b_count": b_n[n],
                          "name": n[:160]}))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("traces", nargs="+")
    p.add_argument("--top", type=int, default=8)
    p.add_argument("--compare", action="store_true", help="the kernels whose time differs most between two traces")
    a = p.parse_args()
    if a.compare:
        if len(a.traces) != 2:
            p.error("--compare takes two traces")
        compare(*a.traces, a.top)
        return
    for path in a.traces:
        try:
            print(json.dumps(summarize(path, a.top)))
        except Exception as e:  # a missing or broken trace is part of the result
            print(json.dumps({"trace": os.path.basename(path), "error": f"{type(e).__name__}: {e}"[:300]}))


if __name__ == "__main__":
    main()
