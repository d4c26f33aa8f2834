#include "pipetrain/job/launcher.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "pipetrain/cluster/cluster_spec.h"
#include "pipetrain/util/error.h"
#include "pipetrain/util/thread_priority.h"

namespace pipetrain::job {
namespace {

// A port nobody listens on right now, for the rendezvous store.
int freePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0)
    throw Error("cannot find a free local port for the rendezvous");
  const int port = ntohs(addr.sin_port);
  close(fd);
  return port;
}

struct Child {
  pid_t pid = -1;
  int out = -1;         // read end of the child's stdout
  std::string pending;  // partial line
  bool running = true;
  RankOutput output;
};

// Whether process `pid` is stopped (SIGSTOP, or a debugger): alive, but silent for good.
bool isStopped(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  // "pid (comm) S ...": the state follows the last ')' (comm may hold parentheses).
  const auto close = text.rfind(')');
  return close != std::string::npos && close + 2 < text.size() && (text[close + 2] == 'T' || text[close + 2] == 't');
}

void stopAll(std::vector<Child>& children) {
  // A stopped process cannot act on SIGTERM; SIGKILL ends it at once.
  for (auto& c : children)
    if (c.running) kill(c.pid, isStopped(c.pid) ? SIGKILL : SIGTERM);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  for (auto& c : children) {
    while (c.running) {
      int status = 0;
      if (waitpid(c.pid, &status, WNOHANG) == c.pid) {
        c.running = false;
      } else if (std::chrono::steady_clock::now() > deadline) {
        kill(c.pid, SIGKILL);
        waitpid(c.pid, &status, 0);
        c.running = false;
      } else {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    }
  }
}

// In a forked child: become `argv` (this program) with a rank's thread settings.
[[noreturn]] void execAsRank(const std::vector<std::string>& argv, int blas_threads) {
  // Ranks share the machine's cores: a rank's share goes to BLAS, and LibTorch's own
  // intra-op pool stays at one thread. Both at two threads nest (OpenMP around a
  // threaded BLAS) and ran an MLP far slower than one thread on this 2-core machine, where
  // BLAS alone at two threads ran it faster (bench/pipeline_throughput.sh; measured:
  // docs/runtime.md, "Ranks and launching").
  setenv("OMP_NUM_THREADS", "1", 1);
  setenv("OPENBLAS_NUM_THREADS", std::to_string(blas_threads).c_str(), 1);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  execv("/proc/self/exe", args.data());
  _exit(127);
}

// In a forked child: keeps this process (and the threads it will start) on the CPUs of
// slot `slot`, `width` CPUs wide, among those it may run on; leaves it unpinned where
// there are too few.
void pinToSlot(int slot, int width) {
  cpu_set_t allowed;
  if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) return;
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &allowed)) cpus.push_back(c);
  if (static_cast<int>(cpus.size()) < (slot + 1) * width) return;
  cpu_set_t mine;
  CPU_ZERO(&mine);
  for (int k = 0; k < width; ++k) CPU_SET(cpus[slot * width + k], &mine);
  sched_setaffinity(0, sizeof mine, &mine);
}

std::string describe(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return std::string("was killed by signal ") + strsignal(WTERMSIG(status));
  return "stopped";
}

}  // namespace

