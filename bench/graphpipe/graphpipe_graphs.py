#!/usr/bin/env python3
"""Layer graphs of GraphPipe's three multi-branch models at the sizes its paper names
(Jeon et al., arXiv 2406.17145, appendix A.2), priced on one V100 as its evaluation ran
(Summit: 16 GB V100s), for bench/graphpipe/graphpipe_bench.py.

The models, as the paper describes them:
  - mmt: a multi-modal transformer, 4 branches of 8 transformer layers (sequence 256,
    hidden 1024, 16 heads, feed-forward 4096), each branch an input projection, its
    layers and a mean pool, the branches concatenated into a fusion layer and a head;
  - dlrm: 7 dense branches of 4 feed-forward layers of width 4096 and 7 sparse branches,
    each an embedding bag (1 million rows of 64, 100 lookups a sample), their outputs
    concatenated into 4 feed-forward layers of width 4096 and a head;
  - candle-uno: 7 branches of 4 feed-forward layers of width 4096, concatenated into 4
    more and a head.
Layers are listed branch after branch, the order a sequential planner linearises them in.

Costs, in fp32 (what the paper's system, on FlexFlow, trains in); nothing here was
measured:
  - a pass's time is a roofline: the longer of its floating-point work at PEAK_FLOPS x
    MFU and its memory traffic (weights, inputs and outputs) at HBM_BANDWIDTH, plus
    KERNEL_LAUNCH per kernel. Small micro-batches are therefore slower per sample
    (reading the weights dominates), which is how a shallower pipeline's larger
    micro-batches pay. The times are given at every power of two from 1 to 8192 samples
    (`other_batches`), so the planner prices each micro-batch size on this curve;
  - backward passes: input gradient (I) and weight gradient (W) each as much work as F
    (attention's score products count twice in I);
  - a transformer layer saves 2 x s h (34 + 5 a s / h) bytes a sample (Korthikanti et al.
    2022's count in 2-byte units, doubled for fp32); a feed-forward layer its input and
    its ReLU's output;
  - weights 4 bytes a parameter (the simulator adds a gradient of the same size), Adam's
    two moments 8 bytes; an optimizer step moves 32 bytes a parameter through HBM.
Usage: graphpipe_graphs.py {mmt|dlrm|candle-uno} OUT.json
"""
import json
import sys

PEAK_FLOPS = 15.7e12      # V100 SXM2, fp32
MFU = 0.5                 # the share of the peak a layer's matrix products reach
HBM_BANDWIDTH = 0.8 * 900e9  # bytes/s a pass streams at
KERNEL_LAUNCH = 5e-6      # seconds per kernel of a pass
BATCHES = [2 ** k for k in range(14)]  # 1 .. 8192
FP32 = 4


def roofline(flops, traffic, kernels):
    """Seconds of a pass moving `traffic` bytes and doing `flops` operations."""
    return max(flops / (PEAK_FLOPS * MFU), traffic / HBM_BANDWIDTH) + kernels * KERNEL_LAUNCH


def layer(name, kind, inputs, params, flops, io_bytes, output_bytes, saved_bytes, kernels,
          input_grad_flops=None, dense=True):
    """A layer with `params` parameters doing `flops` per sample in F (and in W; I does
    `input_grad_flops`, F's by default), reading and writing `io_bytes` a sample; a pass
    reads all its weights (W writes their gradient too) unless they are not `dense`
    (an embedding bag reads only the rows it looks up, counted in `io_bytes`)."""
    weights = FP32 * params
    traffic = weights if dense else 0
    input_grad_flops = flops if input_grad_flops is None else input_grad_flops

    def passes(b):
        f = roofline(flops * b, traffic + io_bytes * b, kernels)
        i = roofline(input_grad_flops * b, traffic + io_bytes * b, kernels) if inputs else 0.0
        w = roofline(flops * b, 2 * traffic + io_bytes * b, kernels) if params else 0.0
        return f, i, w

    f, i, w = passes(1)
    others = []
    for b in BATCHES[1:]:
        fb, ib, wb = passes(b)
        others.append({"batch": b, "forward_seconds": fb, "backward_input_seconds": ib,
                       "backward_weight_seconds": wb})
    return {"name": name, "kind": kind, "inputs": inputs,
            "forward_seconds": f, "backward_input_seconds": i, "backward_weight_seconds": w,
            "output_bytes": int(output_bytes), "saved_activation_bytes": int(saved_bytes),
            "param_bytes": weights, "optimizer_state_bytes": 2 * weights,
            "optimizer_seconds": 32 * params / HBM_BANDWIDTH, "other_batches": others}


