// The epoch's sample order. Every rank computes it alone, so it must be bit-identical
// across processes, compilers and standard libraries: std::mt19937_64's output is fixed
// by the standard, but std::shuffle and std::uniform_int_distribution are not, so the
// shuffle and the bounded draw are written out here.
#include <algorithm>
#include <numeric>
#include <random>

#include "pipetrain/util/error.h"
#include "readers.h"

namespace pipetrain::data {
namespace {

// Uniform in [0, bound) without modulo bias: reject the lowest (2^64 mod bound) values
// so that the accepted range is a whole number of copies of [0, bound).
uint64_t uniformBelow(std::mt19937_64& rng, uint64_t bound) {
  const uint64_t threshold = (0 - bound) % bound;  // == 2^64 mod bound
  for (;;) {
    const uint64_t r = rng();
    if (r >= threshold) return r % bound;
  }
}

void checkShape(int64_t microbatch_size, int microbatches) {
  if (microbatch_size < 1 || microbatches < 1) {
    throw Error("sample order: micro-batch size and micro-batches per mini-batch must be positive, got " +
                std::to_string(microbatch_size) + " and " + std::to_string(microbatches));
  }
}

}  // namespace

SampleOrder::SampleOrder(int64_t dataset_size, uint64_t seed, int64_t epoch, Kind kind,
                         std::vector<int64_t> shard_sizes)
    : kind_(kind), size_(dataset_size), shard_sizes_(std::move(shard_sizes)) {
  if (dataset_size < 0) throw Error("sample order: negative dataset size " + std::to_string(dataset_size));
  // Mixing (seed, epoch) into one word keeps nearby seeds and epochs far apart.
  const uint64_t key = mix64(mix64(seed) + static_cast<uint64_t>(epoch));
  if (kind == Kind::kKeyed) {
    key_ = key;
    return;
  }
  if (kind == Kind::kShardwise) {
    key_ = key;
    const auto shards = static_cast<int64_t>(shard_sizes_.size());
    int64_t start = 0;
    for (int64_t i = 0; i < shards; ++i) {
      index_starts_.push_back(start);
      start += shard_sizes_[i];
    }
    if (shards > 0 && start != dataset_size)
      throw Error("sample order: shards of " + std::to_string(start) + " samples for a dataset of " +
                  std::to_string(dataset_size));
    start = 0;
    for (int64_t i = 0; i < shards; ++i) {
      shard_order_.push_back(keyedPosition(i, shards, mix64(key)));
      order_starts_.push_back(start);
      start += shard_sizes_[shard_order_.back()];
    }
    return;
  }
  permutation_.resize(static_cast<size_t>(dataset_size));
  std::iota(permutation_.begin(), permutation_.end(), int64_t{0});
  std::mt19937_64 rng(key);
  // Fisher-Yates (Knuth's Algorithm P), from the back.
  for (size_t i = permutation_.size(); i > 1; --i) {
    const size_t j = static_cast<size_t>(uniformBelow(rng, i));
    std::swap(permutation_[i - 1], permutation_[j]);
  }
}

int64_t keyedPosition(int64_t position, int64_t size, uint64_t key) {
  if (size <= 1) return position;
  int bits = 2;
  while (bits < 62 && (uint64_t{1} << bits) < static_cast<uint64_t>(size)) bits += 2;
  const int half = bits / 2;
  const uint64_t mask = (uint64_t{1} << half) - 1;
  auto feistel = [&](uint64_t x) {
    uint64_t left = x >> half, right = x & mask;
    for (uint64_t round = 0; round < 4; ++round) {
      const uint64_t mixed = left ^ (mix64(key ^ (round << 32) ^ right) & mask);
      left = right;
      right = mixed;
    }
    return (left << half) | right;
  };
  uint64_t x = static_cast<uint64_t>(position);
  do x = feistel(x);  // a bijection on [0, 2^bits): walking it from inside [0, size) returns there
  while (x >= static_cast<uint64_t>(size));
  return static_cast<int64_t>(x);
}

int64_t SampleOrder::shardwise(int64_t position) const {
  if (shard_order_.empty()) throw Error("internal: a shard-by-shard order without the shards' sizes");
  const auto at = std::upper_bound(order_starts_.begin(), order_starts_.end(), position) - order_starts_.begin() - 1;
  const int64_t shard = shard_order_[static_cast<std::size_t>(at)];
  const int64_t local = keyedPosition(position - order_starts_[static_cast<std::size_t>(at)],
                                      shard_sizes_[static_cast<std::size_t>(shard)], key_ + static_cast<uint64_t>(shard));
  return index_starts_[static_cast<std::size_t>(shard)] + local;
}

SampleOrder sampleOrder(const DataOptions& options, const Dataset* dataset, int64_t size, uint64_t seed,
                        int64_t epoch) {
  // A rank that reads no data only counts mini-batches: an order that holds nothing.
  if (!dataset || isTokenStream(options.file)) return SampleOrder(size, seed, epoch, SampleOrder::Kind::kKeyed);
  std::vector<int64_t> shards = dataset->shardSizes();
  if (!shards.empty()) return SampleOrder(size, seed, epoch, SampleOrder::Kind::kShardwise, std::move(shards));
  return SampleOrder(size, seed, epoch);
}

int64_t SampleOrder::minibatchesPerEpoch(int64_t microbatch_size, int microbatches) const {
  checkShape(microbatch_size, microbatches);
  return size_ / (microbatch_size * microbatches);
}

std::vector<int64_t> SampleOrder::microbatch(int64_t minibatch, int microbatch, int64_t microbatch_size,
                                             int microbatches) const {
  checkShape(microbatch_size, microbatches);
  if (minibatch < 0 || minibatch >= minibatchesPerEpoch(microbatch_size, microbatches) || microbatch < 0 ||
      microbatch >= microbatches) {
    throw Error("sample order: mini-batch " + std::to_string(minibatch) + ", micro-batch " +
                std::to_string(microbatch) + " is outside the epoch (" +
                std::to_string(minibatchesPerEpoch(microbatch_size, microbatches)) + " mini-batches of " +
                std::to_string(microbatches) + " micro-batches of " + std::to_string(microbatch_size) + ")");
  }
  const int64_t first = (minibatch * microbatches + microbatch) * microbatch_size;
  if (kind_ != Kind::kShuffled) {
    std::vector<int64_t> out;
    for (int64_t p = first; p < first + microbatch_size; ++p)
      out.push_back(kind_ == Kind::kKeyed ? keyedPosition(p, size_, key_) : shardwise(p));
    return out;
  }
  const auto begin = permutation_.begin() + first;
  return std::vector<int64_t>(begin, begin + microbatch_size);
}

}  // namespace pipetrain::data
