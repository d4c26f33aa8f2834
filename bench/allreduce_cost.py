#!/usr/bin/env python3
"""What a Gloo all-reduce costs between two processes on this machine, by size: the
median, the 90th percentile and the mean of `--repeats` all-reduces after 20 untimed,
each process on one intra-op thread, as two data-parallel CPU ranks reduce their
gradients. The mean is what a run's iteration pays (docs/profiling.md#the-all-reduce).
Usage: .venv/bin/python bench/allreduce_cost.py [--repeats 100] [--port 29611]
"""
import argparse
import multiprocessing as mp
import os
import statistics
import time

SIZES = [1, 256, 1024, 4096, 9700, 16384, 65536, 262144, 1 << 20, 1 << 22]  # float32 elements


def rank(r, repeats, port):
    import torch
    import torch.distributed as dist
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=r, world_size=2)
    for n in SIZES:
        t = torch.ones(n)
        for _ in range(20):
            dist.all_reduce(t)
        dist.barrier()
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            dist.all_reduce(t)
            times.append(time.perf_counter() - start)
        times.sort()
        if r == 0:
            print(f"{4 * n:>9} bytes: median {1e6 * statistics.median(times):7.0f} us, "
                  f"p90 {1e6 * times[int(0.9 * len(times))]:7.0f} us, mean {1e6 * statistics.mean(times):7.0f} us",
                  flush=True)
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=100)
    ap.add_argument("--port", type=int, default=29611)
    a = ap.parse_args()
    procs = [mp.Process(target=rank, args=(r, a.repeats, a.port)) for r in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()


if __name__ == "__main__":
    main()
