// ActionTimer: when the executor's actions ran. On the CPU an action's work is done when
// its call returns, so the clocks around the call time it (wall, and the thread's time
// on a core). A GPU runs the work after the host has queued it: there the times come
// from events recorded on the device's stream around each action, read once at the end
// of the run, and the action's busy time is its time on the device.
#pragma once

#include <chrono>
#include <vector>

#include <torch/torch.h>

#include "pipetrain/schedule/action.h"
#include "pipetrain/trace/timeline.h"

namespace pipetrain::runtime {

class ActionTimer {
 public:
  using Clock = std::chrono::steady_clock;
  ActionTimer(const torch::Device& device, Clock::time_point origin);
  ~ActionTimer();

  void start();                              // before an action
  void stop(const schedule::Action& action);  // after it

  // The actions timed (seconds since the origin), and per action its busy time: on a
  // core (CPU) or on the device (GPU). Waits for the device's queued work.
  void finish(std::vector<trace::TimedAction>& actions, std::vector<double>& busy_seconds);

 private:
  struct DeviceEvents;
  Clock::time_point origin_;
  Clock::time_point wall_start_;
  double cpu_start_ = 0;
  std::vector<trace::TimedAction> actions_;
  std::vector<double> busy_;
  std::unique_ptr<DeviceEvents> events_;  // null on the CPU
};

}  // namespace pipetrain::runtime
