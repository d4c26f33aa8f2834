// PipeDream's hierarchical shape: one pipeline on a block of devices, copied onto the
// next blocks, each stage's replicas spread over the copies. The chain partitioner's
// stages take consecutive devices, so its replicas of a stage sit side by side; a copy
// per server instead keeps each micro-batch's messages inside its server and sends only
// the gradients' all-reduce between them (PipeDream's ResNet-50 on 4 servers of 8 GPUs:
// one server's 2bw pipeline copied onto the four simulates at 9,097 samples/s, where
// the best chain of contiguous blocks simulated at 6,937; docs/planner.md).
#pragma once

#include <optional>

#include "pipetrain/cluster/cluster_spec.h"
#include "pipetrain/plan/plan.h"

namespace pipetrain::planner {

// `pipeline` runs on devices among the first `width` of `cluster` (in its order) with one
// copy's share of the micro-batches. Returns it on `copies` blocks of `width` devices,
// running copies x as many micro-batches: device d of the pipeline becomes devices
// d, d + width, d + 2 width, ... Each stage lists its replicas copy by copy within each
// device of the pipeline, so that micro-batch i meets replica i mod r of every stage
// (schedule generators route so) in copy i mod copies, at every stage: a micro-batch
// stays in its copy. Error where a device lies outside the first `width` or the copies
// need more devices than the cluster has, or the pipeline runs several stages on one rank.
plan::Plan replicatePipeline(const plan::Plan& pipeline, int copies, int width, const cluster::ClusterSpec& cluster);

// What replicatePipeline made `plan` of: its pipeline, at least 2 copies and their width.
// Nothing where it was not so made.
struct CopiedPipeline {
  plan::Plan pipeline;
  int copies = 0, width = 0;
};
std::optional<CopiedPipeline> copiedPipeline(const plan::Plan& plan, const cluster::ClusterSpec& cluster);

}  // namespace pipetrain::planner
