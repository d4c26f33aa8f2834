// This process's memory as the kernel counts it: what a user sees in `top`, and what the
// planner's memory prediction is checked against on the CPU.
#pragma once

#include <cstdint>

namespace pipetrain::util {

// The resident set now (/proc/self/statm); 0 where the kernel does not say.
int64_t residentBytes();
// The largest resident set the process has had (getrusage's ru_maxrss).
int64_t peakResidentBytes();
// The part of the resident set now that is pages of files (/proc/self/status's RssFile):
// mostly the code of the libraries, paged in as their functions are first called; 0
// where the kernel does not say.
int64_t residentFileBytes();
// The part that is anonymous memory (RssAnon): the heap's touched pages, the stacks.
int64_t residentAnonBytes();
// Bytes the C allocator holds freed and keeps for reuse, over all its arenas: tcmalloc's
// mapped pages beyond what it handed out, or glibc's free chunks (mallinfo2: with
// util::retainFreedMemory, the most the heap ever held less what it holds now, and what
// gaps between blocks still in use keep apart); -1 under another allocator.
int64_t heapFreeBytes();
// Bytes the C allocator has handed out and not had back, over all its arenas: the
// process's heap in use, tensors and everything else; -1 under another allocator.
int64_t heapInUseBytes();

}  // namespace pipetrain::util
