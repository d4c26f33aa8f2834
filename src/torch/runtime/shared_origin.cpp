#include <limits>

#include "pipetrain/torch/transport.h"

namespace pipetrain::runtime {
namespace {

using Clock = std::chrono::steady_clock;

constexpr uint32_t kPingTag = kRuntimeTags;
constexpr int kRounds = 8;

int64_t nowNanoseconds() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}

torch::Tensor stamp(int64_t value) { return torch::full({1}, value, torch::kLong); }

}  // namespace

Clock::time_point sharedOrigin(Coordinator& t) {
  t.barrier();
  torch::Tensor buffer = torch::zeros({1}, torch::kLong);
  if (t.rank() == 0) {
    const int64_t origin = nowNanoseconds();
    for (int r = 1; r < t.worldSize(); ++r) {
      for (int k = 0; k < kRounds; ++k) {
        t.recv(buffer, r, kPingTag + k)->wait();
        const torch::Tensor reply = stamp(nowNanoseconds());
        t.send(reply, r, kPingTag + kRounds + k)->wait();
      }
      const torch::Tensor start = stamp(origin);
      t.send(start, r, kPingTag + 2 * kRounds)->wait();
    }
    return Clock::time_point(std::chrono::nanoseconds(origin));
  }
  int64_t best_round_trip = std::numeric_limits<int64_t>::max(), offset = 0;
  for (int k = 0; k < kRounds; ++k) {
    const int64_t sent = nowNanoseconds();
    const torch::Tensor ping = stamp(sent);
    t.send(ping, 0, kPingTag + k)->wait();
    t.recv(buffer, 0, kPingTag + kRounds + k)->wait();
    const int64_t received = nowNanoseconds();
    if (received - sent < best_round_trip) {
      best_round_trip = received - sent;
      // Rank 0 read its clock halfway through the round trip, on the shortest one most nearly.
      offset = sent + (received - sent) / 2 - buffer.item<int64_t>();
    }
  }
  t.recv(buffer, 0, kPingTag + 2 * kRounds)->wait();
  return Clock::time_point(std::chrono::nanoseconds(buffer.item<int64_t>() + offset));
}

}  // namespace pipetrain::runtime
