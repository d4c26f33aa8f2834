// Error type for everything that crosses a boundary (files, CLI, network).
//
// Messages carry their context first ("plan.json: stages[3].layers[0]: ...") so a
// user can find the offending spot without a debugger. Internal invariants use
// assert() instead.
#pragma once

#include <stdexcept>
#include <string>

namespace pipetrain {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

}  // namespace pipetrain
