// The messages between stages: which producer layers' outputs each edge of the stage
// graph carries, their shapes and dtype for one micro-batch (from a dry run of the model
// at construction, never from the wire), and how several travel as one.
#pragma once

#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "pipetrain/schedule/program.h"
#include "pipetrain/torch/executor.h"
#include "pipetrain/torch/models.h"
#include "pipetrain/torch/precision.h"

namespace pipetrain::runtime {

// What one edge of the stage graph carries per micro-batch: the outputs of the
// producer's layers that the consumer reads, one message each way.
struct Edge {
  std::vector<int> layers;                    // producer layers whose outputs cross
  std::vector<std::vector<int64_t>> shapes;   // their shapes for one micro-batch
  torch::ScalarType dtype = torch::kFloat;    // the message's (one tensor's own; packs are fp32)
  // Several tensors travel as one (N, total) fp32 pack; one travels as it is (every
  // edge of a chain), so a chain's messages are never copied.
  bool packed() const { return layers.size() > 1; }
  std::vector<int64_t> messageShape() const {
    if (!packed()) return shapes.front();
    int64_t total = 0;
    for (const auto& shape : shapes) total += c10::multiply_integers(shape.begin() + 1, shape.end());
    return {shapes.front().front(), total};
  }
  torch::Tensor pack(const std::vector<torch::Tensor>& tensors) const {
    if (!packed()) return tensors.front();
    std::vector<torch::Tensor> flat;
    for (const auto& t : tensors) flat.push_back(t.reshape({t.size(0), -1}));
    return torch::cat(flat, 1);
  }
  // Views of `message`, one per layer.
  std::vector<torch::Tensor> unpack(const torch::Tensor& message) const {
    if (!packed()) return {message};
    std::vector<torch::Tensor> out;
    int64_t offset = 0;
    for (const auto& shape : shapes) {
      const int64_t width = c10::multiply_integers(shape.begin() + 1, shape.end());
      out.push_back(message.narrow(1, offset, width).reshape(shape));
      offset += width;
    }
    return out;
  }
};

struct StageEdges {
  std::map<std::pair<int, int>, Edge> edges;  // (producer stage, consumer stage)
  std::vector<int64_t> output_bytes;          // per stage: what it sends per micro-batch, each output once
};

// The edges that `stages` of `model` need, checked against the Program's stage graph:
// each layer in one stage, every edge the Program has read by some layer and no other.
// Throws Error naming the stages or layer otherwise.
StageEdges stageEdges(const models::Model& model, const std::vector<StageLayers>& stages,
                      const schedule::Program& program, int64_t microbatch_size, Precision precision);

}  // namespace pipetrain::runtime
