// `pipetrain info`: what this build runs on (LibTorch version, threads, devices, BLAS speed).
#include <cstdio>

#include "commands.h"
#include "pipetrain/torch/torch_info.h"

namespace pipetrain::cli {

Command addInfoCommand(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand("info", torchCommandDescription("info"));
  return {cmd, [] {
            const auto info = torchside::probeTorch();
            std::printf("pipetrain 0.1.0\nLibTorch %s, %d intra-op threads\n", info.version.c_str(),
                        info.intra_op_threads);
            std::printf("CUDA: %s (%d devices); NCCL data channel: %s\n", info.cuda_available ? "yes" : "no",
                        info.cuda_devices, info.nccl ? "built" : "not built");
            std::printf("fp32 matmul %dx%d: %.1f GFLOP/s%s\n", info.matmul_size, info.matmul_size,
                        info.matmul_gflops,
                        info.matmul_gflops < 15 ? "  (slow: is libopenblas0-pthread installed?)" : "");
            return 0;
          }};
}

}  // namespace pipetrain::cli
