#include "pipetrain/job/rank_spec.h"

#include <unistd.h>

#include <filesystem>

#include "pipetrain/job/launcher.h"
#include "pipetrain/recipe/recipe.h"

namespace pipetrain::job {
namespace {

constexpr const char* kFormat = "pipetrain.rank-job";

json_io::Json dataToJson(const data::DataOptions& d) {
  return {{"name", d.name},
          {"file", d.file},
          {"split", d.split},
          {"fashion_mnist_dir", d.fashion_mnist_dir},
          {"fortunes_dir", d.fortunes_dir},
          {"synthetic_size", d.synthetic_size},
          {"seed", d.seed},
          {"token_dtype", d.token_dtype},
          {"context", d.context}};
}

data::DataOptions dataFromJson(const json_io::JsonCursor& c) {
  c.allowOnly({"name", "file", "split", "fashion_mnist_dir", "fortunes_dir", "synthetic_size", "seed", "token_dtype",
               "context"});
  data::DataOptions d;
  d.name = c.field("name").asString();
  d.file = c.field("file").asString();
  d.split = c.field("split").asString();
  d.fashion_mnist_dir = c.field("fashion_mnist_dir").asString();
  d.fortunes_dir = c.field("fortunes_dir").asString();
  d.synthetic_size = c.field("synthetic_size").asNonNegativeInt();
  d.seed = static_cast<uint64_t>(c.field("seed").asNonNegativeInt());
  d.token_dtype = c.field("token_dtype").asString();
  d.context = c.field("context").asNonNegativeInt();
  return d;
}

json_io::Json configToJson(const runtime::TrainConfig& c) {
  return {{"model", c.model},
          {"model_config", c.model_config},
          {"model_file", c.model_file},
          {"data", dataToJson(c.data)},
          {"plan", c.plan.toJson()},
          {"epochs", c.epochs},
          {"max_steps_per_epoch", c.max_steps_per_epoch},
          {"recipe", recipe::recipeToJson(c.optimizer, c.lr, c.lr_schedule, c.clip_grad_norm)},
          {"seed", c.seed},
          {"evaluate", c.evaluate},
          {"threads", c.threads},
          {"device", c.device},
          {"precision", c.precision},
          {"export_path", c.export_path},
          {"torch_trace", c.torch_trace},
          {"checkpoint_dir", c.checkpoint_dir},
          {"checkpoint_every", c.checkpoint_every},
          {"checkpoint_keep", c.checkpoint_keep},
          {"resume", c.resume}};
}

runtime::TrainConfig configFromJson(const json_io::JsonCursor& c, const std::string& origin) {
  c.allowOnly({"model", "model_config", "model_file", "data", "plan", "epochs", "max_steps_per_epoch", "recipe", "seed",
               "evaluate", "threads", "device", "precision", "export_path", "torch_trace", "checkpoint_dir",
               "checkpoint_every", "checkpoint_keep", "resume"});
  runtime::TrainConfig config;
  config.model = c.field("model").asString();
  const json_io::JsonCursor sizes = c.field("model_config");
  if (!sizes.node().is_object()) sizes.fail("expected an object of sizes");
  for (const auto& [key, value] : sizes.node().items()) config.model_config[key] = sizes.field(key).asInt();
  config.model_file = c.field("model_file").asString();
  config.data = dataFromJson(c.field("data"));
  config.plan = plan::Plan::fromJson(c.field("plan").node(), origin + ": config.plan");
  config.epochs = static_cast<int>(c.field("epochs").asIntIn(1, 1 << 30));
  config.max_steps_per_epoch = c.field("max_steps_per_epoch").asInt();
  const recipe::Recipe r = recipe::recipeFromJson(c.field("recipe"));
  config.optimizer = r.optimizer;
  config.lr = r.lr;
  config.lr_schedule = r.lr_schedule;
  config.clip_grad_norm = r.clip_grad_norm;
  config.seed = static_cast<uint64_t>(c.field("seed").asNonNegativeInt());
  config.evaluate = c.field("evaluate").asBool();
  config.threads = static_cast<int>(c.field("threads").asIntIn(0, 1 << 16));
  config.device = c.field("device").asString();
  config.precision = c.field("precision").asString();
  config.export_path = c.field("export_path").asString();
  config.torch_trace = c.field("torch_trace").asString();
  config.checkpoint_dir = c.field("checkpoint_dir").asString();
  config.checkpoint_every = c.field("checkpoint_every").asNonNegativeInt();
  config.checkpoint_keep = static_cast<int>(c.field("checkpoint_keep").asIntIn(1, 1 << 30));
  config.resume = c.field("resume").asString();
  return config;
}

}  // namespace

json_io::Json rankJobToJson(const TrainRequest& r) {
  return {{"format", kFormat},
          {"version", 1},
          {"config", configToJson(r.config)},
          {"nproc", r.ranks.nproc},
          {"cores", r.ranks.cores},
          {"local_ranks", r.ranks.local_ranks},
          {"wire", r.ranks.wire},
          {"timeout_seconds", r.ranks.timeout_seconds},
          {"log_jsonl", r.outputs.log_jsonl}};
}

TrainRequest rankJobFromJson(const json_io::Json& j, const std::string& origin) {
  const json_io::JsonCursor c(j, origin);
  c.allowOnly({"format", "version", "config", "nproc", "cores", "local_ranks", "wire", "timeout_seconds", "log_jsonl"});
  if (c.field("format").asString() != kFormat) c.field("format").fail(std::string("expected \"") + kFormat + "\"");
  c.field("version").asIntIn(1, 1);
  TrainRequest r;
  r.config = configFromJson(c.field("config"), origin);
  r.ranks.nproc = static_cast<int>(c.field("nproc").asIntIn(1, 1 << 20));
  r.ranks.cores = static_cast<int>(c.field("cores").asIntIn(0, 1 << 20));
  r.ranks.local_ranks = static_cast<int>(c.field("local_ranks").asIntIn(0, 1 << 20));
  r.ranks.wire = c.field("wire").asString();
  r.ranks.timeout_seconds = static_cast<int>(c.field("timeout_seconds").asIntIn(1, 1 << 30));
  r.outputs.log_jsonl = c.field("log_jsonl").asString();
  return r;
}

std::string rankJobPath() {
  return (std::filesystem::temp_directory_path() / ("pipetrain-rank-job-" + std::to_string(::getpid()) + ".json"))
      .string();
}

std::vector<std::string> rankCommand(const TrainRequest& request) {
  const std::string file = rankJobPath();
  json_io::writeFile(file, rankJobToJson(request));
  return childCommand("train", file);
}

}  // namespace pipetrain::job
