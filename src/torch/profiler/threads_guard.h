// This process's compute threads, set for a while and given back: what the profiler's
// thread measurements (threads.cpp) and its pricing (profile_cost.cpp) both need.
#pragma once

#include <dlfcn.h>

#include <ATen/Parallel.h>

#include "pipetrain/torch/profiler.h"

namespace pipetrain::profiler {

// OpenBLAS reads OPENBLAS_NUM_THREADS when it loads, before main(); its setter reaches it
// afterwards, when OpenBLAS is the BLAS LibTorch loaded (Debian's libopenblas0-pthread);
// nullptr otherwise.
using SetBlasThreads = void (*)(int);
inline SetBlasThreads blasSetter() {
  return reinterpret_cast<SetBlasThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"));
}

// This process's threads as they are now (LibTorch's pool and BLAS's), given back when it
// ends (exceptions included).
class ThreadsGuard {
 public:
  ThreadsGuard() : pool_(at::get_num_threads()), blas_(blasThreads()) {}
  ~ThreadsGuard() {
    if (SetBlasThreads set = blasSetter(); set && blas_ > 0) set(blas_);
    at::set_num_threads(pool_);
  }
  ThreadsGuard(const ThreadsGuard&) = delete;
  ThreadsGuard& operator=(const ThreadsGuard&) = delete;

 private:
  int pool_, blas_;
};

}  // namespace pipetrain::profiler
