// A job across hosts: where its ranks run, its network's cache key, and which rank of a
// plan each process runs, so that a stage runs on the host it was priced on.
#include "pipetrain/job/host_network.h"

#include <gtest/gtest.h>

#include "pipetrain/util/error.h"

namespace pipetrain::job {
namespace {

RankPlace place(const std::string& identity, int local_rank) {
  RankPlace p;
  p.identity = "machine/boot/netns " + identity;
  p.address = "10.99.0." + identity;
  p.local_rank = local_rank;
  p.threads = 1;
  p.device = "cpu";
  return p;
}

TEST(HostNetwork, HostsAreToldApartByIdentityNotName) {
  EXPECT_TRUE(oneHost({place("1", 0), place("1", 1)}));
  EXPECT_FALSE(oneHost({place("1", 0), place("2", 0)}));  // namespaces of one machine
}

// The measured cluster lists a host's devices together, in LOCAL_RANK order, so the job's
// ranks must come so (torchrun numbers them so; ranks started by hand may not).
TEST(HostNetwork, RanksMustBeNumberedHostByHost) {
  EXPECT_NO_THROW(checkNumberedHostByHost({place("a", 0), place("a", 1), place("b", 0), place("b", 1)}));
  EXPECT_THROW(checkNumberedHostByHost({place("a", 0), place("b", 0), place("a", 1)}), Error);
  EXPECT_THROW(checkNumberedHostByHost({place("a", 1), place("a", 0), place("b", 0)}), Error);
}

TEST(HostNetwork, APlaceRoundTripsThroughTheStore) {
  const RankPlace p = place("2", 1);
  const RankPlace q = RankPlace::fromJson(p.toJson(), "test");
  EXPECT_EQ(q.identity, "machine/boot/netns 2");
  EXPECT_EQ(q.address, "10.99.0.2");
  EXPECT_EQ(q.local_rank, 1);
  EXPECT_THROW(RankPlace::fromJson(json_io::Json{{"identity", "a"}}, "rank 1's place"), Error);
}

TEST(HostNetwork, TheKeyChangesWithAnyRanksPlace) {
  const std::vector<RankPlace> two = {place("1", 0), place("2", 0)};
  EXPECT_EQ(networkKey(two, "auto").digest(), networkKey(two, "auto").digest());
  EXPECT_NE(networkKey(two, "auto").digest(), networkKey(two, "gloo").digest());
  EXPECT_NE(networkKey(two, "auto").digest(), networkKey({place("1", 0), place("3", 0)}, "auto").digest());
}

// Three hosts of one rank: the plan puts its first stage on the third host's device and
// its second on the first's, so job rank 2 runs the plan's rank 0.
TEST(HostNetwork, EachProcessRunsThePlanRankOfItsDevice) {
  std::vector<cluster::Device> devices;
  for (const char* name : {"h0-0", "h1-0", "h2-0"}) devices.push_back({name, "cpu", 1.0, int64_t{1} << 30});
  const cluster::ClusterSpec hosts(devices, {{"network", 3, 1e8, 1e-4}}, {});
  plan::Plan plan;
  plan.stages = {{{"a"}, {"h2-0"}}, {{"b"}, {"h0-0"}}, {{"c"}, {"h1-0"}}};
  EXPECT_EQ(planRanksOfJobRanks(plan, hosts), (std::vector<int>{1, 2, 0}));
  plan.stages[2].devices = {"elsewhere-0"};
  EXPECT_THROW(planRanksOfJobRanks(plan, hosts), Error);
}

}  // namespace
}  // namespace pipetrain::job
