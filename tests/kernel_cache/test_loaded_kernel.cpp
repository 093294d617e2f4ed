// The kernel cache (generator/kernel_cache): kernels stored as shared objects and loaded
// back compute exactly what in-process JIT kernels compute, in every pass; entries are
// named as `compile` names them; a damaged entry or one stored under another key is
// rebuilt, never run. Real-valued data, so any difference in the code would show.
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <thread>

#include "generator/conv/jit.h"
#include "generator/kernel_cache/kernel_cache.h"
#include "tests/common/real_valued.h"
#include "tests/common/temp_dir.h"

using namespace convgen;
using test::bitwise_equal;
using test::random_floats;
namespace fs = std::filesystem;

namespace {

// Every output of the three passes of one layer, with the kernels built as the cache is
// configured now.
std::vector<std::vector<float>> run_all_passes(const ConvDescriptor& d, const TargetInfo& t) {
  const auto x = random_floats(d.mb * d.ih * d.iw * d.ic, 1), w = random_floats(d.oc * d.icg() * d.kh * d.kw, 2);
  const auto bias = random_floats(d.oc, 3), dy = random_floats(d.mb * d.oh() * d.ow() * d.oc, 4);
  std::vector<float> y(dy.size()), dx(x.size()), dw(w.size()), db(d.bias ? d.oc : 0);
  JitForwardKernel fwd(d, analytic_schedule(d, t), t);
  fwd.run(x.data(), w.data(), d.bias ? bias.data() : nullptr, y.data());
  JitBackwardDataKernel bwd_data(d, analytic_schedule_for_pass(d, "bwd_data", t), t);
  bwd_data.run(dy.data(), w.data(), d.relu ? y.data() : nullptr, dx.data());
  JitBackwardWeightsKernel bwd_weights(d, analytic_schedule_for_pass(d, "bwd_weights", t), t);
  bwd_weights.run(x.data(), dy.data(), d.relu ? y.data() : nullptr, dw.data(), d.bias ? db.data() : nullptr);
  return {y, dx, dw, db};
}

// The shared objects in the cache, by file name.
std::vector<fs::path> shared_objects(const fs::path& cache) {
  std::vector<fs::path> found;
  if (!fs::exists(cache / "kernels")) return found;
  for (const auto& e : fs::recursive_directory_iterator(cache / "kernels"))
    if (e.path().extension() == ".so") found.push_back(e.path());
  return found;
}

struct CacheScope {
  test::TempDir dir{"convgen-kernel-cache"};
  CacheScope() { set_kernel_cache_dir(dir.path); }
  ~CacheScope() { disable_kernel_cache(); }
};

}  // namespace

TEST_CASE("kernels from the cache compute the JIT kernels' bits in every pass, and load back",
          "[kernel_cache]") {
  const TargetInfo t = default_target();
  // With bias and ReLU (five buffers in backward-weights, a real mask), and without
  // either (four buffers, a placeholder mask and bias).
  for (const char* text : {"mb3ic16ih9iw7oc24kh3kw3sh1pt1pb1pl1pr1+bias+relu", "mb2ic8ih7iw5oc16kh3kw1sh2pt1pb0"}) {
    INFO(text);
    const ConvDescriptor d = parse_descriptor(text);
    disable_kernel_cache();
    const auto jit = run_all_passes(d, t);

    CacheScope cache;
    const KernelCacheStats before = kernel_cache_stats();
    const auto built = run_all_passes(d, t);
    const KernelCacheStats after_build = kernel_cache_stats();
    CHECK(after_build.built - before.built == 3);
    CHECK(after_build.jit == before.jit);
    REQUIRE(shared_objects(cache.dir.path).size() == 3);
    const auto loaded = run_all_passes(d, t);
    const KernelCacheStats after_load = kernel_cache_stats();
    CHECK(after_load.loaded - after_build.loaded == 3);
    CHECK(after_load.built == after_build.built);
    for (size_t i = 0; i < jit.size(); ++i) {
      INFO("output " << i << " (y, dx, dw, db)");
      CHECK(bitwise_equal(jit[i], built[i]));
      CHECK(bitwise_equal(jit[i], loaded[i]));
    }

    // A private copy (the tuner's second default) loads the same entry again: the same
    // bits, nothing built, no second file left in the cache.
    const auto x = random_floats(d.mb * d.ih * d.iw * d.ic, 1), w = random_floats(d.oc * d.icg() * d.kh * d.kw, 2);
    const auto bias = random_floats(d.oc, 3);
    std::vector<float> y(jit[0].size());
    JitForwardKernel copy(d, analytic_schedule(d, t), t, {}, KernelSource::PrivateCopy);
    copy.run(x.data(), w.data(), d.bias ? bias.data() : nullptr, y.data());
    CHECK(bitwise_equal(jit[0], y));
    CHECK(kernel_cache_stats().loaded - after_load.loaded == 1);
    CHECK(kernel_cache_stats().built == after_build.built);
    CHECK(shared_objects(cache.dir.path).size() == 3);

    // The entry is where `compile` puts the same kernel's static library, under its name.
    const std::string key = kernel_cache_key(d, "fwd", analytic_schedule(d, t), t.target);
    const fs::path entry = kernel_cache_entry(cache.dir.path, key);
    CHECK(fs::exists(entry / (kernel_function_name("fwd", key) + ".so")));
    std::ifstream key_file(entry / (kernel_function_name("fwd", key) + ".so.key"));
    std::string first_line;
    std::getline(key_file, first_line);
    CHECK(first_line == key);
  }
}

