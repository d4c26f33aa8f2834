// `pipetrain export`: one model file from a checkpoint, whatever plan wrote it, for
// Python (torch.jit.load for the user's TorchScript model, torch.load for the zoo's).
#include <cstdio>
#include <memory>

#include "commands.h"
#include "pipetrain/torch/checkpoint.h"

namespace pipetrain::cli {

Command addExportCommand(CLI::App& app) {
  struct Args {
    std::string checkpoint, out, model_file;
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("export", torchCommandDescription("export"));
  cmd->add_option("checkpoint", a->checkpoint, "a checkpoint folder, or a --checkpoint-dir (its newest intact one)")
      ->required();
  cmd->add_option("--out", a->out, "the model file to write")->required();
  cmd->add_option("--model-file", a->model_file,
                  "the TorchScript file the run trained (default: the path the checkpoint recorded)");
  return {cmd, [a] {
            const runtime::Checkpoint checkpoint = runtime::findCheckpoint(a->checkpoint);
            runtime::exportCheckpoint(checkpoint, a->out, a->model_file);
            const auto& p = checkpoint.manifest.position;
            std::printf("exported %s (at epoch %d, mini-batch %lld; %lld mini-batches trained) to %s\n",
                        checkpoint.dir.c_str(), p.epoch + 1, static_cast<long long>(p.step),
                        static_cast<long long>(p.minibatches), a->out.c_str());
            return 0;
          }};
}

}  // namespace pipetrain::cli
