// What the executor reports of each mini-batch as a run goes: a report comes a mini-batch
// late (the loss is read once the next one is queued), its time is when the mini-batch
// ended. Read a mini-batch late, the last of a run looked a mini-batch short, and a rate
// taken between reports (the --log-jsonl step events') came out 6% high on the mlp's
// 16-mini-batch epochs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "pipetrain/schedule/schedules.h"
#include "pipetrain/torch/executor.h"
#include "pipetrain/torch/models.h"
#include "pipetrain/torch/transport.h"

namespace pipetrain::runtime {
namespace {

TEST(ExecutorReports, EachMinibatchIsReportedInOrderWithTheTimeItsLastActionEnded) {
  const int m = 2, minibatches = 4;
  const int64_t b = 8;
  models::Model model =
      models::buildModel("mlp", {{"input", 16}, {"layers", 2}, {"width", 16}, {"classes", 3}}, /*seed=*/5);
  std::vector<int> all(model.layers.size());
  for (int l = 0; l < static_cast<int>(all.size()); ++l) all[static_cast<std::size_t>(l)] = l;
  schedule::ScheduleSpec spec;
  spec.name = "1f1b";
  spec.microbatches = m;
  spec.minibatches = minibatches;
  const schedule::Program program = schedule::buildProgram(spec, schedule::chainDag(1));
  auto group = makeInProcessGroup(1, std::chrono::seconds(20));
  auto sgd = [](int, std::vector<torch::Tensor> p) {
    return std::make_unique<torch::optim::SGD>(std::move(p), torch::optim::SGDOptions(0.1));
  };
  PipelineExecutor executor(program, 0, model, {StageLayers{all}}, b, *group[0], sgd);
  const torch::Tensor x = torch::randn({m * minibatches * b, 16});
  const torch::Tensor y = torch::randint(0, 3, {m * minibatches * b});
  MicrobatchData data{[&](int j) { return x.narrow(0, j * b, b); }, [&](int j) { return y.narrow(0, j * b, b); }, {}};

  std::vector<int> reported;
  std::vector<double> ended;
  const RunResult r = executor.run(program, data, Clock::now(), [&](int k, double loss, double at, double) {
    EXPECT_FALSE(std::isnan(loss)) << "mini-batch " << k;
    reported.push_back(k);
    ended.push_back(at);
  });
  ASSERT_EQ(reported, (std::vector<int>{0, 1, 2, 3}));
  // Each report's time lies between the end of the last action on its mini-batch's
  // micro-batches and the start of the action after it, the run's last included.
  for (int k = 0; k < minibatches; ++k) {
    std::size_t last = 0;
    for (std::size_t i = 0; i < r.actions.size(); ++i)
      if (r.actions[i].action.microbatch >= 0 && r.actions[i].action.microbatch / m == k) last = i;
    const double next_start =
        last + 1 < r.actions.size() ? r.actions[last + 1].start : std::numeric_limits<double>::infinity();
    EXPECT_GE(ended[static_cast<std::size_t>(k)], r.actions[last].end) << "mini-batch " << k;
    EXPECT_LE(ended[static_cast<std::size_t>(k)], next_start) << "mini-batch " << k;
  }
}

}  // namespace
}  // namespace pipetrain::runtime
