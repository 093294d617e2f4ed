// Training data (runtime/data/train_data.h): the readers and their errors, the synthetic
// generator and epoch orders pinned to exact values, decoding, and the batch stream.
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <catch2/catch.hpp>

#include "tests/common/temp_dir.h"
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <vector>

#include "runtime/data/train_data.h"
#include "schedules/errors.h"

namespace fs = std::filesystem;
using namespace convgen::data;
using convgen::Error;
using convgen::ExitCode;

namespace {

// Temporary directories for this file's tests.
struct TempDir : convgen::test::TempDir {
  TempDir() : convgen::test::TempDir("convgen-data") {}
};

using Bytes = std::vector<uint8_t>;

void write_raw(const std::string& path, const Bytes& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(out.good());
}

void write_gzip(const std::string& path, const Bytes& bytes) {
  gzFile file = gzopen(path.c_str(), "wb");
  REQUIRE(file != nullptr);
  REQUIRE(gzwrite(file, bytes.data(), static_cast<unsigned>(bytes.size())) == static_cast<int>(bytes.size()));
  REQUIRE(gzclose(file) == Z_OK);
}

void put32(Bytes* out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out->push_back(static_cast<uint8_t>(v >> shift));
}

// An IDX file of unsigned bytes: magic 0x0000080N, N big-endian dimensions, the data.
Bytes idx(const std::vector<uint32_t>& dims, const Bytes& data) {
  Bytes out;
  put32(&out, 0x800u + static_cast<uint32_t>(dims.size()));
  for (uint32_t d : dims) put32(&out, d);
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

// `count` images of 1 x rows x cols, pixel j of image i = i * 7 + j (mod 256); labels i % 10.
Bytes image_data(uint32_t count, uint32_t rows, uint32_t cols) {
  Bytes data;
  for (uint32_t i = 0; i < count; ++i)
    for (uint32_t j = 0; j < rows * cols; ++j) data.push_back(static_cast<uint8_t>(i * 7 + j));
  return data;
}
Bytes label_data(uint32_t count) {
  Bytes data;
  for (uint32_t i = 0; i < count; ++i) data.push_back(static_cast<uint8_t>(i % 10));
  return data;
}

SampleSpec spec(int64_t c, int64_t h, int64_t w, int64_t classes = 10) {
  SampleSpec s;
  s.channels = c;
  s.height = h;
  s.width = w;
  s.classes = classes;
  return s;
}

// Runs `load_source(source, sample)`, which must fail with `code`; returns the message.
std::string load_error(const std::string& source, const SampleSpec& sample, ExitCode code) {
  try {
    load_source(source, sample);
  } catch (const Error& e) {
    CHECK(static_cast<int>(e.code()) == static_cast<int>(code));
    return e.what();
  }
  FAIL("load_source('" << source << "') did not fail");
  return "";
}

bool starts_with(const std::string& text, const std::string& prefix) { return text.rfind(prefix, 0) == 0; }

}  // namespace

TEST_CASE("mix64 is splitmix64", "[data]") {
  // splitmix64's first outputs from state 0 are mix(0) and mix(golden gamma).
  CHECK(mix64(0) == 0xE220A8397B1DCDAFull);
  CHECK(mix64(0x9E3779B97F4A7C15ull) == 0x6E789E6AA1B965F4ull);
  // Computed with an independent Python transcription of the header's formula.
  CHECK(mix64(1) == 0x910A2DEC89025CC1ull);
  CHECK(mix64(~0ull) == 0xE4D971771B652C20ull);
  CHECK(mix64(0x0123456789ABCDEFull) == 0x157A3807A48FAA9Dull);
}

TEST_CASE("synthetic data is exactly the specified bytes and labels", "[data]") {
  const SampleSpec s = spec(1, 2, 3);
  const Dataset set = synthetic_dataset(s, 3, 5, "synthetic");
  CHECK(set.name == "synthetic");
  CHECK(set.count() == 3);
  CHECK(set.channels == 1);
  CHECK(set.height == 2);
  CHECK(set.width == 3);
  // Expected values from the Python transcription (seed 5, 6 bytes a sample, 10 classes).
  CHECK(set.pixels == Bytes{250, 225, 167, 142, 228, 224, 79, 157, 10, 255, 238, 26, 244, 100, 16, 28, 22, 116});
  CHECK(set.labels == Bytes{7, 5, 5});

  const Dataset again = synthetic_dataset(s, 3, 5, "x");
  CHECK(again.pixels == set.pixels);
  CHECK(again.labels == set.labels);
  const Dataset other = synthetic_dataset(s, 3, 6, "x");
  CHECK(other.pixels != set.pixels);

  const Dataset many = synthetic_dataset(spec(3, 4, 4, 7), 500, 9, "x");
  for (uint8_t label : many.labels) CHECK(label < 7);
  CHECK(std::set<uint8_t>(many.labels.begin(), many.labels.end()).size() == 7);
}

TEST_CASE("the synthetic source has a train and a test split", "[data]") {
  SampleSpec s = spec(3, 8, 8);
  s.synthetic_count = 60;
  s.synthetic_seed = 11;
  const Source source = load_source("synthetic", s);
  CHECK(source.train.count() == 60);
  REQUIRE(source.test.has_value());
  CHECK(source.test->count() == 10);
  CHECK(source.train.sample_bytes() == 3 * 8 * 8);
  const Dataset expected = synthetic_dataset(s, 10, 12, "synthetic test");
  CHECK(source.test->pixels == expected.pixels);
  CHECK(source.test->name == "synthetic test");

  s.synthetic_count = 4;  // a test split of at least one sample
  CHECK(load_source("synthetic", s).test->count() == 1);
}

TEST_CASE("epoch_order: identity without shuffle, a deterministic permutation with it", "[data]") {
  CHECK(epoch_order(5, 3, false, 42) == std::vector<int64_t>{0, 1, 2, 3, 4});
  CHECK(epoch_order(0, 0, true, 1).empty());
  CHECK(epoch_order(1, 0, true, 1) == std::vector<int64_t>{0});
  // From the Python transcription of the header's Fisher-Yates.
  CHECK(epoch_order(10, 0, true, 42) == std::vector<int64_t>{9, 0, 5, 7, 3, 4, 2, 6, 8, 1});
  CHECK(epoch_order(10, 1, true, 42) == std::vector<int64_t>{5, 0, 1, 6, 3, 9, 4, 7, 2, 8});
  CHECK(epoch_order(7, 3, true, 0) == std::vector<int64_t>{2, 5, 6, 4, 1, 0, 3});

  for (int64_t epoch = 0; epoch < 4; ++epoch) {
    std::vector<int64_t> order = epoch_order(1000, epoch, true, 7);
    CHECK(order == epoch_order(1000, epoch, true, 7));
    CHECK(order != epoch_order(1000, epoch + 1, true, 7));
    CHECK(order != epoch_order(1000, epoch, true, 8));
    std::sort(order.begin(), order.end());
    CHECK(order == epoch_order(1000, 0, false, 0));
  }
}

TEST_CASE("parse_normalization", "[data]") {
  const Normalization one = parse_normalization("0.5,0.25", 3);
  CHECK(one.mean == std::vector<float>{0.5f});
  CHECK(one.stddev == std::vector<float>{0.25f});
  const Normalization per = parse_normalization("0.1,0.2,0.3,1,2,3", 3);
  CHECK(per.mean == std::vector<float>{0.1f, 0.2f, 0.3f});
  CHECK(per.stddev == std::vector<float>{1.0f, 2.0f, 3.0f});
  CHECK(parse_normalization("-1,1e-3", 1).mean == std::vector<float>{-1.0f});

  for (const std::string bad : {"", "0.5", "0.5,", ",0.5", "a,b", "0.5,0.25,1", "1,2,3,4", "0.5, 0.25", "0.5,0",
                                "0.5,-1", "0.5,nan", "0.5,inf", "0.1,0.2,0.3,1,0,3", "0.5;0.25"}) {
    INFO("text '" << bad << "'");
    try {
      parse_normalization(bad, 3);
      FAIL("accepted");
    } catch (const Error& e) {
      CHECK(e.code() == ExitCode::Usage);
      CHECK(std::string(e.what()).find("'" + bad + "'") != std::string::npos);
    }
  }
}

TEST_CASE("decode_batch: NCHW floats in the given order, normalized per channel", "[data]") {
  Dataset set;
  set.name = "t";
  set.channels = 2;
  set.height = 1;
  set.width = 2;
  set.pixels = {0, 255, 51, 102,  // sample 0: channel 0 = {0, 255}, channel 1 = {51, 102}
                10, 20, 30, 40};  // sample 1
  set.labels = {3, 8};
  const std::vector<int64_t> order{1, 0};

  Batch batch;
  batch.epoch = 4;
  decode_batch(set, order, 0, 2, Normalization{}, &batch);
  CHECK(batch.epoch == 4);  // left alone
  CHECK(batch.first == 0);
  CHECK(batch.count == 2);
  CHECK(batch.labels == std::vector<int32_t>{8, 3});
  REQUIRE(batch.pixels.size() == 8);
  CHECK(batch.pixels[0] == 10.0f / 255.0f);
  CHECK(batch.pixels[4] == 0.0f);
  CHECK(batch.pixels[5] == 1.0f);
  CHECK(batch.pixels[6] == 51.0f / 255.0f);

  Normalization norm;
  norm.mean = {0.5f, 0.25f};
  norm.stddev = {0.5f, 2.0f};
  decode_batch(set, order, 1, 1, norm, &batch);
  CHECK(batch.first == 1);
  CHECK(batch.count == 1);
  CHECK(batch.labels == std::vector<int32_t>{3});
  REQUIRE(batch.pixels.size() == 4);
  const Bytes& s0 = set.pixels;
  CHECK(batch.pixels[0] == (static_cast<float>(s0[0]) / 255.0f - 0.5f) / 0.5f);
  CHECK(batch.pixels[1] == (static_cast<float>(s0[1]) / 255.0f - 0.5f) / 0.5f);
  CHECK(batch.pixels[2] == (static_cast<float>(s0[2]) / 255.0f - 0.25f) / 2.0f);
  CHECK(batch.pixels[3] == (static_cast<float>(s0[3]) / 255.0f - 0.25f) / 2.0f);
  CHECK(batch.pixels[0] == -1.0f);
  CHECK(batch.pixels[1] == 1.0f);

  // A single mean and std applies to every channel.
  norm.mean = {0.5f};
  norm.stddev = {0.25f};
  decode_batch(set, order, 0, 1, norm, &batch);
  CHECK(batch.pixels[3] == (40.0f / 255.0f - 0.5f) / 0.25f);

  norm.mean = {0.1f, 0.2f, 0.3f};
  CHECK_THROWS_AS(decode_batch(set, order, 0, 1, norm, &batch), Error);
  CHECK_THROWS_AS(decode_batch(set, order, 1, 2, Normalization{}, &batch), Error);
}

TEST_CASE("IDX files round trip, raw and gzip", "[data]") {
  TempDir dir;
  const Bytes images = image_data(5, 3, 4), labels = label_data(5);
  write_raw(dir.file("img.idx"), idx({5, 3, 4}, images));
  write_raw(dir.file("lab.idx"), idx({5}, labels));
  write_gzip(dir.file("img.idx.gz"), idx({5, 3, 4}, images));
  write_gzip(dir.file("lab.idx.gz"), idx({5}, labels));

  for (const std::string suffix : {"", ".gz"}) {
    const std::string image_file = dir.file("img.idx" + suffix);
    const Source source = load_source("idx:" + image_file + "," + dir.file("lab.idx" + suffix), spec(1, 3, 4));
    CHECK_FALSE(source.test.has_value());
    CHECK(source.train.name == image_file);
    CHECK(source.train.count() == 5);
    CHECK(source.train.channels == 1);
    CHECK(source.train.height == 3);
    CHECK(source.train.width == 4);
    CHECK(source.train.pixels == images);
    CHECK(source.train.labels == labels);
  }
  // Mixed: gzip images, raw labels.
  CHECK(load_source("idx:" + dir.file("img.idx.gz") + "," + dir.file("lab.idx"), spec(1, 3, 4)).train.pixels == images);
}

TEST_CASE("IDX errors name the file", "[data]") {
  TempDir dir;
  const SampleSpec s = spec(1, 3, 4);
  const std::string img = dir.file("img.idx"), lab = dir.file("lab.idx");
  write_raw(img, idx({5, 3, 4}, image_data(5, 3, 4)));
  write_raw(lab, idx({5}, label_data(5)));
  const auto source = [](const std::string& i, const std::string& l) { return "idx:" + i + "," + l; };

  SECTION("missing file") {
    const std::string missing = dir.file("nope.idx");
    std::string m = load_error(source(missing, lab), s, ExitCode::BadData);
    CHECK(starts_with(m, missing + ": cannot open"));
    m = load_error(source(img, missing), s, ExitCode::BadData);
    CHECK(starts_with(m, missing + ": cannot open"));
  }
  SECTION("wrong magic") {
    // Images and labels swapped: each has the other's magic.
    std::string m = load_error(source(lab, img), s, ExitCode::BadData);
    CHECK(starts_with(m, lab + ": not an IDX images file"));
    CHECK(m.find("0x00000801") != std::string::npos);
    const std::string junk = dir.file("junk");
    write_raw(junk, {0x12, 0x34, 0x56, 0x78, 0, 0, 0, 0});
    m = load_error(source(img, junk), s, ExitCode::BadData);
    CHECK(starts_with(m, junk + ": not an IDX labels file"));
    write_gzip(junk + ".gz", {0x00, 0x00, 0x0d, 0x03, 0, 0, 0, 1});  // a float IDX
    m = load_error(source(junk + ".gz", lab), s, ExitCode::BadData);
    CHECK(starts_with(m, junk + ".gz: not an IDX images file"));
  }
  SECTION("truncated") {
    const std::string cut = dir.file("cut.idx");
    Bytes bytes = idx({5, 3, 4}, image_data(5, 3, 4));
    bytes.pop_back();
    write_raw(cut, bytes);
    std::string m = load_error(source(cut, lab), s, ExitCode::BadData);
    CHECK(starts_with(m, cut + ": truncated"));
    write_raw(cut, Bytes(bytes.begin(), bytes.begin() + 10));  // inside the header
    m = load_error(source(cut, lab), s, ExitCode::BadData);
    CHECK(starts_with(m, cut + ": truncated"));
    write_raw(cut, {});
    m = load_error(source(cut, lab), s, ExitCode::BadData);
    CHECK(starts_with(m, cut + ": truncated"));
    // A gzip stream cut short.
    write_gzip(cut + ".gz", idx({5, 3, 4}, image_data(5, 3, 4)));
    const std::string gz = cut + ".gz";
    std::ifstream in(gz, std::ios::binary);
    Bytes whole((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    write_raw(gz, Bytes(whole.begin(), whole.begin() + static_cast<long>(whole.size() / 2)));
    m = load_error(source(gz, lab), s, ExitCode::BadData);
    CHECK(starts_with(m, gz + ": truncated"));
  }
  SECTION("trailing data") {
    const std::string longer = dir.file("long.idx");
    Bytes bytes = idx({5}, label_data(5));
    bytes.push_back(0);
    write_raw(longer, bytes);
    const std::string m = load_error(source(img, longer), s, ExitCode::BadData);
    CHECK(starts_with(m, longer + ": 1 bytes of trailing data"));
  }
  SECTION("count mismatch") {
    const std::string four = dir.file("four.idx");
    write_raw(four, idx({4}, label_data(4)));
    const std::string m = load_error(source(img, four), s, ExitCode::BadData);
    CHECK(m == four + ": 4 labels but " + img + " holds 5 images");
  }
  SECTION("shape differs from the model's input") {
    const std::string m = load_error(source(img, lab), spec(3, 32, 32), ExitCode::BadData);
    CHECK(m == img + ": images are 1x3x4 but the model's input is 3x32x32");
    CHECK(load_error(source(img, lab), spec(1, 4, 3), ExitCode::BadData) ==
          img + ": images are 1x3x4 but the model's input is 1x4x3");
  }
  SECTION("label out of range") {
    const std::string bad = dir.file("bad.idx");
    write_raw(bad, idx({5}, {0, 1, 2, 12, 4}));
    std::string m = load_error(source(img, bad), s, ExitCode::BadData);
    CHECK(m == bad + ": label 12 of sample 3 is outside [0, 10)");
    m = load_error(source(img, lab), spec(1, 3, 4, 4), ExitCode::BadData);
    CHECK(m == lab + ": label 4 of sample 4 is outside [0, 4)");
  }
}

TEST_CASE("bad data source texts are usage errors", "[data]") {
  for (const std::string bad : {"", "mnist", "idx:", "idx:a", "idx:a,", "idx:,b", "cifar10:", "cifar10", "synthetic:3",
                                "Fashion-MNIST"}) {
    INFO("source '" << bad << "'");
    const std::string m = load_error(bad, spec(1, 28, 28), ExitCode::Usage);
    CHECK(m == "unknown data source '" + bad +
                   "': expected fashion-mnist, idx:IMAGES,LABELS, cifar10:DIR or synthetic");
  }
}

namespace {

// A CIFAR-10 record: label, then 3072 pixels; pixel j of record `id` = (id * 13 + j) mod 256.
void append_record(Bytes* out, uint8_t label, int id) {
  out->push_back(label);
  for (int j = 0; j < 3072; ++j) out->push_back(static_cast<uint8_t>(id * 13 + j));
}

// data_batch_b.bin holds b records (ids 10 * b + r, labels (b + r) % 10); test_batch.bin 2.
void write_cifar_dir(const TempDir& dir) {
  for (int b = 1; b <= 5; ++b) {
    Bytes bytes;
    for (int r = 0; r < b; ++r) append_record(&bytes, static_cast<uint8_t>((b + r) % 10), 10 * b + r);
    write_raw(dir.file("data_batch_" + std::to_string(b) + ".bin"), bytes);
  }
  Bytes test;
  append_record(&test, 9, 100);
  append_record(&test, 0, 101);
  write_raw(dir.file("test_batch.bin"), test);
}

}  // namespace

TEST_CASE("the CIFAR-10 reader", "[data]") {
  TempDir dir;
  write_cifar_dir(dir);
  const SampleSpec s = spec(3, 32, 32);
  const std::string source = "cifar10:" + dir.path.string();

  SECTION("reads the five training batches in order, and the test batch") {
    const Source data = load_source(source, s);
    CHECK(data.train.count() == 1 + 2 + 3 + 4 + 5);
    CHECK(data.train.channels == 3);
    CHECK(data.train.height == 32);
    CHECK(data.train.width == 32);
    Bytes labels, pixels;
    for (int b = 1; b <= 5; ++b)
      for (int r = 0; r < b; ++r) {
        labels.push_back(static_cast<uint8_t>((b + r) % 10));
        Bytes record;
        append_record(&record, 0, 10 * b + r);
        pixels.insert(pixels.end(), record.begin() + 1, record.end());
      }
    CHECK(data.train.labels == labels);
    CHECK(data.train.pixels == pixels);
    REQUIRE(data.test.has_value());
    CHECK(data.test->count() == 2);
    CHECK(data.test->labels == Bytes{9, 0});
    CHECK(data.test->pixels[3072] == static_cast<uint8_t>(101 * 13));
    CHECK(data.test->name == dir.file("test_batch.bin"));
    // A trailing slash on DIR changes nothing.
    CHECK(load_source(source + "/", s).train.labels == labels);
  }
  SECTION("missing file") {
    fs::remove(dir.file("data_batch_4.bin"));
    CHECK(starts_with(load_error(source, s, ExitCode::BadData), dir.file("data_batch_4.bin") + ": cannot open"));
  }
  SECTION("missing test batch") {
    fs::remove(dir.file("test_batch.bin"));
    CHECK(starts_with(load_error(source, s, ExitCode::BadData), dir.file("test_batch.bin") + ": cannot open"));
  }
  SECTION("not a whole number of records") {
    Bytes bytes;
    append_record(&bytes, 1, 0);
    bytes.push_back(7);
    write_raw(dir.file("data_batch_2.bin"), bytes);
    CHECK(load_error(source, s, ExitCode::BadData) ==
          dir.file("data_batch_2.bin") + ": 3074 bytes is not a whole number of 3073-byte CIFAR-10 records");
    write_raw(dir.file("data_batch_2.bin"), {});
    CHECK(starts_with(load_error(source, s, ExitCode::BadData), dir.file("data_batch_2.bin") + ": 0 bytes"));
  }
  SECTION("shape and labels against the model") {
    CHECK(load_error(source, spec(1, 28, 28), ExitCode::BadData) ==
          dir.file("data_batch_1.bin") + ": images are 3x32x32 but the model's input is 1x28x28");
    // Batches 1-4 hold labels 1..7; data_batch_5 holds 5..9, its sample 3 is the first 8.
    CHECK(load_error(source, spec(3, 32, 32, 8), ExitCode::BadData) ==
          dir.file("data_batch_5.bin") + ": label 8 of sample 3 is outside [0, 8)");
  }
}

namespace {

void check_same(const Batch& got, const Batch& want) {
  CHECK(got.epoch == want.epoch);
  CHECK(got.first == want.first);
  CHECK(got.count == want.count);
  CHECK(got.labels == want.labels);
  CHECK(got.pixels == want.pixels);
}

}  // namespace

TEST_CASE("BatchStream yields the batches of decode_batch, epoch after epoch", "[data]") {
  const Dataset set = synthetic_dataset(spec(2, 3, 3, 5), 10, 3, "s");
  Normalization norm;
  norm.mean = {0.5f, 0.4f};
  norm.stddev = {0.2f, 0.3f};
  const int64_t batch = 4;  // batches of 4, 4 and 2 per epoch
  const uint64_t seed = 77;

  for (const bool shuffle : {false, true}) {
    INFO("shuffle " << shuffle);
    BatchStream stream(set, batch, shuffle, seed, norm);
    CHECK(stream.batches_per_epoch() == 3);
    CHECK(stream.order(2) == epoch_order(10, 2, shuffle, seed));
    // 2.5 epochs: 8 batches, the last a full one of epoch 2.
    const std::vector<std::pair<int64_t, int64_t>> expected{{0, 0}, {0, 4}, {0, 8}, {1, 0},
                                                            {1, 4}, {1, 8}, {2, 0}, {2, 4}};
    const Batch* previous = nullptr;
    for (const auto& [epoch, first] : expected) {
      const Batch& got = stream.next();
      CHECK(&got != previous);  // double-buffered: the caller's batch is not overwritten
      previous = &got;
      Batch want;
      want.epoch = epoch;
      decode_batch(set, epoch_order(10, epoch, shuffle, seed), first, std::min<int64_t>(batch, 10 - first), norm,
                   &want);
      check_same(got, want);
    }
  }
}

TEST_CASE("BatchStream resumes at an epoch and position", "[data]") {
  const Dataset set = synthetic_dataset(spec(1, 2, 2), 9, 1, "s");
  {
    BatchStream stream(set, 3, true, 5, Normalization{}, 2, 6);
    const Batch& a = stream.next();
    CHECK(a.epoch == 2);
    CHECK(a.first == 6);
    CHECK(a.count == 3);
    const Batch& b = stream.next();
    CHECK(b.epoch == 3);
    CHECK(b.first == 0);
    Batch want;
    want.epoch = 3;
    decode_batch(set, epoch_order(9, 3, true, 5), 0, 3, Normalization{}, &want);
    check_same(b, want);
  }
  {
    BatchStream at_end(set, 4, false, 0, Normalization{}, 1, 9);  // the end of epoch 1 = start of epoch 2
    const Batch& a = at_end.next();
    CHECK(a.epoch == 2);
    CHECK(a.first == 0);
  }
  CHECK_THROWS_AS(BatchStream(set, 4, false, 0, Normalization{}, 0, 2), Error);
  CHECK_THROWS_AS(BatchStream(set, 4, false, 0, Normalization{}, 0, 12), Error);
  CHECK_THROWS_AS(BatchStream(set, 0, false, 0, Normalization{}), Error);
  Normalization three;
  three.mean = {0, 0, 0};
  CHECK_THROWS_AS(BatchStream(set, 4, false, 0, three), Error);
  CHECK_THROWS_AS(BatchStream(Dataset{}, 4, false, 0, Normalization{}), Error);
}

TEST_CASE("BatchStream stops cleanly whether or not it was consumed", "[data]") {
  const Dataset set = synthetic_dataset(spec(1, 4, 4), 50, 2, "s");
  for (int i = 0; i < 20; ++i) {
    BatchStream never(set, 7, true, 1, Normalization{});
  }
  for (int i = 0; i < 20; ++i) {
    BatchStream once(set, 7, true, 1, Normalization{});
    CHECK(once.next().count == 7);
  }
  BatchStream many(set, 7, true, 1, Normalization{});
  int64_t seen = 0;
  for (int i = 0; i < 100; ++i) seen += many.next().count;
  CHECK(seen == 12 * 50 + 4 * 7);  // 8 batches an epoch: 12 epochs, then 4 batches
}

TEST_CASE("BatchStream rethrows what stopped its worker", "[data]") {
  Dataset broken = synthetic_dataset(spec(1, 2, 2), 6, 1, "broken");
  broken.pixels.pop_back();  // decode_batch refuses it, on the worker thread
  BatchStream stream(broken, 4, false, 0, Normalization{});
  for (int i = 0; i < 2; ++i) {  // and again on the next call
    try {
      stream.next();
      FAIL("next() did not throw");
    } catch (const Error& e) {
      CHECK(e.code() == ExitCode::Internal);
      CHECK(starts_with(e.what(), "broken: 23 pixel bytes"));
    }
  }
}

TEST_CASE("Fashion-MNIST from Debian's dataset-fashion-mnist", "[data]") {
  if (!fs::exists(kFashionMnistDir)) {
    WARN(kFashionMnistDir << " is absent (Debian package dataset-fashion-mnist): skipped");
    return;
  }
  const Source source = load_source("fashion-mnist", spec(1, 28, 28));
  CHECK(source.train.count() == 60000);
  CHECK(source.train.channels == 1);
  CHECK(source.train.height == 28);
  CHECK(source.train.width == 28);
  CHECK(source.train.pixels.size() == size_t{60000} * 784);
  REQUIRE(source.test.has_value());
  CHECK(source.test->count() == 10000);
  CHECK(source.test->pixels.size() == size_t{10000} * 784);
  std::vector<int64_t> per_class(10);
  for (uint8_t label : source.train.labels) {
    REQUIRE(label < 10);
    ++per_class[label];
  }
  for (uint8_t label : source.test->labels) REQUIRE(label < 10);
  for (int64_t n : per_class) CHECK(n == 6000);  // Fashion-MNIST is balanced

  const std::string m = load_error("fashion-mnist", spec(3, 32, 32), ExitCode::BadData);
  CHECK(m == std::string(kFashionMnistDir) + "/train-images-idx3-ubyte.gz: images are 1x28x28 but the model's input is 3x32x32");
}

TEST_CASE("segmentation: label maps from IDX files and synthetic, and their errors", "[data]") {
  SampleSpec s = spec(1, 2, 3, 4);
  s.label_height = 2, s.label_width = 3;
  SECTION("synthetic: each pixel's label is its channel-0 byte's bucket, 248 and up ignored when asked") {
    // The pixels of the classification test above (seed 5): byte * 4 >> 8.
    Dataset set = synthetic_dataset(s, 3, 5, "synthetic");
    CHECK(set.count() == 3);
    CHECK(set.label_elements == 6);
    CHECK(set.labels == Bytes{3, 3, 2, 2, 3, 3, 1, 2, 0, 3, 3, 0, 3, 1, 0, 0, 0, 1});
    s.ignore_label = 255;
    set = synthetic_dataset(s, 3, 5, "synthetic");
    CHECK(set.labels == Bytes{255, 3, 2, 2, 3, 3, 1, 2, 0, 255, 3, 0, 3, 1, 0, 0, 0, 1});
    Batch b;
    decode_batch(set, {2, 0}, 0, 2, Normalization{}, &b);
    CHECK(b.labels == std::vector<int32_t>{3, 1, 0, 0, 0, 1, 255, 3, 2, 2, 3, 3});
  }
  TempDir dir;
  const std::string img = dir.file("img.idx"), maps = dir.file("maps.idx");
  write_raw(img, idx({2, 2, 3}, image_data(2, 2, 3)));
  SECTION("IDX label maps") {
    write_raw(maps, idx({2, 2, 3}, Bytes{0, 1, 2, 3, 0, 1, 255, 2, 2, 2, 1, 0}));
    std::string m = load_error("idx:" + img + "," + maps, s, ExitCode::BadData);
    CHECK(m == maps + ": label 255 of sample 1 (pixel 0) is outside [0, 4)");
    s.ignore_label = 255;
    const Source source = load_source("idx:" + img + "," + maps, s);
    CHECK(source.train.count() == 2);
    CHECK(source.train.labels.size() == 12);
  }
  SECTION("label maps of another extent, or one label per image") {
    write_raw(maps, idx({2, 3, 2}, Bytes(12, 0)));
    CHECK(load_error("idx:" + img + "," + maps, s, ExitCode::BadData) ==
          maps + ": label maps are 3x2 but the model's logits are 2x3");
    write_raw(maps, idx({2}, Bytes{0, 1}));
    CHECK(starts_with(load_error("idx:" + img + "," + maps, s, ExitCode::BadData), maps + ": not an IDX label maps file"));
    CHECK_THAT(load_error("cifar10:" + dir.file("x"), s, ExitCode::Usage),
               Catch::Contains("holds one label per image; a segmentation model"));
  }
}