void runLikeRanks(const std::vector<std::vector<std::string>>& commands, int blas_threads,
                  std::chrono::milliseconds stopped_limit) {
  std::vector<pid_t> pids;
  for (const auto& argv : commands) {
    const pid_t pid = fork();
    if (pid < 0) throw Error("cannot start `" + argv[1] + "`");
    if (pid == 0) {
      // Their reports would interleave; errors still reach stderr.
      const int null = open("/dev/null", O_WRONLY);
      if (null >= 0) dup2(null, STDOUT_FILENO);
      execAsRank(argv, blas_threads);
    }
    pids.push_back(pid);
  }
  // Waits for all, but a process that fails, or stays stopped for `stopped_limit`, ends
  // them all: they work together (profiles time together, profiler::ProfileRendezvous)
  // and would wait for it.
  std::vector<bool> done(pids.size(), false);
  std::vector<std::chrono::steady_clock::time_point> stopped_since(pids.size());
  const auto endTheRest = [&] {
    for (std::size_t k = 0; k < pids.size(); ++k)
      if (!done[k]) {
        kill(pids[k], SIGKILL);
        waitpid(pids[k], nullptr, 0);
      }
  };
  std::size_t remaining = pids.size();
  while (remaining > 0) {
    for (std::size_t i = 0; i < pids.size(); ++i) {
      if (done[i]) continue;
      int status = 0;
      if (waitpid(pids[i], &status, WNOHANG) == pids[i]) {
        done[i] = true;
        --remaining;
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
          endTheRest();
          throw Error("`" + commands[i][1] + "` (process " + std::to_string(i) + ") " + describe(status) +
                      "; ended the others");
        }
        continue;
      }
      const auto now = std::chrono::steady_clock::now();
      if (!isStopped(pids[i])) {
        stopped_since[i] = {};
      } else if (stopped_since[i] == std::chrono::steady_clock::time_point{}) {
        stopped_since[i] = now;
      } else if (now - stopped_since[i] > stopped_limit) {
        endTheRest();
        throw Error("`" + commands[i][1] + "` (process " + std::to_string(i) + ") has been stopped for over " +
                    std::to_string(std::chrono::duration_cast<std::chrono::seconds>(stopped_limit).count()) +
                    " s; ended them all");
      }
    }
    if (remaining > 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

std::vector<RankOutput> launchLocal(const std::vector<std::string>& argv, int nproc, int blas_threads_per_rank,
                                    const std::function<void(int, const std::string&)>& on_line,
                                    int concurrent_ranks) {
  const int port = freePort();
  std::vector<Child> children(nproc);
  for (int r = 0; r < nproc; ++r) {
    int fds[2];
    if (pipe(fds) != 0) throw Error("cannot create a pipe for rank " + std::to_string(r));
    const pid_t pid = fork();
    if (pid < 0) throw Error("cannot start rank " + std::to_string(r));
    if (pid == 0) {
      dup2(fds[1], STDOUT_FILENO);
      close(fds[0]);
      close(fds[1]);
      setenv("MASTER_ADDR", "127.0.0.1", 1);
      setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
      setenv("RANK", std::to_string(r).c_str(), 1);
      setenv("LOCAL_RANK", std::to_string(r).c_str(), 1);
      setenv("WORLD_SIZE", std::to_string(nproc).c_str(), 1);
      setenv("PIPETRAIN_LAUNCHED", "1", 1);
      if (concurrent_ranks > 0 && nproc > concurrent_ranks) {
        pinToSlot(cluster::sharedCoreOf(r, concurrent_ranks), blas_threads_per_rank);
        setenv("PIPETRAIN_POLLING_NICE", std::to_string(util::kPollingThreadNice).c_str(), /*overwrite=*/0);
      }
      execAsRank(argv, blas_threads_per_rank);
    }
    close(fds[1]);
    children[r].pid = pid;
    children[r].out = fds[0];
    children[r].output.rank = r;
  }

  int running = nproc;
  while (running > 0) {
    std::vector<pollfd> fds;
    for (auto& c : children)
      if (c.out >= 0) fds.push_back({c.out, POLLIN, 0});
    if (!fds.empty()) poll(fds.data(), fds.size(), 200);
    else std::this_thread::sleep_for(std::chrono::milliseconds(50));
    for (int r = 0; r < nproc; ++r) {
      Child& c = children[r];
      if (c.out >= 0) {
        pollfd p{c.out, POLLIN, 0};
        while (poll(&p, 1, 0) > 0 && (p.revents & (POLLIN | POLLHUP))) {
          char buf[4096];
          const ssize_t n = read(c.out, buf, sizeof buf);
          if (n <= 0) {
            close(c.out);
            c.out = -1;
            break;
          }
          c.pending.append(buf, n);
          std::size_t nl;
          while ((nl = c.pending.find('\n')) != std::string::npos) {
            const std::string line = c.pending.substr(0, nl);
            c.pending.erase(0, nl + 1);
            if (line.rfind(kResultPrefix, 0) == 0) c.output.result_json = line.substr(std::strlen(kResultPrefix));
            else on_line(r, line);
          }
        }
      }
      if (!c.running) continue;
      int status = 0;
      if (waitpid(c.pid, &status, WNOHANG) != c.pid) continue;
      c.running = false;
      --running;
      if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
        // A rank that errored usually failed on a peer that was killed (its connection
        // closed): the kill is the cause to name. Its exit may be reaped a moment later.
        int cause = r, cause_status = status;
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(300);
        while (WIFEXITED(status) && cause == r && std::chrono::steady_clock::now() < deadline) {
          for (int k = 0; k < nproc; ++k) {
            int peer_status = 0;
            if (k == r || !children[k].running || waitpid(children[k].pid, &peer_status, WNOHANG) != children[k].pid)
              continue;
            children[k].running = false;
            --running;
            if (WIFSIGNALED(peer_status) && cause == r) cause = k, cause_status = peer_status;
          }
          if (cause == r) std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
        // A rank that timed out usually waited on one that stopped answering: name that one.
        std::string silent;
        for (int k = 0; k < nproc; ++k)
          if (children[k].running && isStopped(children[k].pid))
            silent += (silent.empty() ? "" : ", ") + std::to_string(k);
        stopAll(children);
        if (!silent.empty())
          throw Error("rank(s) " + silent + " stopped responding (the process is stopped, e.g. by SIGSTOP); rank " +
                      std::to_string(r) + " " + describe(status) + " waiting for it; ended the job");
        throw Error("rank " + std::to_string(cause) + " " + describe(cause_status) + "; stopped the other ranks");
      }
    }
  }
  std::vector<RankOutput> out;
  for (auto& c : children) {
    if (c.out >= 0) {  // drain what is left
      char buf[4096];
      ssize_t n;
      while ((n = read(c.out, buf, sizeof buf)) > 0) c.pending.append(buf, n);
      close(c.out);
      if (auto pos = c.pending.find(kResultPrefix); pos != std::string::npos) {
        const std::size_t from = pos + std::strlen(kResultPrefix);
        c.output.result_json = c.pending.substr(from, c.pending.find('\n', pos) - from);
      }
    }
    out.push_back(c.output);
  }
  return out;
}

std::vector<std::string> childCommand(const std::string& subcommand, const std::string& job_file, bool progress) {
  std::vector<std::string> argv{"pipetrain", subcommand, kJobOption, job_file};
  if (progress) argv.push_back(kProgressOption);
  return argv;
}

}  // namespace pipetrain::job
