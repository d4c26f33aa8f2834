#!/usr/bin/env python3
"""The capture at published sizes: Hugging Face's GPT-2 (124M parameters, GPT2Config's
defaults) and a Llama of Llama 3.2 1B's shape (1.24B), each captured in a process of its
own on byte tokens of the fortunes text (examples/asis/make_data.py's windows; bytes are
valid token ids of both vocabularies), with its wall time and the process's peak
resident memory against the model's own bytes; then `pipetrain train` on 2 ranks for a
few steps, its plan, rate and every rank's peak memory, or its refusal where the
machine's memory cannot hold it.

Usage: capture_sizes.py BUILD_DIR OUT.json [--capture-only] [MODEL ...]   (models: gpt2-124m, llama-1b)"""
import json
import os
import subprocess
import sys
import tempfile
import time

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.dirname(here)
MODELS = {
    "gpt2-124m": "transformers.GPT2LMHeadModel(transformers.GPT2Config())",
    "llama-1b": "transformers.LlamaForCausalLM(transformers.LlamaConfig(hidden_size=2048, intermediate_size=8192, "
                "num_hidden_layers=16, num_attention_heads=32, num_key_value_heads=8, vocab_size=128256, "
                "max_position_embeddings=2048, tie_word_embeddings=True, bos_token_id=0, eos_token_id=0))",
}

# Run in a fresh interpreter per model: its peak resident memory is the capture's alone.
CAPTURE = """
import json, resource, sys, time
sys.path.insert(0, {python!r})
import torch, transformers
import pipetrain_capture
transformers.logging.set_verbosity_error()
torch.manual_seed(0)
model = {expr}
parameters = sum(p.numel() for p in model.parameters())
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
example = torch.load({data!r})["inputs"][:3]
start = time.perf_counter()
pipetrain_capture.capture(model, example, {out!r})
seconds = time.perf_counter() - start
print(json.dumps({{"parameters": parameters, "capture_seconds": seconds,
                  "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                  "rss_before_capture_bytes": before * 1024}}))
"""


def main():
    build, result = sys.argv[1], sys.argv[2]
    capture_only = "--capture-only" in sys.argv[3:]
    names = [a for a in sys.argv[3:] if a != "--capture-only"] or list(MODELS)
    out = tempfile.mkdtemp()
    subprocess.run([sys.executable, f"{root}/examples/asis/make_data.py", out], check=True, stdout=subprocess.DEVNULL)
    data = f"{out}/fortunes.pt"
    rows = []
    for name in names:
        path = f"{out}/{name}.pt"
        script = CAPTURE.format(python=f"{root}/python", expr=MODELS[name], data=data, out=path)
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
        if done.returncode != 0:
            rows.append({"model": name, "capture_error": done.stderr.strip().splitlines()[-1]})
            print(f"{name}: capture failed: {rows[-1]['capture_error']}")
            continue
        row = {"model": name, **json.loads(done.stdout.strip().splitlines()[-1])}
        row["model_bytes"] = row["parameters"] * 4
        print(f"{name}: {row['parameters'] / 1e6:.0f}M parameters ({row['model_bytes'] / 2**30:.2f} GiB), captured "
              f"in {row['capture_seconds']:.1f} s, peak RSS {row['peak_rss_bytes'] / 2**30:.2f} GiB "
              f"({row['peak_rss_bytes'] / row['model_bytes']:.1f}x the model)")
        if capture_only:
            rows.append(row)
            continue
        summary = f"{out}/{name}.json"
        start = time.perf_counter()
        run = subprocess.run([f"{build}/pipetrain", "train", "--model-file", path, "--data-file", data, "--nproc", "2",
                              "--batch", "8", "--epochs", "1", "--max-steps", "3", "--no-eval", "--summary-json", summary],
                             capture_output=True, text=True)
        row["train_wall_seconds"] = time.perf_counter() - start
        if run.returncode != 0:
            row["train_error"] = (run.stderr.strip().splitlines() or ["(no message)"])[-1]
            print(f"  train on 2 ranks: refused: {row['train_error']}")
        else:
            s = json.load(open(summary))
            row["train"] = {"schedule": s["schedule"], "throughput": s["throughput"],
                            "predicted_throughput": s.get("predicted_throughput"),
                            "peak_memory_bytes": [r["peak_memory_bytes"] for r in s["ranks"]]}
            print(f"  train on 2 ranks: {s['schedule']}, {s['throughput']:.2f} samples/s (predicted "
                  f"{s.get('predicted_throughput') or 0:.2f}), {row['train_wall_seconds']:.0f} s in all")
        rows.append(row)
    json.dump({"machine_cores": os.cpu_count(), "rows": rows}, open(result, "w"), indent=1)


if __name__ == "__main__":
    main()
