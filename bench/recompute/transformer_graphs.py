#!/usr/bin/env python3
"""Layer graphs of GPT-3-style transformer stacks from their published sizes, for planning
where device memory binds (bench/recompute/recompute_bench.py).

Each model is an embedding, L transformer blocks and an output head, priced per sample of
s tokens in mixed precision on one A100-class device (the cluster's speed 1.0):
  - compute: a block's forward pass is 24 s h^2 + 4 s^2 h floating-point operations
    (Narayanan et al., SC'21), run at PEAK_FLOPS x MFU; the backward pass twice that,
    its input part (I) the attention's and matrix products' share, its weight part (W)
    the matrix products' (24 s h^2) only;
  - a block's saved activations, without recomputation: s h (34 + 5 a s / h) bytes
    (Korthikanti et al., "Reducing Activation Recomputation in Large Transformer Models",
    2022: fp16, attention scores kept, no sequence parallelism); what a block sends on,
    2 s h bytes;
  - weights in fp16 (2 bytes a parameter; the simulator adds an fp16 gradient of the
    same size), Adam's fp32 master weights and two moments (12 bytes a parameter);
  - the head's logits in fp16 and their fp32 softmax, 6 s V bytes a sample.
Usage: transformer_graphs.py NAME OUT.json   (NAME: one of SIZES)
"""
import json
import sys

# name: (layers, hidden, heads, sequence, vocabulary), as the GPT-3 paper's Table 2.1 lists them.
SIZES = {
    "gpt3-2.7b": (32, 2560, 32, 2048, 50257),
    "gpt3-6.7b": (32, 4096, 32, 2048, 50257),
    "gpt3-13b": (40, 5140, 40, 2048, 50257),
    "gpt3-175b": (96, 12288, 96, 2048, 50257),
}
PEAK_FLOPS = 312e12  # A100 fp16 tensor cores
MFU = 0.5            # the share of the peak a pipeline stage's matrix products reach
OPTIMIZER_BANDWIDTH = 1.5e12  # bytes/s: Adam reads and writes 16 bytes a parameter twice


def seconds(flops):
    return flops / (PEAK_FLOPS * MFU)


def graph(name):
    layers, h, a, s, v = SIZES[name]
    def optimizer(params):
        return 32 * params / OPTIMIZER_BANDWIDTH
    embed_params = v * h + s * h
    block_params = 12 * h * h + 13 * h
    head_params = v * h  # its own output matrix (untied: a stage may hold it apart)
    matmul = 24 * s * h * h
    attention = 4 * s * s * h
    out = [{
        "name": "embed", "kind": "embedding", "inputs": [],
        "forward_seconds": seconds(2 * s * h), "backward_input_seconds": 0.0,
        "backward_weight_seconds": seconds(2 * s * h),
        "output_bytes": 2 * s * h, "saved_activation_bytes": 2 * s * h,
        "param_bytes": 2 * embed_params, "optimizer_state_bytes": 12 * embed_params,
        "optimizer_seconds": optimizer(embed_params),
    }]
    previous = "embed"
    for i in range(layers):
        block = "block%d" % i
        out.append({
            "name": block, "kind": "transformer_block", "inputs": [previous],
            "forward_seconds": seconds(matmul + attention),
            "backward_input_seconds": seconds(matmul + 2 * attention),
            "backward_weight_seconds": seconds(matmul),
            "output_bytes": 2 * s * h,
            "saved_activation_bytes": int(s * h * (34 + 5 * a * s / h)),
            "param_bytes": 2 * block_params, "optimizer_state_bytes": 12 * block_params,
            "optimizer_seconds": optimizer(block_params),
        })
        previous = block
    logits = 2 * s * h * v
    out.append({
        "name": "head", "kind": "linear", "inputs": [previous],
        "forward_seconds": seconds(logits), "backward_input_seconds": seconds(logits),
        "backward_weight_seconds": seconds(logits),
        "output_bytes": 4 * s * v, "saved_activation_bytes": 6 * s * v + 2 * s * h,
        "param_bytes": 2 * head_params, "optimizer_state_bytes": 12 * head_params,
        "optimizer_seconds": optimizer(head_params),
    })
    return {"format": "pipetrain.layer_graph", "version": 1, "batch_size": 1, "layers": out}


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in SIZES:
        sys.exit("usage: transformer_graphs.py {%s} OUT.json" % "|".join(SIZES))
    with open(sys.argv[2], "w") as f:
        json.dump(graph(sys.argv[1]), f, indent=1)
