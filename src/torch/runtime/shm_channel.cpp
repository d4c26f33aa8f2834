// Gradient sums in shared memory between the ranks of one host (NOTE(shm-sums) in
// transport.h). Each replica group maps one segment: two sets of a slot per member, used
// alternately chunk after chunk. A chunk is summed in two barriers: every member copies
// its chunk into its slot; after the first barrier each sums its own 1/n of the chunk
// over the slots, into its slot; after the second each copies every member's summed part
// out. The next chunk fills the other set, and the one after it this set again only past
// the next chunk's second barrier, which every member reaches after its copies out: so
// two barriers a chunk suffice. Each part is summed once, so every member ends with the
// same bits.
#include <fcntl.h>
#include <linux/futex.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <thread>

#include "pipetrain/torch/transport.h"
#include "pipetrain/util/error.h"

namespace pipetrain::runtime {
namespace {

constexpr uint64_t kMagic = 0x70697065736d3031;  // "pipesm01"
constexpr int kMaxMembers = 128;
// A slot's bytes: 512 KiB keeps a chunk's slots of two ranks in the caches of these
// machines while a chunk's two barriers cost little beside its copies.
constexpr int64_t kSlotBytes = 512 * 1024;
// Spins before sleeping on the futex, a few microseconds: long enough for a peer that
// is arriving on another core, short enough not to take its core from a backward pass
// that a bucket's sum overlaps (a rank has one core here, shared by both threads).
constexpr int kSpins = 100;
constexpr auto kPoll = std::chrono::milliseconds(20);  // how often a sleeper checks its peers are alive

struct Header {
  std::atomic<uint64_t> magic;        // stored last by the creator
  std::atomic<uint32_t> attached;     // members that mapped the segment
  std::atomic<uint32_t> gave_up;      // 1 + the index of the first member that stopped summing, else 0
  std::atomic<uint32_t> epoch;        // the futex word: bumped at every arrival
  std::atomic<int32_t> pid[kMaxMembers];
  std::atomic<uint64_t> arrived[kMaxMembers];  // how many barriers each member reached
};

constexpr int64_t kDataOffset = (sizeof(Header) + 4095) / 4096 * 4096;

int64_t segmentBytes(int members) { return kDataOffset + 2 * static_cast<int64_t>(members) * kSlotBytes; }

void futexWait(std::atomic<uint32_t>& word, uint32_t expected, std::chrono::milliseconds timeout) {
  timespec ts{static_cast<time_t>(timeout.count() / 1000), static_cast<long>(timeout.count() % 1000) * 1000000L};
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

void futexWakeAll(std::atomic<uint32_t>& word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

bool processGone(int32_t pid) { return pid > 0 && ::kill(pid, 0) != 0 && errno == ESRCH; }

struct OpState {
  std::mutex mutex;
  std::condition_variable done_cv;
  bool done = false;
  std::exception_ptr error;
};

class ShmOp : public PendingOp {
 public:
  ShmOp(std::shared_ptr<OpState> state, std::chrono::milliseconds timeout, std::string what)
      : state_(std::move(state)), timeout_(timeout), what_(std::move(what)) {}
  void wait() override {
    std::unique_lock<std::mutex> lock(state_->mutex);
    // The sum's own waits are bounded by the timeout; twice it means the worker is stuck.
    if (!state_->done_cv.wait_for(lock, 2 * timeout_, [&] { return state_->done; }))
      throw Error(what_ + ": not done within " + std::to_string(2 * timeout_.count() / 1000) + " s");
    if (state_->error) std::rethrow_exception(state_->error);
  }

 private:
  std::shared_ptr<OpState> state_;
  std::chrono::milliseconds timeout_;
  std::string what_;
};

// One replica group's segment and the thread that sums on it, in the order sums start.
class ShmGroup {
 public:
  ShmGroup(const std::string& name, std::vector<int> group, int rank, std::chrono::milliseconds timeout)
      : name_(name), group_(std::move(group)), rank_(rank), timeout_(timeout) {
    const GroupSlot slot = groupSlot("shm", group_, rank);
    me_ = slot.index;
    n_ = static_cast<int>(group_.size());
    if (n_ > kMaxMembers)
      throw Error(what() + ": " + std::to_string(n_) + " ranks, more than the " + std::to_string(kMaxMembers) +
                  " a shared-memory group holds (use --wire gloo)");
    attach();
    worker_ = std::thread([this] { run(); });
  }

  ~ShmGroup() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    queued_.notify_all();
    worker_.join();
    // A peer still waiting in a barrier for this member (it left in an error) learns it
    // now; after a clean end no peer waits, and none looks again.
    giveUp();
    if (created_) shm_unlink(name_.c_str());  // the last member to attach unlinked it already, normally
    munmap(base_, static_cast<size_t>(segmentBytes(n_)));
  }

  std::unique_ptr<PendingOp> start(torch::Tensor flat) {
    if (!flat.device().is_cpu() || !flat.is_contiguous())
      throw Error(what() + ": shared memory sums contiguous CPU tensors only");
    auto state = std::make_shared<OpState>();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      jobs_.push_back({std::move(flat), state});
    }
    queued_.notify_one();
    return std::make_unique<ShmOp>(state, timeout_, what());
  }

 private:
  struct Job {
    torch::Tensor flat;
    std::shared_ptr<OpState> state;
  };

  std::string what() const {
    std::string peers;
    for (int r : group_)
      if (r != rank_) peers += (peers.empty() ? "" : ", ") + std::to_string(r);
    return "rank " + std::to_string(rank_) + ": all-reduce with rank(s) " + peers + " in shared memory";
  }

  // The group's first rank creates the segment; the others open it once it is complete.
  void attach() {
    const int64_t bytes = segmentBytes(n_);
    const auto deadline = std::chrono::steady_clock::now() + timeout_;
    int fd = -1;
    if (me_ == 0) {
      fd = shm_open(name_.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
      if (fd < 0 || ftruncate(fd, bytes) != 0) {
        const int error = errno;
        if (fd >= 0) shm_unlink(name_.c_str());
        throw Error(what() + ": cannot create " + name_ + " (" + std::strerror(error) + ")");
      }
      created_ = true;
    } else {
      struct stat st{};
      while ((fd = shm_open(name_.c_str(), O_RDWR, 0600)) < 0 || fstat(fd, &st) != 0 || st.st_size < bytes) {
        if (fd >= 0) close(fd);
        if (std::chrono::steady_clock::now() > deadline)
          throw Error(what() + ": rank " + std::to_string(group_[0]) + " did not create " + name_ + " within " +
                      std::to_string(timeout_.count() / 1000) + " s (are all ranks on one host?)");
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    }
    void* mapped = mmap(nullptr, static_cast<size_t>(bytes), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    const int error = errno;
    close(fd);
    if (mapped == MAP_FAILED) throw Error(what() + ": cannot map " + name_ + " (" + std::strerror(error) + ")");
    base_ = static_cast<char*>(mapped);
    header_ = reinterpret_cast<Header*>(base_);  // ftruncate zeroed it: every atomic starts at 0
    if (me_ == 0) {
      header_->magic.store(kMagic, std::memory_order_release);
    } else {
      while (header_->magic.load(std::memory_order_acquire) != kMagic) {
        if (std::chrono::steady_clock::now() > deadline)
          throw Error(what() + ": " + name_ + " was never initialised by rank " + std::to_string(group_[0]));
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    }
    header_->pid[me_].store(static_cast<int32_t>(::getpid()), std::memory_order_release);
    // The last to map it removes its name: the segment lives on while mapped, and a job
    // that dies leaves nothing behind in /dev/shm.
    if (header_->attached.fetch_add(1) + 1 == static_cast<uint32_t>(n_)) shm_unlink(name_.c_str());
  }

  void run() {
    for (;;) {
      Job job;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        queued_.wait(lock, [&] { return stopping_ || !jobs_.empty(); });
        if (jobs_.empty()) return;
        job = std::move(jobs_.front());
        jobs_.pop_front();
      }
      std::exception_ptr error;
      try {
        if (failed_) std::rethrow_exception(failed_);
        sum(job.flat);
      } catch (...) {
        error = failed_ = std::current_exception();
        giveUp();
      }
      std::lock_guard<std::mutex> lock(job.state->mutex);
      job.state->error = error;
      job.state->done = true;
      job.state->done_cv.notify_all();
    }
  }

  // Peers waiting for this member in a barrier learn at once that it will not come,
  // instead of at their timeout.
  void giveUp() {
    uint32_t none = 0;
    header_->gave_up.compare_exchange_strong(none, static_cast<uint32_t>(me_ + 1));
    header_->epoch.fetch_add(1);
    futexWakeAll(header_->epoch);
  }

  char* slot(int set, int member) const {
    return base_ + kDataOffset + (static_cast<int64_t>(set) * n_ + member) * kSlotBytes;
  }

  void sum(const torch::Tensor& flat) {
    const int64_t size = flat.element_size();
    const int64_t per_chunk = kSlotBytes / size;
    char* data = static_cast<char*>(flat.data_ptr());
    const auto part = [&](int64_t m, int k) { return m * k / n_; };  // member k's part of a chunk of m: [part(k), part(k + 1))
    for (int64_t begin = 0; begin < flat.numel(); begin += per_chunk) {
      const int64_t m = std::min(per_chunk, flat.numel() - begin);
      const int set = static_cast<int>(chunks_++ % 2);
      std::memcpy(slot(set, me_), data + begin * size, static_cast<size_t>(m * size));
      barrier();
      const int64_t lo = part(m, me_), count = part(m, me_ + 1) - lo;
      if (count > 0) {
        const auto view = [&](int k) {
          return torch::from_blob(slot(set, k) + lo * size, {count}, flat.options());
        };
        torch::Tensor mine = view(me_);
        for (int k = 0; k < n_; ++k)
          if (k != me_) mine.add_(view(k));
      }
      barrier();
      for (int k = 0; k < n_; ++k) {
        const int64_t from = part(m, k), to = part(m, k + 1);
        std::memcpy(data + (begin + from) * size, slot(set, k) + from * size, static_cast<size_t>((to - from) * size));
      }
    }
  }

  // Waits until every member has reached as many barriers as this one; bounded by the
  // timeout, and named after the first member missing, or one that exited or gave up.
  void barrier() {
    const uint64_t target = ++barriers_;
    header_->arrived[me_].store(target, std::memory_order_release);
    header_->epoch.fetch_add(1, std::memory_order_acq_rel);
    futexWakeAll(header_->epoch);
    const auto deadline = std::chrono::steady_clock::now() + timeout_;
    for (int spins = 0;; ++spins) {
      const uint32_t epoch = header_->epoch.load(std::memory_order_acquire);
      int missing = -1;
      for (int k = 0; k < n_ && missing < 0; ++k)
        if (header_->arrived[k].load(std::memory_order_acquire) < target) missing = k;
      if (missing < 0) return;
      if (const uint32_t gave_up = header_->gave_up.load(); gave_up != 0)
        throw Error(what() + ": rank " + std::to_string(group_[gave_up - 1]) +
                    " stopped summing (its sum failed, or it closed its channel)");
      if (spins < kSpins) {
#if defined(__x86_64__)
        __builtin_ia32_pause();
#endif
        continue;
      }
      {
        std::lock_guard<std::mutex> lock(mutex_);
        if (stopping_) throw Error(what() + ": the channel closed during a sum");
      }
      if (processGone(header_->pid[missing].load()))
        throw Error(what() + ": rank " + std::to_string(group_[missing]) + " (pid " +
                    std::to_string(header_->pid[missing].load()) + ") exited");
      if (std::chrono::steady_clock::now() > deadline)
        throw Error(what() + ": rank " + std::to_string(group_[missing]) + " did not arrive within " +
                    std::to_string(timeout_.count() / 1000) + " s");
      futexWait(header_->epoch, epoch, kPoll);
    }
  }

  std::string name_;
  std::vector<int> group_;
  int rank_ = 0, me_ = 0, n_ = 0;
  std::chrono::milliseconds timeout_;
  char* base_ = nullptr;
  Header* header_ = nullptr;
  bool created_ = false;
  uint64_t barriers_ = 0, chunks_ = 0;  // the same on every member: they sum the same chunks
  std::exception_ptr failed_;           // after a failed sum the segment's state is unknown: every later one fails
  std::mutex mutex_;
  std::condition_variable queued_;
  std::deque<Job> jobs_;
  bool stopping_ = false;
  std::thread worker_;  // last: it runs on everything above
};

class ShmChannel : public DataChannel {
 public:
  ShmChannel(DataChannel& messages, std::string prefix, std::chrono::milliseconds timeout)
      : messages_(messages), prefix_(std::move(prefix)), timeout_(timeout) {}

  int rank() const override { return messages_.rank(); }
  int worldSize() const override { return messages_.worldSize(); }
  std::string name() const override { return messages_.name() + "+shm"; }
  bool sumsInSharedMemory() const override { return true; }

  std::unique_ptr<PendingOp> send(const torch::Tensor& tensor, int to, uint32_t tag) override {
    return messages_.send(tensor, to, tag);
  }
  std::unique_ptr<PendingOp> recv(torch::Tensor buffer, int from, uint32_t tag) override {
    return messages_.recv(std::move(buffer), from, tag);
  }
  std::unique_ptr<PendingOp> startAllReduceSum(torch::Tensor flat, const std::vector<int>& group) override {
    return groupOf(group).start(std::move(flat));
  }
  void prepareGroup(const std::vector<int>& group) override { groupOf(group); }
  void preparePeers(const std::vector<int>& peers) override { messages_.preparePeers(peers); }

 private:
  ShmGroup& groupOf(const std::vector<int>& group) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto& g = groups_[group];
    if (!g) {
      // A name per group ("-g-0-1"), hashed where the group is too large for NAME_MAX.
      std::string slot = groupSlot("g", group, rank()).name;
      if (slot.size() > 160) slot = "h" + std::to_string(std::hash<std::string>{}(slot));
      g = std::make_unique<ShmGroup>(prefix_ + "-" + slot, group, rank(), timeout_);
    }
    return *g;
  }

  DataChannel& messages_;
  std::string prefix_;
  std::chrono::milliseconds timeout_;
  std::mutex mutex_;
  std::map<std::vector<int>, std::unique_ptr<ShmGroup>> groups_;
};

}  // namespace

std::unique_ptr<DataChannel> makeShmChannel(DataChannel& messages, const std::string& job_token,
                                            std::chrono::milliseconds timeout) {
  return std::make_unique<ShmChannel>(messages, "/pipetrain-" + job_token, timeout);
}

}  // namespace pipetrain::runtime
