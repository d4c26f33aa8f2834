// Options declared once (util/option_table.h): given their values by name, as the
// command line and the Python API give them.
#include <gtest/gtest.h>

#include "../expect_error.h"
#include "pipetrain/util/option_table.h"

namespace pipetrain::options {
namespace {

struct Asked {
  std::string name = "none";
  int count = 1;
  int64_t offset = 0;
  double rate = 0.5;
  bool verbose = false;
  std::vector<int> bounds;
  std::vector<double> costs;
  std::string mode;
};

std::vector<Option> table(Asked& a) {
  return {{"name", "Options", "a name", &a.name},
          Option{"count", "Options", "how many", &a.count}.positive(),
          {"offset", "Options", "from where", &a.offset},
          Option{"rate", "Options", "how fast", &a.rate}.nonNegative(),
          {"verbose", "Options", "say more", &a.verbose},
          Option{"bounds", "Options", "cuts", &a.bounds}.repeated(),
          Option{"costs", "Options", "F,B", &a.costs}.exactly(2),
          Option{"mode", "Options", "which", std::function<void(const std::string&)>([&a](const std::string& m) {
                   a.mode = "set " + m;
                 })}.among({"fast", "exact"})};
}

TEST(OptionTable, ValuesGoWhereTheTableSaysAsTheCommandLineParsesThem) {
  Asked a;
  const std::vector<Option> t = table(a);
  apply(t, "name", {"gpt"}, "train");
  apply(t, "count", {"3"}, "train");
  apply(t, "offset", {"-7"}, "train");
  apply(t, "rate", {"0"}, "train");
  apply(t, "verbose", {"true"}, "train");
  apply(t, "bounds", {"0,2", "4"}, "train");
  apply(t, "costs", {"1.5,3"}, "train");
  apply(t, "mode", {"exact"}, "train");
  EXPECT_EQ(a.name, "gpt");
  EXPECT_EQ(a.count, 3);
  EXPECT_EQ(a.offset, -7);
  EXPECT_EQ(a.rate, 0);
  EXPECT_TRUE(a.verbose);
  EXPECT_EQ(a.bounds, (std::vector<int>{0, 2, 4}));
  EXPECT_EQ(a.costs, (std::vector<double>{1.5, 3}));
  EXPECT_EQ(a.mode, "set exact");
  apply(t, "verbose", {"false"}, "train");  // a flag not given
  EXPECT_TRUE(a.verbose);
}

TEST(OptionTable, AValueItCannotTakeIsRefusedByName) {
  Asked a;
  const std::vector<Option> t = table(a);
  testing::expectError([&] { apply(t, "count", {"0"}, "train"); }, {"--count", "positive"});
  testing::expectError([&] { apply(t, "count", {"3.5"}, "train"); }, {"--count", "whole number"});
  testing::expectError([&] { apply(t, "count", {"99999999999"}, "train"); }, {"--count", "out of range"});
  testing::expectError([&] { apply(t, "rate", {"-1"}, "train"); }, {"--rate", "0 or more"});
  testing::expectError([&] { apply(t, "mode", {"slow"}, "train"); }, {"--mode", "fast, exact"});
  testing::expectError([&] { apply(t, "costs", {"1"}, "train"); }, {"--costs", "2 values"});
  testing::expectError([&] { apply(t, "name", {"a", "b"}, "train"); }, {"--name", "one value"});
  testing::expectError([&] { apply(t, "verbose", {"yes"}, "train"); }, {"--verbose", "flag"});
  testing::expectError([&] { apply(t, "cuont", {"3"}, "train"); },
                       {"unknown option --cuont for `pipetrain train`", "did you mean --count?"});
  EXPECT_EQ(a.count, 1);
}

TEST(OptionTable, ItsJsonIsWhatPythonReads) {
  Asked a;
  const json_io::Json j = optionsToJson(table(a));
  ASSERT_EQ(j.size(), 8u);
  EXPECT_EQ(j[1]["keyword"], "count");
  EXPECT_TRUE(j[4]["flag"]);
  EXPECT_TRUE(j[5]["list"]);
  EXPECT_EQ(j[7]["choices"], (json_io::Json{"fast", "exact"}));
}

}  // namespace
}  // namespace pipetrain::options
