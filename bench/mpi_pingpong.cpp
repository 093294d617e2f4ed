// convgen-mpi-pingpong: latency (alpha) and bandwidth (1 / beta) between ranks 0 and 1 of
// an mpirun launch, the two inputs of scripts/predict-scaling's alpha-beta model
// (docs/distributed.md). Ranks 0 and 1 bounce a message of each size; one-way time is
// half the best round trip over the repeats. alpha is the one-way time of the smallest
// message; bandwidth is the least-squares slope over the messages of 1 MiB and more.
//   mpirun -np 2 build/bench/convgen-mpi-pingpong                        # shared memory
//   mpirun -np 2 --mca btl tcp,self --mca btl_tcp_if_include lo build/bench/convgen-mpi-pingpong
// Prints a table, then one JSON line: {"alpha_us": A, "bandwidth_GBps": B, "transport": ...}.
#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

// Best round trip, in seconds, of `bytes` between ranks 0 and 1 over `repeats` batches of
// `iterations` bounces (other ranks idle).
double best_round_trip(int rank, std::vector<char>& buffer, int64_t bytes, int repeats, int iterations) {
  double best = 1e30;
  const int count = static_cast<int>(bytes);
  for (int r = 0; r < repeats; ++r) {
    MPI_Barrier(MPI_COMM_WORLD);
    const double start = MPI_Wtime();
    for (int i = 0; i < iterations; ++i) {
      if (rank == 0) {
        MPI_Send(buffer.data(), count, MPI_BYTE, 1, 0, MPI_COMM_WORLD);
        MPI_Recv(buffer.data(), count, MPI_BYTE, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      } else if (rank == 1) {
        MPI_Recv(buffer.data(), count, MPI_BYTE, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Send(buffer.data(), count, MPI_BYTE, 0, 0, MPI_COMM_WORLD);
      }
    }
    best = std::min(best, (MPI_Wtime() - start) / iterations);
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  std::string transport = "mpirun's default";
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--label") == 0 && i + 1 < argc) transport = argv[++i];
    else if (std::strcmp(argv[i], "--help") == 0) {
      if (rank == 0)
        std::printf("usage: mpirun -np 2 [transport options] convgen-mpi-pingpong [--label NAME]\n"
                    "Latency and bandwidth between ranks 0 and 1; NAME labels the JSON line.\n");
      MPI_Finalize();
      return 0;
    }
  }
  if (size < 2) {
    if (rank == 0) std::fprintf(stderr, "convgen-mpi-pingpong: needs 2 ranks (mpirun -np 2)\n");
    MPI_Finalize();
    return 2;
  }
  constexpr int64_t kLargest = int64_t{64} << 20;
  std::vector<char> buffer(static_cast<size_t>(kLargest), 1);
  std::vector<std::pair<int64_t, double>> one_way;
  if (rank == 0) std::printf("%12s %14s %12s\n", "bytes", "one-way us", "GB/s");
  for (int64_t bytes = 8; bytes <= kLargest; bytes *= 4) {
    const int iterations = bytes <= (int64_t{1} << 16) ? 200 : bytes <= (int64_t{1} << 22) ? 20 : 3;
    best_round_trip(rank, buffer, bytes, 1, iterations);  // warm the path
    const double t = best_round_trip(rank, buffer, bytes, 5, iterations) / 2;
    one_way.emplace_back(bytes, t);
    if (rank == 0) std::printf("%12lld %14.3f %12.3f\n", static_cast<long long>(bytes), t * 1e6, double(bytes) / t / 1e9);
  }
  if (rank == 0) {
    // Least squares t = alpha' + beta * bytes over the large messages: beta their slope.
    double sx = 0, sy = 0, sxx = 0, sxy = 0, n = 0;
    for (const auto& [bytes, t] : one_way) {
      if (bytes < (int64_t{1} << 20)) continue;
      const double x = double(bytes);
      sx += x, sy += t, sxx += x * x, sxy += x * t, n += 1;
    }
    const double beta = (n * sxy - sx * sy) / (n * sxx - sx * sx);
    std::printf("{\"alpha_us\": %.3f, \"bandwidth_GBps\": %.3f, \"transport\": \"%s\"}\n", one_way.front().second * 1e6,
                1.0 / beta / 1e9, transport.c_str());
  }
  MPI_Finalize();
  return 0;
}
