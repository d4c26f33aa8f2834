// expectError(f, {words...}): f throws pipetrain::Error whose message names every word.
// Error messages are part of the user interface, so tests pin the words that matter
// (file, field, stage, layer, device) rather than whole sentences.
#pragma once

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "pipetrain/util/error.h"

namespace pipetrain::testing {

template <typename F>
void expectError(F f, const std::vector<std::string>& words) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one mentioning " << words.front();
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (const auto& w : words) EXPECT_NE(msg.find(w), std::string::npos) << "'" << w << "' not in: " << msg;
  }
}

}  // namespace pipetrain::testing
