#include "runtime/parallel/process_group.h"

#include <algorithm>

namespace convgen {

std::pair<int64_t, int64_t> rank_range(int64_t count, int rank, int ranks) {
  const int64_t base = count / ranks, extra = count % ranks;
  const int64_t begin = rank * base + std::min<int64_t>(rank, extra);
  return {begin, begin + base + (rank < extra ? 1 : 0)};
}

}  // namespace convgen
