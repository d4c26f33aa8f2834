"""pipetrain.schedule(...).simulate() in this process (pipetrain_native) against the same
calls through the executable, alternated in rounds: the medians and ranges of seconds per
call. Run: PIPETRAIN_BIN=build/pipetrain .venv/bin/python bench/python/native_calls.py"""
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import pipetrain  # noqa: E402
from pipetrain import _binary  # noqa: E402

CASES = [("1f1b", 4, 8), ("zb-h1", 4, 8), ("interleaved", 4, 8, {"chunks": 2}), ("dualpipev", 4, 16)]


def one_round(calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        for name, stages, microbatches, *options in CASES:
            pipetrain.schedule(name, stages, microbatches, **(options[0] if options else {})).simulate()
    return (time.perf_counter() - start) / (calls * len(CASES))


def main(rounds: int = 7, calls: int = 5) -> None:
    loader = _binary.native
    if loader() is None:
        sys.exit("no pipetrain_native beside the executable: build it (`make build`)")
    seconds = {"native": [], "executable": []}
    for _ in range(rounds):
        for way in seconds:
            # The executable's path, as a Python the module was not built for takes it.
            _binary.native = loader if way == "native" else (lambda: None)
            seconds[way].append(one_round(calls))
    _binary.native = loader
    out = {way: {"median": statistics.median(s), "min": min(s), "max": max(s)} for way, s in seconds.items()}
    out["ratio_executable_over_native"] = out["executable"]["median"] / out["native"]["median"]
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
