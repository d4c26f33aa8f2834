// A `train` request as its options left it (train_options.h), made whole and checked
// before any long work: the model and its data resolved, and options that cannot go
// together refused with what to drop.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "pipetrain/job/console.h"
#include "pipetrain/job/train_job.h"
#include "pipetrain/job/train_request.h"

namespace pipetrain::job {

// `given`: the names of the options given (train_options.h). Resolves the model (its
// sizes parsed, a Python model captured, once per host) and its data's defaults, and
// refuses what cannot go together. Where this process decides the plan (a launcher, or
// rank 0 of ranks started without one), the plan's options are checked too.
void resolveTrainRequest(TrainRequest& request, const std::set<std::string>& given, const Say& say);

// What the options given ask of the job beyond their values (train_job.h).
TrainAsked askedOf(const std::set<std::string>& given);

// KEY=INTEGER model sizes ("layers=8").
models::ModelConfig parseModelOptions(const std::vector<std::string>& options);

}  // namespace pipetrain::job
