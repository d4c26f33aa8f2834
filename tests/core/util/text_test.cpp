#include "pipetrain/util/text.h"

#include <gtest/gtest.h>

#include <string>

namespace pipetrain::text {
namespace {

TEST(Text, FormatKeepsTextOfAnyLength) {
  EXPECT_EQ(format("%.1f%%", 12.345), "12.3%");
  // A report fact longer than the 64 bytes a fixed buffer held.
  const std::string tail(100, 'x');
  EXPECT_EQ(format(("%.1f samples/s: " + tail).c_str(), 81480.2), "81480.2 samples/s: " + tail);
}

}  // namespace
}  // namespace pipetrain::text