TEST_CASE("a damaged entry, or one stored under another key, is rebuilt and never run", "[kernel_cache]") {
  const TargetInfo t = default_target();
  const ConvDescriptor d = parse_descriptor("mb2ic8ih6iw6oc16kh3kw3pt1pb1pl1pr1+bias");
  disable_kernel_cache();
  const auto jit = run_all_passes(d, t);
  CacheScope cache;
  run_all_passes(d, t);
  const auto objects = shared_objects(cache.dir.path);
  INFO(kernel_cache_summary());
  REQUIRE(objects.size() == 3);

  SECTION("garbage bytes") {
    for (const auto& so : objects) std::ofstream(so, std::ios::binary | std::ios::trunc) << "not an ELF file";
  }
  SECTION("a key file naming another kernel") {
    for (const auto& so : objects) std::ofstream(so.string() + ".key", std::ios::trunc) << "another kernel\n";
  }
  SECTION("the key file missing") {
    for (const auto& so : objects) fs::remove(so.string() + ".key");
  }
  const KernelCacheStats before = kernel_cache_stats();
  const auto again = run_all_passes(d, t);
  const KernelCacheStats after = kernel_cache_stats();
  CHECK(after.rebuilt - before.rebuilt == 3);
  CHECK(after.loaded == before.loaded);
  for (size_t i = 0; i < jit.size(); ++i) CHECK(bitwise_equal(jit[i], again[i]));
  // Repaired: the next construction loads.
  run_all_passes(d, t);
  CHECK(kernel_cache_stats().loaded - after.loaded == 3);
}

TEST_CASE("keys: the schedule, pass and target name different entries, a layer name does not", "[kernel_cache]") {
  const TargetInfo t = default_target();
  const ConvDescriptor d = parse_descriptor("mb2ic8ih6iw6oc16kh3kw3pt1pb1pl1pr1");
  ConvSchedule s = analytic_schedule(d, t);
  const std::string key = kernel_cache_key(d, "fwd", s, t.target);
  ConvDescriptor named = d;
  named.name = "conv1";
  CHECK(kernel_cache_key(named, "fwd", s, t.target) == key);  // a layer's name is not its code
  CHECK(kernel_cache_key(d, "bwd_data", s, t.target) != key);
  CHECK(kernel_cache_key(d, "fwd", s, "x86-64-linux-avx512") != key);
  s.nc += 1;
  CHECK(kernel_cache_key(d, "fwd", s, t.target) != key);
  const fs::path cache = "/cache";
  CHECK(kernel_cache_entry(cache, key).parent_path() == cache / "kernels");
  CHECK(kernel_cache_entry(cache, key) != kernel_cache_entry(cache, kernel_cache_key(d, "fwd", s, t.target)));
  CHECK(kernel_function_name("fwd", key).rfind("convgen_fwd_", 0) == 0);
}

