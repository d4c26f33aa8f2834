// The combinations the exploration tries (explorer.cpp): micro-batch sizes, widths, and
// the balanced plans of schedules whose ranks run several stages.
#include <algorithm>

#include "explore_internal.h"
#include "pipetrain/plan/partition.h"
#include "pipetrain/schedule/schedule_traits.h"
#include "pipetrain/util/error.h"
#include "pipetrain/util/limits.h"

namespace pipetrain::planner {

std::vector<int64_t> defaultMicrobatchSizes(int64_t batch, int64_t smallest_timed) {
  // Below the smallest timed size a layer's costs scale in proportion from it
  // (LayerGraph::secondsAt): too optimistic, since what a pass costs whatever its samples
  // would shrink with them. gpt profiled at 8 and planned for 32 chose 32 micro-batches
  // of 1, predicted at 3.7x what it ran (bench/prediction_cases.py). A batch smaller than
  // the profile's keeps its own size.
  const int64_t floor = std::max<int64_t>(1, std::min(smallest_timed, batch));
  std::vector<int64_t> sizes;
  for (int64_t b = floor; b <= batch; b *= 2)
    if (batch % b == 0) sizes.push_back(b);
  for (int64_t parts = 1; batch / parts >= floor; parts *= 2)
    if (batch % parts == 0) sizes.push_back(batch / parts);
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  return sizes;
}

namespace detail {

namespace {

std::vector<int64_t> servable(int64_t batch, const std::vector<int64_t>& sizes) {
  std::vector<int64_t> out;
  for (int64_t b : sizes)
    if (b <= limits::kMaxMicrobatchSize && batch / b <= limits::kMaxMicrobatches) out.push_back(b);
  return out;
}

}  // namespace

std::vector<int64_t> microbatchSizes(const ExploreOptions& o, int64_t smallest_timed) {
  std::vector<int64_t> sizes;
  if (!o.microbatch_sizes.empty()) {
    for (int64_t b : o.microbatch_sizes)
      if (b < 1 || o.global_batch % b != 0)
        throw Error("micro-batch size " + std::to_string(b) + " does not divide the batch of " +
                    std::to_string(o.global_batch));
    sizes = o.microbatch_sizes;
  } else {
    sizes = defaultMicrobatchSizes(o.global_batch, smallest_timed);
  }
  return servable(o.global_batch, sizes);
}

std::vector<int64_t> smallerMicrobatchSizes(const ExploreOptions& o, int64_t smallest_timed) {
  std::vector<int64_t> smaller;
  for (int64_t b : defaultMicrobatchSizes(o.global_batch, 1))
    if (b < std::min(smallest_timed, o.global_batch)) smaller.push_back(b);
  return servable(o.global_batch, smaller);
}

void throwUnservable(const ExploreOptions& o) {
  throw Error("a batch of " + std::to_string(o.global_batch) + " splits into no more than " +
              std::to_string(limits::kMaxMicrobatches) + " micro-batches of at most " +
              std::to_string(limits::kMaxMicrobatchSize) + " samples with " +
              (o.microbatch_sizes.empty() ? "a size dividing it" : "the sizes given"));
}

std::vector<int> widths(int devices) {
  std::vector<int> w;
  for (int d = 1; d < devices; d *= 2) w.push_back(d);
  w.push_back(devices);
  return w;
}

std::vector<std::vector<int>> deviceShapes(int width, const std::vector<int>& part_sizes, bool use_all_devices) {
  std::vector<std::vector<int>> shapes;
  auto offer = [&](std::vector<int> bounds) {
    if (bounds.size() < 3 || (use_all_devices && bounds.back() != width)) return;
    if (std::find(shapes.begin(), shapes.end(), bounds) == shapes.end()) shapes.push_back(std::move(bounds));
  };
  for (int q : part_sizes)
    for (int k = 2; k <= std::min(kMaxShapeStages, width / q); ++k) {
      std::vector<int> bounds;
      for (int s = 0; s <= k; ++s) bounds.push_back(s * q);
      offer(std::move(bounds));
    }
  for (int singles = 1; singles <= kShapeTailDevices && singles < width; ++singles) {
    std::vector<int> bounds{0};
    for (int d = width - singles; d <= width; ++d) bounds.push_back(d);
    offer(std::move(bounds));
  }
  return shapes;
}

// A schedule whose ranks run several stages (interleaved 1F1B with two chunks, the V
// schedules): `width` ranks, layers balanced by compute, stages placed as the schedule
// places them.
plan::Plan multiStagePlan(const std::string& name, const graph::LayerGraph& graph, const cluster::ClusterSpec& cluster,
                          int width, int64_t microbatch_size, int microbatches) {
  const schedule::ScheduleTraits& t = schedule::traits(name);
  const int chunks = t.placement == schedule::Placement::kLooped ? kInterleavedChunks : 1;
  const int stages = width * schedule::stagesPerRank(t, chunks);
  std::vector<double> costs;
  for (int i = 0; i < graph.size(); ++i) costs.push_back(graph.secondsAt(i, microbatch_size).forwardBackward());
  const std::vector<int> bounds = plan::balancedChainSplit(costs, stages);
  plan::Plan p;
  p.microbatch_size = microbatch_size;
  p.microbatches = microbatches;
  p.schedule.name = name;
  p.schedule.chunks = chunks;
  for (int s = 0; s < stages; ++s) {
    plan::Stage st;
    for (int l = bounds[s]; l < bounds[s + 1]; ++l) st.layers.push_back(graph.layer(l).name);
    st.devices.push_back(cluster.device(schedule::placedRank(t.placement, s, width)).name);
    p.stages.push_back(std::move(st));
  }
  return p;
}

}  // namespace detail
}  // namespace pipetrain::planner
