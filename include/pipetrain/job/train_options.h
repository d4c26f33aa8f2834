// `train`'s options, declared once (util/option_table.h): the CLI's flags and the
// Python API's keywords are made from this table. Each entry writes into a TrainRequest;
// what was given is then checked as a whole (train_checks.h).
#pragma once

#include <vector>

#include "pipetrain/job/train_request.h"
#include "pipetrain/util/option_table.h"

namespace pipetrain::job {

// The table, bound to `request`, whose present values are the defaults help shows.
std::vector<options::Option> trainOptions(TrainRequest& request);

// The options of a token stream (--data-file FILE.bin), which `profile` shares.
std::vector<options::Option> tokenStreamOptions(data::DataOptions& data, const std::string& group);

// The zoo's model names, as the model option's help lists them.
std::string modelNameList();

}  // namespace pipetrain::job
