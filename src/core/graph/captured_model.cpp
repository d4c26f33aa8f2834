#include "pipetrain/graph/captured_model.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <thread>
#include <vector>

#include "pipetrain/graph/profile_cache.h"
#include "pipetrain/util/error.h"

extern char** environ;

namespace pipetrain::graph {
namespace {

std::string fromEnvironment(const char* name, const char* built) {
  const char* value = std::getenv(name);
  return value && *value ? value : built;
}

// Everything the captured file depends on. A MODULE:EXPR spec is keyed by its text and
// the interpreter: an installed package changes only with the environment.
ProfileKey captureKey(const CaptureRequest& r) {
  ProfileKey key;
  key.add("spec", r.spec);
  const std::string source = r.spec.substr(0, r.spec.find(':'));
  if (source.size() > 3 && source.compare(source.size() - 3, 3, ".py") == 0) key.add("source", fileDigest(source));
  key.add("data file", fileDigest(r.data_file));
  key.add("output", r.output);
  key.add("python", capturePython());
  // Every part of the tool: the files beside it named pipetrain_capture*.py, in name order.
  std::vector<std::filesystem::path> parts;
  for (const auto& entry : std::filesystem::directory_iterator(std::filesystem::path(captureTool()).parent_path())) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("pipetrain_capture", 0) == 0 && entry.path().extension() == ".py") parts.push_back(entry.path());
  }
  std::sort(parts.begin(), parts.end());
  for (const auto& part : parts) key.add(part.filename().string(), fileDigest(part.string()));
  return key;
}

// Runs argv, its output going to this process's; the exit status, or -1 if it could not start.
int run(const std::vector<std::string>& argv) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  if (posix_spawnp(&pid, args[0], nullptr, nullptr, args.data(), environ) != 0) return -1;
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace

// An exclusive lock on `path` for as long as it lives: processes capturing the same model
// (torchrun's ranks of one host) take turns, so the first captures and the others find
// its file. The kernel drops a lock whose holder dies. Bounded: a holder that keeps it
// past `limit` is named rather than waited for without end.
class CaptureLock {
 public:
  CaptureLock(const std::string& path, std::chrono::seconds limit) : fd_(::open(path.c_str(), O_RDWR | O_CREAT, 0644)) {
    if (fd_ < 0) throw Error("cannot open the capture's lock " + path);
    const auto give_up = std::chrono::steady_clock::now() + limit;
    bool said = false;
    while (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      if (std::chrono::steady_clock::now() > give_up) {
        ::close(fd_);
        throw Error("another process has held " + path + " for over " + std::to_string(limit.count()) +
                    " s while capturing the same model; if none is, remove the file");
      }
      if (!said) std::fprintf(stderr, "model: another process is capturing it; waiting for its file\n");
      said = true;
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  }
  ~CaptureLock() { ::close(fd_); }  // closing releases the lock
  CaptureLock(const CaptureLock&) = delete;
  CaptureLock& operator=(const CaptureLock&) = delete;

 private:
  int fd_;
};

std::string capturePython() { return fromEnvironment("PIPETRAIN_PYTHON", PIPETRAIN_BUILT_PYTHON); }

std::string captureTool() { return fromEnvironment("PIPETRAIN_CAPTURE", PIPETRAIN_BUILT_CAPTURE_TOOL); }

std::string capturedModel(const CaptureRequest& r, const std::string& cache_dir) {
  if (r.spec.find(':') == std::string::npos)
    throw Error("--model-py " + r.spec + ": give FILE.py:EXPRESSION or MODULE:EXPRESSION");
  const std::string source = r.spec.substr(0, r.spec.find(':'));
  if (source.size() > 3 && source.compare(source.size() - 3, 3, ".py") == 0 && !std::filesystem::is_regular_file(source))
    throw Error("--model-py " + r.spec + ": " + source + ": no such file");
  if (!std::filesystem::is_regular_file(captureTool()))
    throw Error("--model-py needs the capture tool, " + captureTool() + ", which is not there (set PIPETRAIN_CAPTURE)");
  const ProfileKey key = captureKey(r);
  const std::filesystem::path dir = std::filesystem::path(cache_dir) / "models";
  const std::filesystem::path file = dir / (key.digest() + ".pt");
  if (std::filesystem::is_regular_file(file)) {
    std::fprintf(stderr, "model: %s, captured before (%s)\n", r.spec.c_str(), file.c_str());
    return file.string();
  }
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw Error("cannot create the model cache " + dir.string() + ": " + ec.message());
  const CaptureLock lock(file.string() + ".lock", std::chrono::hours(1));
  if (std::filesystem::is_regular_file(file)) {  // captured by the process we waited for
    std::fprintf(stderr, "model: %s, captured by another process (%s)\n", r.spec.c_str(), file.c_str());
    return file.string();
  }
  const std::string partial = file.string() + ".partial-" + std::to_string(::getpid());
  std::vector<std::string> argv = {capturePython(), captureTool(), "capture", r.spec, "--data-file", r.data_file,
                                   "--out", partial};
  if (!r.output.empty()) argv.insert(argv.end(), {"--output", r.output});
  std::fprintf(stderr, "model: capturing %s\n", r.spec.c_str());
  const int status = run(argv);
  if (status != 0) {
    std::filesystem::remove(partial, ec);
    throw Error("--model-py " + r.spec + ": the capture failed" +
                (status < 0 ? " to start (" + capturePython() + ")" : std::string(" (above: why)")));
  }
  std::filesystem::rename(partial, file, ec);  // atomic: a reader never sees half a file
  if (ec) throw Error("cannot keep the captured model in " + file.string() + ": " + ec.message());
  return file.string();
}

}  // namespace pipetrain::graph
