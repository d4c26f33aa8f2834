// The heap policy keeps freed memory: a large block freed and allocated again costs no
// new page faults (under glibc's defaults it is unmapped and mapped afresh each time).
// ctest runs these tests twice: on glibc, and on tcmalloc preloaded as `pipetrain`
// preloads it (Allocator.* in allocator_on_tcmalloc, where the machine has the library).
#include "pipetrain/util/allocator.h"
#include "pipetrain/util/process_memory.h"

#include <gtest/gtest.h>
#include <sys/resource.h>

#include <cstdlib>
#include <cstring>
#include <string>

namespace pipetrain::util {
namespace {

long minorFaults() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_minflt;
}

// Allocates and touches every page of `bytes`, then frees it.
void touchAndFree(std::size_t bytes) {
  auto* block = static_cast<char*>(std::malloc(bytes));
  ASSERT_NE(block, nullptr);
  std::memset(block, 1, bytes);
  // The compiler may not drop the allocation and the writes as unobserved.
  asm volatile("" : : "r"(block) : "memory");
  std::free(block);
}

bool onTcmalloc() { return heapName() == "tcmalloc"; }

TEST(Allocator, FreedLargeBlocksAreReusedWithoutPageFaults) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "AddressSanitizer's allocator replaces glibc's malloc and ignores mallopt";
#elif !defined(__GLIBC__)
  GTEST_SKIP() << "the policy applies to glibc's malloc only";
#else
  ASSERT_TRUE(applyHeapPolicyOfEnvironment());
  EXPECT_TRUE(onTcmalloc() || heapName() == "glibc, freed memory retained") << heapName();
  // Above glibc's largest dynamic mmap threshold (32 MiB), so without the policy every
  // allocation of it would be a fresh mapping: 12,288 pages faulted in each time.
  constexpr std::size_t kBytes = std::size_t{48} << 20;
  touchAndFree(kBytes);  // the heap grows to hold it once
  const long before = minorFaults();
  touchAndFree(kBytes);
  EXPECT_LT(minorFaults() - before, 64);
#endif
}

// PIPETRAIN_MALLOC=glibc leaves glibc's defaults, so that a race runs every process on
// one allocator setting; unset, or "retain", applies the policy.
TEST(Allocator, TheEnvironmentCanLeaveGlibcsDefaults) {
#if defined(__SANITIZE_ADDRESS__) || !defined(__GLIBC__)
  GTEST_SKIP() << "the policy applies to glibc's malloc only";
#else
  if (onTcmalloc()) GTEST_SKIP() << "tcmalloc serves malloc: the choice was made before the process started";
  const char* before = std::getenv("PIPETRAIN_MALLOC");
  const std::string saved = before ? before : "";
  setenv("PIPETRAIN_MALLOC", "glibc", 1);
  EXPECT_FALSE(applyHeapPolicyOfEnvironment());
  setenv("PIPETRAIN_MALLOC", "retain", 1);
  EXPECT_TRUE(applyHeapPolicyOfEnvironment());
  unsetenv("PIPETRAIN_MALLOC");
  EXPECT_TRUE(applyHeapPolicyOfEnvironment());
  if (before) setenv("PIPETRAIN_MALLOC", saved.c_str(), 1);
#endif
}

// `pipetrain` preloads tcmalloc for pipetrain-torch unless PIPETRAIN_MALLOC chooses glibc,
// keeps what the user preloads and the settings they made, and preloads nothing where
// the machine has no tcmalloc.
bool nothingSet(const std::string&) { return false; }
bool releaseRateSet(const std::string& name) { return name == "TCMALLOC_RELEASE_RATE"; }

TEST(Allocator, TcmallocIsPreloadedUnlessGlibcIsChosenOrItIsMissing) {
  const std::string lib = "/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4";
  const auto plain = tcmallocPreload(nullptr, nullptr, nothingSet, lib);
  ASSERT_TRUE(plain);
  EXPECT_EQ(plain->ld_preload, lib);
  EXPECT_EQ(plain->settings, kTcmallocSettings);
  const auto chosen = tcmallocPreload("tcmalloc", "libmine.so", releaseRateSet, lib);
  ASSERT_TRUE(chosen);
  EXPECT_EQ(chosen->ld_preload, lib + ":libmine.so");
  ASSERT_EQ(chosen->settings.size(), kTcmallocSettings.size() - 1);
  EXPECT_NE(chosen->settings[0].first, "TCMALLOC_RELEASE_RATE") << "the user's setting stays";
  EXPECT_FALSE(tcmallocPreload("glibc", nullptr, nothingSet, lib));
  EXPECT_FALSE(tcmallocPreload("retain", nullptr, nothingSet, lib));
  EXPECT_FALSE(tcmallocPreload(nullptr, nullptr, nothingSet, ""));
  EXPECT_FALSE(tcmallocPreload(nullptr, "/opt/lib/libtcmalloc.so", nothingSet, lib)) << "already preloaded";
}

// The heap's freed and kept bytes follow a block that is freed: under tcmalloc its
// mapped pages beyond what it handed out, under glibc its free chunks.
TEST(Allocator, HeapFreeGrowsByABlockFreedAndKept) {
#if defined(__SANITIZE_ADDRESS__) || !defined(__GLIBC__)
  GTEST_SKIP() << "glibc's or tcmalloc's figures only";
#else
  ASSERT_TRUE(applyHeapPolicyOfEnvironment());
  constexpr std::size_t kBytes = std::size_t{24} << 20;
  auto* block = static_cast<char*>(std::malloc(kBytes));
  ASSERT_NE(block, nullptr);
  std::memset(block, 1, kBytes);
  asm volatile("" : : "r"(block) : "memory");
  const int64_t before = heapFreeBytes();
  std::free(block);
  EXPECT_GE(heapFreeBytes() - before, static_cast<int64_t>(kBytes) - (1 << 20)) << heapName();
#endif
}

// What the profile prices a kernel's kept workspace with: a block allocated and kept is
// counted whole, and no longer once freed, whether it came from an arena or a mapping.
TEST(Allocator, HeapInUseCountsWhatIsHandedOutAndNotGivenBack) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "AddressSanitizer's allocator replaces glibc's malloc";
#elif !defined(__GLIBC__)
  EXPECT_EQ(heapInUseBytes(), -1);
#else
  for (const std::size_t bytes : {std::size_t{64} << 10, std::size_t{8} << 20, std::size_t{40} << 20}) {
    const int64_t before = heapInUseBytes();
    void* block = std::malloc(bytes);
    ASSERT_NE(block, nullptr);
    asm volatile("" : : "r"(block) : "memory");
    const int64_t holding = heapInUseBytes();
    std::free(block);
    EXPECT_GE(holding - before, static_cast<int64_t>(bytes)) << bytes;
    EXPECT_LT(holding - before, static_cast<int64_t>(bytes) + (64 << 10)) << bytes;
    EXPECT_LT(heapInUseBytes() - before, 64 << 10) << bytes;
  }
#endif
}

}  // namespace
}  // namespace pipetrain::util
