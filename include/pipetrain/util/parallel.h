// Independent work spread over the machine's cores: the planner simulates a batch of
// proposals at once (planner/explorer.cpp).
#pragma once

#include <cstddef>
#include <functional>

namespace pipetrain::util {

// Calls work(i) for every i in [0, n), on up to min(n, cores) threads (the calling
// thread among them), and returns when all have. work must not throw: catch in it and
// hand the error back through what it writes.
void parallelFor(std::size_t n, const std::function<void(std::size_t)>& work);

}  // namespace pipetrain::util
