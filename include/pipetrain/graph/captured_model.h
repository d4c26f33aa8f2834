// A model given as Python source (`train --model-py 'FILE.py:EXPR'`), turned into the
// TorchScript file pipetrain trains by python/pipetrain_capture.py, and kept in a cache
// beside the profiles, keyed by the source's and the data's bytes, the expression and
// the capture tool itself, so that the next run with the same model starts at once.
#pragma once

#include <string>

namespace pipetrain::graph {

struct CaptureRequest {
  std::string spec;       // FILE.py:EXPRESSION or MODULE:EXPRESSION
  std::string data_file;  // its first inputs trace the model
  std::string output;     // the tensor of a structured result to train on; empty: the tool's default
};

// The interpreter with the pinned torch ($PIPETRAIN_PYTHON, else the build's) and the
// capture tool beside it ($PIPETRAIN_CAPTURE, else the source tree's).
std::string capturePython();
std::string captureTool();

// The captured file: the cache's entry, or captured now (the tool writes its notes and
// refusals to stderr). Processes asking for the same model at once (each torchrun rank of
// a host) take turns on a lock beside the entry: one captures, the others read its file.
// Throws Error naming the spec when the capture fails.
std::string capturedModel(const CaptureRequest& request, const std::string& cache_dir);

}  // namespace pipetrain::graph
