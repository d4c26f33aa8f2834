#include "pipetrain/graph/captured_model.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

namespace pipetrain::graph {
namespace {

// torchrun starts every rank of a host at once, and each asks for the model: one captures,
// the others wait on the entry's lock and read its file. A stand-in tool (a shell script
// that takes half a second and counts its runs) makes this fast and free of torch.
TEST(CapturedModel, RanksAskingAtOnceCaptureOnce) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                    ("pipetrain-capture-test-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir / "tool");
  const std::string runs = (dir / "runs.txt").string();
  {
    std::ofstream tool(dir / "tool" / "pipetrain_capture.py");  // run by /bin/sh, named as the tool is
    tool << "while [ \"$1\" != --out ]; do shift; done\n"
         << "echo run >>" << runs << "\nsleep 0.5\necho captured >\"$2\"\n";
    std::ofstream(dir / "data.pt") << "data";
  }
  ::setenv("PIPETRAIN_PYTHON", "/bin/sh", 1);
  ::setenv("PIPETRAIN_CAPTURE", (dir / "tool" / "pipetrain_capture.py").c_str(), 1);
  const CaptureRequest request{"some.module:Model()", (dir / "data.pt").string(), ""};
  std::vector<std::string> files(4);
  std::vector<std::thread> ranks;
  for (std::size_t r = 0; r < files.size(); ++r)
    ranks.emplace_back([&, r] { files[r] = capturedModel(request, (dir / "cache").string()); });
  for (auto& t : ranks) t.join();
  ::unsetenv("PIPETRAIN_PYTHON");
  ::unsetenv("PIPETRAIN_CAPTURE");
  std::ifstream counted(runs);
  int captures = 0;
  for (std::string line; std::getline(counted, line);) ++captures;
  EXPECT_EQ(captures, 1);
  for (const std::string& f : files) EXPECT_EQ(f, files[0]);
  std::ifstream captured(files[0]);
  std::string text;
  captured >> text;
  EXPECT_EQ(text, "captured");
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace pipetrain::graph
