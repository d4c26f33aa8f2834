#include "pipetrain/schedule/action.h"

#include <gtest/gtest.h>

#include "pipetrain/util/error.h"

namespace pipetrain::schedule {
namespace {

TEST(Action, TextFormRoundTrips) {
  for (const char* text : {"0F0", "12B345", "1I3", "2W0v1", "0SEND_F1>1", "1RECV_F1<0", "3SEND_B7>2",
                           "2RECV_B7<3", "0STEPv3", "4ALLREDUCE", "1F5v2", "0SEND_F2>4"}) {
    EXPECT_EQ(toString(parseAction(text)), text) << text;
  }
}

TEST(Action, OverlappedPairsUsePyTorchsForm) {
  const std::vector<Action> pair = parseActions("(0F3;1B2)OVERLAP_F_B");
  ASSERT_EQ(pair.size(), 2u);
  EXPECT_TRUE(pair[0].overlap_next);
  EXPECT_EQ(toString(pair[0]), "0F3");
  EXPECT_EQ(toString(pair[1]), "1B2");
  std::vector<Action> list = {parseAction("0F0"), pair[0], pair[1], parseAction("1W2")};
  EXPECT_EQ(toStrings(list), (std::vector<std::string>{"0F0", "(0F3;1B2)OVERLAP_F_B", "1W2"}));
  EXPECT_EQ(parseActions("2I4").size(), 1u);
  for (const char* text : {"(0F3;1W2)OVERLAP_F_B", "(0B3;1B2)OVERLAP_F_B", "(0F3;1B2)", "(0F31B2)OVERLAP_F_B",
                           "(0F3;1Bx)OVERLAP_F_B"})
    EXPECT_THROW(parseActions(text), Error) << text;
}

TEST(Action, PyTorchFormWithoutPeerMeansTheNeighbour) {
  EXPECT_EQ(parseAction("2SEND_F1").peer_stage, 3);
  EXPECT_EQ(parseAction("2RECV_F1").peer_stage, 1);
  EXPECT_EQ(parseAction("2SEND_B1").peer_stage, 1);
  EXPECT_EQ(parseAction("2RECV_B1").peer_stage, 3);
}

TEST(Action, MalformedTextIsRejectedWithTheText) {
  for (const char* text : {"", "F0", "0X1", "0F", "0F1x", "0SEND_F1<2", "0RECV_F1", "0Fv", "0F1v"}) {
    try {
      parseAction(text);
      FAIL() << "accepted " << text;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("\"") + text + "\""), std::string::npos) << e.what();
    }
  }
}

TEST(Action, EveryTypeHasADistinctName) {
  for (int a = 0; a < kNumActionTypes; ++a)
    for (int b = a + 1; b < kNumActionTypes; ++b)
      EXPECT_STRNE(name(static_cast<ActionType>(a)), name(static_cast<ActionType>(b)));
}

}  // namespace
}  // namespace pipetrain::schedule
