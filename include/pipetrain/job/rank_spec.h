// A launched rank's part of a training job, the one form in which `train`'s launcher
// hands it to the ranks it starts (`pipetrain train --job FILE`): the run as decided (the
// model and data resolved, the plan, the recipe, the checkpoint to resume, where the
// metrics go), not the options that led to it.
#pragma once

#include <string>
#include <vector>

#include "pipetrain/job/train_request.h"
#include "pipetrain/util/json_io.h"

namespace pipetrain::job {

// The reader refuses unknown keys and wrong types, naming `origin` and the key; what it
// returns trains as the request written did.
json_io::Json rankJobToJson(const TrainRequest& request);
TrainRequest rankJobFromJson(const json_io::Json& j, const std::string& origin);

// Writes the rank job of `request` to rankJobPath() (this process's, in the temporary
// folder; the caller removes it when the job ends) and returns the command line each
// rank runs.
std::vector<std::string> rankCommand(const TrainRequest& request);
std::string rankJobPath();

}  // namespace pipetrain::job
