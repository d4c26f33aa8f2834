// The LibTorch side links and computes: a real matmul runs and is timed.
#include "pipetrain/torch/torch_info.h"

#include <gtest/gtest.h>

namespace pipetrain::torchside {
namespace {

TEST(TorchInfo, ProbesTheLinkedLibTorch) {
  const TorchInfo info = probeTorch(64);
  EXPECT_FALSE(info.version.empty());
  EXPECT_GE(info.intra_op_threads, 1);
  EXPECT_EQ(info.matmul_size, 64);
  EXPECT_GT(info.matmul_gflops, 0.0);
}

}  // namespace
}  // namespace pipetrain::torchside
