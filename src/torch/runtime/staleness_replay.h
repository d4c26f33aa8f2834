// A Program's staleness rule replayed in one process (trainer.h's
// trainStalenessReference): micro-batch by micro-batch, each stage's forward and
// backward pass at exactly the weight version the Program names (the current one where
// it reads the latest, corrected by PipeMare's T2 where the plan asks), each stage
// stepping when its Program steps, on the mean gradient of the micro-batches that STEP
// combines, at T1's rate. Calibration (calibration.h) replays update rules with it.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "pipetrain/torch/trainer.h"

namespace pipetrain::runtime {

class StalenessReplay {
 public:
  // Trains `model` (the config's, from openModel; tied weights under synchronous
  // schedules only) in place by the config's plan over `minibatches` mini-batches in the
  // data order of epoch `order_epoch` and, past its end, of the epochs after it. One
  // stream: an asynchronous schedule does not drain between epochs here.
  StalenessReplay(const TrainConfig& config, models::Model& model, int minibatches, int order_epoch = 0);
  ~StalenessReplay();

  int totalMicrobatches() const;
  int64_t datasetSize() const;  // samples of the training data
  // Trains micro-batch `j`; micro-batches run in order, each once.
  void run(int j);
  // Puts every stage's newest weights into the model.
  void loadLatest();

  // How far a backward pass's weights are from the weights its forward pass read, per
  // stage, summed over the backward passes that read later weights than their forward
  // (root-mean-square over those passes of the whole stage's L2 distance): `stale` for the
  // current weights w, `corrected` for T2's u = w - tau x delta (0 without T2). A
  // diagnostic of T2: corrected < stale where its estimate helps. Off unless asked for
  // before the first run(), as it costs a pass over the weights per backward pass.
  struct Discrepancy {
    double stale = 0, corrected = 0;
    int64_t passes = 0;
  };
  void trackDiscrepancy();
  std::vector<Discrepancy> discrepancy() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace pipetrain::runtime
