// What a job says while it runs (profiling, planning, restarts, notes), to whoever
// started it: the job decides what to say, its caller where it goes (the CLI prints
// each line on stdout).
#pragma once

#include <functional>
#include <string>

namespace pipetrain::job {

using Say = std::function<void(const std::string& line)>;

// A line formatted as printf formats it.
std::string formatted(const char* format, ...) __attribute__((format(printf, 1, 2)));

}  // namespace pipetrain::job
