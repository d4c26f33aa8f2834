#include "action_timer.h"

#include <c10/core/Event.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include "pipetrain/util/core_time.h"

namespace pipetrain::runtime {

struct ActionTimer::DeviceEvents {
  explicit DeviceEvents(const torch::Device& device)
      : stream(c10::impl::VirtualGuardImpl(device.type()).getStream(device)) {}
  c10::Stream stream;
  bool anchored = false;
  Clock::time_point anchor_host;
  std::unique_ptr<c10::Event> anchor;
  std::vector<std::pair<c10::Event, c10::Event>> spans;  // per action: start, stop

  c10::Event recorded() {
    c10::Event event(stream.device_type(), c10::EventFlag::BACKEND_DEFAULT);  // timing enabled
    event.record(stream);
    return event;
  }
};

ActionTimer::ActionTimer(const torch::Device& device, Clock::time_point origin) : origin_(origin) {
  if (!device.is_cpu()) events_ = std::make_unique<DeviceEvents>(device);
}

ActionTimer::~ActionTimer() = default;

void ActionTimer::start() {
  if (!events_) {
    wall_start_ = Clock::now();
    cpu_start_ = util::threadCpuSeconds();
    return;
  }
  DeviceEvents& e = *events_;
  if (!e.anchored) {
    // One moment both clocks know: the stream drained, the host's now and an event
    // recorded at once (the idle device runs it without delay).
    e.stream.synchronize();
    e.anchor_host = Clock::now();
    e.anchor = std::make_unique<c10::Event>(e.recorded());
    e.anchored = true;
  }
  e.spans.emplace_back(e.recorded(), c10::Event(e.stream.device_type()));
}

void ActionTimer::stop(const schedule::Action& action) {
  auto seconds = [this](Clock::time_point t) { return std::chrono::duration<double>(t - origin_).count(); };
  if (!events_) {
    actions_.push_back({action, seconds(wall_start_), seconds(Clock::now())});
    busy_.push_back(util::threadCpuSeconds() - cpu_start_);
    return;
  }
  events_->spans.back().second = events_->recorded();
  actions_.push_back({action, 0, 0});  // times from the events, in finish()
}

void ActionTimer::finish(std::vector<trace::TimedAction>& actions, std::vector<double>& busy_seconds) {
  if (events_ && !events_->spans.empty()) {
    DeviceEvents& e = *events_;
    e.spans.back().second.synchronize();
    const double anchor = std::chrono::duration<double>(e.anchor_host - origin_).count();
    for (std::size_t i = 0; i < e.spans.size(); ++i) {
      const double start = e.anchor->elapsedTime(e.spans[i].first) / 1e3;
      const double stop = e.anchor->elapsedTime(e.spans[i].second) / 1e3;
      actions_[i].start = anchor + start;
      actions_[i].end = anchor + stop;
      busy_.push_back(stop - start);
    }
    e.spans.clear();
    e.anchored = false;
  }
  actions = std::move(actions_);
  busy_seconds = std::move(busy_);
  actions_.clear();
  busy_.clear();
}

}  // namespace pipetrain::runtime