def feed_forward(name, inputs, width_in, width_out, relu=True):
    return layer(name, "linear", inputs, width_in * width_out + width_out, 2 * width_in * width_out,
                 FP32 * (width_in + width_out), FP32 * width_out,
                 FP32 * (width_in + (width_out if relu else 0)), 2 if relu else 1)


def transformer(name, inputs, s, h, heads, ffn):
    matmul = 2 * s * (4 * h * h + 2 * h * ffn)
    attention = 4 * s * s * h
    return layer(name, "transformer_block", inputs, 4 * h * h + 2 * h * ffn + 9 * h + ffn,
                 matmul + attention, FP32 * 2 * s * h, FP32 * s * h,
                 2 * s * h * (34 + 5 * heads * s / h), 15, input_grad_flops=matmul + 2 * attention)


def mmt():
    s, h, heads, ffn, branches, depth, classes = 256, 1024, 16, 4096, 4, 8, 1000
    out, pools = [], []
    for b in range(branches):
        previous = "b%d_input" % b
        out.append(layer(previous, "linear", [], h * h + h, 2 * s * h * h, FP32 * 2 * s * h, FP32 * s * h,
                         FP32 * s * h, 1))
        for i in range(depth):
            out.append(transformer("b%d_layer%d" % (b, i), [previous], s, h, heads, ffn))
            previous = out[-1]["name"]
        out.append(layer("b%d_pool" % b, "pool", [previous], 0, s * h, FP32 * (s * h + h), FP32 * h, 0, 1))
        pools.append("b%d_pool" % b)
    out.append(feed_forward("fusion", pools, branches * h, h))
    out.append(feed_forward("head", ["fusion"], h, classes, relu=False))
    return out


def mlp_branches(out, branches, depth, width, prefix):
    ends = []
    for b in range(branches):
        previous = []
        for i in range(depth):
            name = "%s%d_fc%d" % (prefix, b, i)
            out.append(feed_forward(name, previous, width, width))
            previous = [name]
        ends += previous
    return ends


def top(out, inputs, width_in, width, depth):
    previous = inputs
    for i in range(depth):
        name = "top_fc%d" % i
        out.append(feed_forward(name, previous, width_in if i == 0 else width, width))
        previous = [name]
    out.append(feed_forward("head", previous, width, 1, relu=False))
    return out


def dlrm():
    branches, depth, width, rows, dim, bag = 7, 4, 4096, 1000000, 64, 100
    out = []
    ends = mlp_branches(out, branches, depth, width, "dense")
    for b in range(branches):
        # A bag of lookups summed: reads `bag` rows a sample, whatever the table's size.
        name = "sparse%d_bag" % b
        out.append(layer(name, "embedding", [], rows * dim, bag * dim, FP32 * (bag * dim + dim), FP32 * dim,
                         FP32 * bag, 1, dense=False))
        ends.append(name)
    return top(out, ends, branches * (width + dim), width, depth)


def candle_uno():
    branches, depth, width = 7, 4, 4096
    out = []
    ends = mlp_branches(out, branches, depth, width, "b")
    return top(out, ends, branches * width, width, depth)


MODELS = {"mmt": mmt, "dlrm": dlrm, "candle-uno": candle_uno}


def graph(name):
    return {"format": "pipetrain.layer_graph", "version": 1, "batch_size": 1, "layers": MODELS[name]()}


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in MODELS:
        sys.exit("usage: graphpipe_graphs.py {%s} OUT.json" % "|".join(MODELS))
    with open(sys.argv[2], "w") as f:
        json.dump(graph(sys.argv[1]), f, indent=1)
