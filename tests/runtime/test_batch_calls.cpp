// CallArenas (runtime/parallel/batch_calls.h): every call runs once, on a thread's own
// 64-byte-aligned arena that no other thread uses; arenas are zeroed once and kept; the
// lowest failing call's exception comes out after every call ended.
#include <catch2/catch.hpp>

#include <omp.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/parallel/batch_calls.h"

using convgen::CallArenas;

TEST_CASE("batch calls: each call once, each thread on its own aligned arena", "[batch_calls]") {
  for (int threads : {1, 2, 3}) {
    INFO("threads " << threads);
    omp_set_num_threads(threads);
    CallArenas arenas(1000);
    for (int64_t calls : {1, 2, 5, 8}) {
      INFO("calls " << calls);
      std::vector<std::atomic<int>> ran(static_cast<size_t>(calls));
      std::mutex m;
      std::atomic<int> misaligned{0};  // no Catch assertion inside the threads: it is not thread-safe
      std::map<int, std::set<float*>> arena_of_thread;
      std::map<float*, std::set<int>> threads_of_arena;
      arenas.run(calls, [&](int64_t call, int thread, float* arena) {
        ++ran[static_cast<size_t>(call)];
        if (reinterpret_cast<std::uintptr_t>(arena) % 64 != 0) ++misaligned;
        // The whole arena is this call's: write it all, then check nobody else did.
        for (int i = 0; i < 1000; ++i) arena[i] = static_cast<float>(call);
        for (int i = 0; i < 1000; ++i)
          if (arena[i] != static_cast<float>(call)) throw std::runtime_error("arena shared between threads");
        std::lock_guard<std::mutex> lock(m);
        arena_of_thread[thread].insert(arena);
        threads_of_arena[arena].insert(thread);
      });
      CHECK(misaligned.load() == 0);
      for (const auto& r : ran) CHECK(r.load() == 1);
      for (const auto& [thread, set] : arena_of_thread) CHECK(set.size() == 1);
      for (const auto& [arena, set] : threads_of_arena) CHECK(set.size() == 1);
      CHECK(arena_of_thread.size() <= static_cast<size_t>(std::min<int64_t>(calls, threads)));
    }
    CHECK(arenas.arenas() == static_cast<size_t>(std::min(threads, 8)));
    CHECK(arenas.floats_per_arena() == 1000);
  }
  omp_set_num_threads(1);
}

TEST_CASE("batch calls: arenas start zeroed; the lowest failing call's error is rethrown", "[batch_calls]") {
  omp_set_num_threads(2);
  CallArenas arenas(64);
  std::atomic<int> nonzero{0};
  arenas.run(2, [&](int64_t, int, float* arena) {
    for (int i = 0; i < 64; ++i) nonzero += arena[i] != 0.0f;
  });
  CHECK(nonzero.load() == 0);
  std::atomic<int> ran{0};
  try {
    arenas.run(6, [&](int64_t call, int, float*) {
      ++ran;
      if (call == 4 || call == 1) throw std::runtime_error("call " + std::to_string(call));
    });
    FAIL("no exception");
  } catch (const std::runtime_error& e) {
    CHECK(std::string(e.what()) == "call 1");
  }
  CHECK(ran.load() == 6);  // every call ran though two failed
  omp_set_num_threads(1);
}

TEST_CASE("batch calls: fewer calls than threads, or inside a parallel region, run on the calling thread",
          "[batch_calls]") {
  omp_set_num_threads(3);
  CallArenas arenas(16);
  std::vector<int> thread_of(2, -1);
  arenas.run(2, [&](int64_t call, int thread, float*) { thread_of[static_cast<size_t>(call)] = thread; });
  CHECK(thread_of == std::vector<int>{0, 0});
  CHECK(arenas.arenas() == 1);
  std::atomic<int> off_thread{0}, ran{0};
#pragma omp parallel num_threads(2)
  {
    CallArenas inner(16);
    inner.run(4, [&](int64_t, int thread, float*) {
      ++ran;
      off_thread += thread != 0;
    });
  }
  CHECK(ran.load() == 8);
  CHECK(off_thread.load() == 0);
  omp_set_num_threads(1);
}