TEST_CASE("the cache keeps within its size bound by removing the least recently used entries", "[kernel_cache]") {
  test::TempDir dir("convgen-kernel-cache-trim");
  const auto now = fs::file_time_type::clock::now();
  // Five entries of 1000 bytes, used 5, 4, 3, 2 hours ago and just now.
  for (int i = 0; i < 5; ++i) {
    const fs::path entry = dir.path / "kernels" / ("entry" + std::to_string(i));
    fs::create_directories(entry);
    std::ofstream(entry / "k.so", std::ios::binary) << std::string(1000, 'x');
    const auto used = i == 4 ? now : now - std::chrono::hours(5 - i);
    fs::last_write_time(entry / "k.so", used);
    fs::last_write_time(entry, used);
  }
  // An entry being filled (no files yet) counts by its directory's time: it stays.
  fs::create_directories(dir.path / "kernels" / "filling");
  CHECK(trim_kernel_cache(dir.path, 5000) == 0);  // within the bound: nothing goes
  CHECK(trim_kernel_cache(dir.path, 3000) == 3000);  // down to 90% of 3000: the three oldest
  CHECK_FALSE(fs::exists(dir.path / "kernels" / "entry0"));
  CHECK_FALSE(fs::exists(dir.path / "kernels" / "entry2"));
  CHECK(fs::exists(dir.path / "kernels" / "entry3"));
  // An entry used within the hour stays even when the bound says otherwise.
  CHECK(trim_kernel_cache(dir.path, 100) == 1000);
  CHECK(fs::exists(dir.path / "kernels" / "entry4"));
  CHECK(fs::exists(dir.path / "kernels" / "filling"));
  // A killed build's scratch goes after a day; one under way stays.
  fs::create_directories(dir.path / "tmp" / "old");
  std::ofstream(dir.path / "tmp" / "old" / "k.o", std::ios::binary) << std::string(500, 'x');
  fs::last_write_time(dir.path / "tmp" / "old", now - std::chrono::hours(25));
  fs::create_directories(dir.path / "tmp" / "new");
  CHECK(trim_kernel_cache(dir.path, 1 << 20) == 500);
  CHECK_FALSE(fs::exists(dir.path / "tmp" / "old"));
  CHECK(fs::exists(dir.path / "tmp" / "new"));
}

TEST_CASE("CONVGEN_CACHE_MAX_SIZE takes sizes with K, M, G and names itself in its error", "[kernel_cache]") {
  ::setenv("CONVGEN_CACHE_MAX_SIZE", "500M", 1);
  CHECK(kernel_cache_max_bytes() == int64_t(500) << 20);
  ::setenv("CONVGEN_CACHE_MAX_SIZE", "4G", 1);
  CHECK(kernel_cache_max_bytes() == int64_t(4) << 30);
  ::setenv("CONVGEN_CACHE_MAX_SIZE", "12345", 1);
  CHECK(kernel_cache_max_bytes() == 12345);
  ::setenv("CONVGEN_CACHE_MAX_SIZE", "lots", 1);
  CHECK_THROWS_WITH(kernel_cache_max_bytes(), Catch::Contains("CONVGEN_CACHE_MAX_SIZE=lots"));
  ::setenv("CONVGEN_CACHE_MAX_SIZE", "3T", 1);
  CHECK_THROWS_WITH(kernel_cache_max_bytes(), Catch::Contains("CONVGEN_CACHE_MAX_SIZE=3T"));
  ::unsetenv("CONVGEN_CACHE_MAX_SIZE");
  CHECK(kernel_cache_max_bytes() == int64_t(2) << 30);
}

TEST_CASE("threads opening kernels at once, the same one included, all get working kernels", "[kernel_cache]") {
  const TargetInfo t = default_target();
  // Two layers x two threads each: two threads race on every key (the tuner builds
  // candidates in --jobs threads).
  const std::vector<ConvDescriptor> layers = {parse_descriptor("mb2ic8ih6iw6oc16kh3kw3pt1pb1pl1pr1"),
                                              parse_descriptor("mb2ic16ih5iw5oc8kh1kw1")};
  disable_kernel_cache();
  std::vector<std::vector<float>> expected;
  for (const ConvDescriptor& d : layers) expected.push_back(run_all_passes(d, t)[0]);
  CacheScope cache;
  std::vector<std::vector<float>> got(4);
  std::vector<std::string> errors(4);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < 4; ++i)
    threads.emplace_back([&, i] {
      try {
        const ConvDescriptor& d = layers[i % 2];
        const auto x = random_floats(d.mb * d.ih * d.iw * d.ic, 1), w = random_floats(d.oc * d.icg() * d.kh * d.kw, 2);
        std::vector<float> y(d.mb * d.oh() * d.ow() * d.oc);
        JitForwardKernel k(d, analytic_schedule(d, t), t);
        k.run(x.data(), w.data(), nullptr, y.data());
        got[i] = y;
      } catch (const std::exception& e) {
        errors[i] = e.what();
      }
    });
  for (auto& th : threads) th.join();
  for (size_t i = 0; i < 4; ++i) {
    INFO("thread " << i << ": " << errors[i]);
    CHECK(errors[i].empty());
    CHECK(bitwise_equal(got[i], expected[i % 2]));
  }
  CHECK(shared_objects(cache.dir.path).size() == 2);
  CHECK(kernel_cache_stats().fallback.empty());
}
