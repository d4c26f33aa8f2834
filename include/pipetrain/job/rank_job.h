// One rank of a training job (RANK in the environment): started by the launcher
// (local_launch.h), or by hand or another launcher under torchrun's conventions.
#pragma once

#include <functional>
#include <optional>

#include "pipetrain/job/console.h"
#include "pipetrain/job/train_request.h"
#include "pipetrain/torch/checkpoint.h"

namespace pipetrain::job {

// Whether this process is a rank that pipetrain's own launcher started: it then reports
// to the launcher in lines (rank_report.h) rather than to a person.
bool startedByLauncher();

// The checkpoint this run resumes from (runtime::checkpointToResume), said through `say`
// where given; leaves config.resume naming it, or empty.
std::optional<runtime::Checkpoint> resolveResume(runtime::TrainConfig& config, const Say& say);

// Trains this rank over Gloo from the environment (NCCL for the data where asked and
// possible) under request.config's plan, from the checkpoint its resume names
// (resolveResume first), writing the metrics log where the request names one. Under the
// launcher it reports progress and its result on stdout as the launcher reads them;
// otherwise the reporting rank's progress goes to `on_progress`.
runtime::RankResult runRank(TrainRequest& request, const std::function<void(const runtime::Progress&)>& on_progress);

}  // namespace pipetrain::job
