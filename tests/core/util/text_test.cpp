#include "pipetrain/util/text.h"

#include <gtest/gtest.h>

#include <string>

#include "pipetrain/util/error.h"

namespace pipetrain::text {
namespace {

TEST(Text, FormatKeepsTextOfAnyLength) {
  EXPECT_EQ(format("%.1f%%", 12.345), "12.3%");
  // A report fact longer than the 64 bytes a fixed buffer held.
  const std::string tail(100, 'x');
  EXPECT_EQ(format(("%.1f samples/s: " + tail).c_str(), 81480.2), "81480.2 samples/s: " + tail);
}

TEST(Text, ParseBytesTakesUnitsAndRefusesTheRest) {
  EXPECT_EQ(parseBytes("512MiB", "x"), int64_t{512} << 20);
  EXPECT_EQ(parseBytes("2 gib", "x"), int64_t{2} << 30);
  EXPECT_EQ(parseBytes("1.5GB", "x"), int64_t{1500000000});
  EXPECT_EQ(parseBytes("80e9", "x"), int64_t{80000000000});
  EXPECT_EQ(parseBytes("4096", "x"), 4096);
  for (const char* bad : {"", "lots", "12 parsecs", "0", "-5MiB", "3PiB", "nan"}) {
    SCOPED_TRACE(bad);
    EXPECT_THROW(parseBytes(bad, "--rank-memory"), Error);
  }
  try {
    parseBytes("12 parsecs", "--rank-memory");
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--rank-memory: '12 parsecs' has an unknown unit 'parsecs'"), std::string::npos);
  }
}

}  // namespace
}  // namespace pipetrain::text
