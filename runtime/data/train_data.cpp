#include "runtime/data/train_data.h"

#include "runtime/ops/splitmix64.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <utility>

#include "schedules/errors.h"

namespace convgen::data {

namespace {

Error bad_data(const std::string& file, const std::string& what) { return Error(ExitCode::BadData, file + ": " + what); }

std::string shape_text(int64_t c, int64_t h, int64_t w) {
  return std::to_string(c) + "x" + std::to_string(h) + "x" + std::to_string(w);
}

std::string hex32(uint32_t v) {
  char text[16];
  std::snprintf(text, sizeof text, "0x%08x", v);
  return text;
}

// --- reading files -------------------------------------------------------------------

// A file's bytes, gunzipped if it is gzip. zlib's gzread does the detection itself: it
// inflates when the file starts with the gzip magic 0x1f 0x8b and copies it otherwise.
std::vector<uint8_t> read_file(const std::string& path) {
  errno = 0;
  gzFile file = gzopen(path.c_str(), "rb");
  if (!file) throw bad_data(path, std::string("cannot open (") + (errno ? std::strerror(errno) : "out of memory") + ")");
  gzbuffer(file, 1 << 17);
  std::vector<uint8_t> bytes;
  constexpr size_t kChunk = 1 << 20;
  for (;;) {
    const size_t size = bytes.size();
    bytes.resize(size + kChunk);
    const int got = gzread(file, bytes.data() + size, kChunk);
    if (got < 0) {
      int code = 0;
      const std::string message = gzerror(file, &code);
      gzclose(file);
      throw bad_data(path, code == Z_ERRNO ? "read error (" + std::string(std::strerror(errno)) + ")"
                                           : "corrupt gzip data (" + message + ")");
    }
    bytes.resize(size + static_cast<size_t>(got));
    if (got == 0) break;
  }
  // A gzip stream cut short reads as a short file with Z_BUF_ERROR left behind.
  int code = 0;
  gzerror(file, &code);
  gzclose(file);
  if (code == Z_BUF_ERROR) throw bad_data(path, "truncated gzip data");
  if (code != Z_OK) throw bad_data(path, "read error");
  return bytes;
}

// --- IDX -----------------------------------------------------------------------------

constexpr uint32_t kIdxImages = 0x00000803;  // unsigned bytes, 3 dimensions
constexpr uint32_t kIdxLabels = 0x00000801;  // unsigned bytes, 1 dimension

uint32_t big_endian32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

// The dimensions of an IDX file of unsigned bytes whose magic must be `magic`; checks that
// the data after the header is exactly their product. The data starts at 4 + 4 * ndims.
std::vector<int64_t> parse_idx(const std::string& path, const std::vector<uint8_t>& bytes, uint32_t magic,
                               const char* what) {
  if (bytes.size() < 4) throw bad_data(path, "truncated IDX header (" + std::to_string(bytes.size()) + " bytes)");
  const uint32_t found = big_endian32(bytes.data());
  if (found != magic)
    throw bad_data(path, "not an IDX " + std::string(what) + " file (magic " + hex32(found) + ", expected " +
                             hex32(magic) + ")");
  const size_t ndims = magic & 0xff;
  const size_t header = 4 + 4 * ndims;
  if (bytes.size() < header) throw bad_data(path, "truncated IDX header (" + std::to_string(bytes.size()) + " bytes)");
  std::vector<int64_t> dims;
  // The product saturates at 2^62: any bigger claim is truncation all the same.
  constexpr uint64_t kHuge = uint64_t{1} << 62;
  uint64_t payload = 1;
  for (size_t d = 0; d < ndims; ++d) {
    const uint64_t dim = big_endian32(bytes.data() + 4 + 4 * d);
    dims.push_back(static_cast<int64_t>(dim));
    payload = (dim != 0 && payload > kHuge / dim) ? kHuge : payload * dim;
  }
  const uint64_t have = bytes.size() - header;
  if (have < payload)
    throw bad_data(path, "truncated: the header promises " + std::to_string(payload) + " bytes of data, the file holds " +
                             std::to_string(have));
  if (have > payload)
    throw bad_data(path, std::to_string(have - payload) + " bytes of trailing data after the " + what);
  if (dims[0] == 0) throw bad_data(path, std::string("holds no ") + what);
  return dims;
}

// --- validation against the model ----------------------------------------------------

void check_shape(const std::string& file, int64_t c, int64_t h, int64_t w, const SampleSpec& sample) {
  if (c != sample.channels || h != sample.height || w != sample.width)
    throw bad_data(file, "images are " + shape_text(c, h, w) + " but the model's input is " +
                             shape_text(sample.channels, sample.height, sample.width));
}

// Labels [first, end) of `labels` came from `file`, whose sample 0 is labels[first].
void check_labels(const std::string& file, const std::vector<uint8_t>& labels, size_t first, const SampleSpec& sample) {
  const auto per_sample = static_cast<size_t>(sample.label_elements());
  for (size_t i = first; i < labels.size(); ++i)
    if (labels[i] >= sample.classes && labels[i] != sample.ignore_label)
      throw bad_data(file, "label " + std::to_string(labels[i]) + " of sample " + std::to_string((i - first) / per_sample) +
                               (per_sample > 1 ? " (pixel " + std::to_string((i - first) % per_sample) + ")" : "") +
                               " is outside [0, " + std::to_string(sample.classes) + ")" +
                               (sample.ignore_label >= 0 ? " and is not the ignored label " +
                                                               std::to_string(sample.ignore_label) : ""));
}

Dataset load_idx(const std::string& images_path, const std::string& labels_path, const SampleSpec& sample) {
  Dataset set;
  set.name = images_path;
  std::vector<uint8_t> images = read_file(images_path);
  const std::vector<int64_t> idims = parse_idx(images_path, images, kIdxImages, "images");
  set.channels = 1;
  set.height = idims[1];
  set.width = idims[2];
  check_shape(images_path, set.channels, set.height, set.width, sample);

  // A segmentation model's labels are label maps: an IDX file of [N][H][W] bytes.
  const bool maps = sample.label_height > 0;
  std::vector<uint8_t> labels = read_file(labels_path);
  const std::vector<int64_t> ldims =
      parse_idx(labels_path, labels, maps ? kIdxImages : kIdxLabels, maps ? "label maps" : "labels");
  if (ldims[0] != idims[0])
    throw bad_data(labels_path, std::to_string(ldims[0]) + (maps ? " label maps" : " labels") + " but " + images_path +
                                    " holds " + std::to_string(idims[0]) + " images");
  if (maps && (ldims[1] != sample.label_height || ldims[2] != sample.label_width))
    throw bad_data(labels_path, "label maps are " + std::to_string(ldims[1]) + "x" + std::to_string(ldims[2]) +
                                    " but the model's logits are " + std::to_string(sample.label_height) + "x" +
                                    std::to_string(sample.label_width));
  set.label_elements = sample.label_elements();
  set.labels.assign(labels.begin() + (maps ? 16 : 8), labels.end());
  check_labels(labels_path, set.labels, 0, sample);
  images.erase(images.begin(), images.begin() + 16);  // the header: magic and 3 dimensions
  set.pixels = std::move(images);
  return set;
}

// --- CIFAR-10 ------------------------------------------------------------------------

constexpr int64_t kCifarChannels = 3, kCifarSide = 32;
constexpr size_t kCifarPixels = kCifarChannels * kCifarSide * kCifarSide;
constexpr size_t kCifarRecord = 1 + kCifarPixels;  // label byte, then R, G, B planes (CHW)

// Appends the records of one CIFAR-10 batch file to `set`.
void append_cifar_file(const std::string& path, const SampleSpec& sample, Dataset* set) {
  const std::vector<uint8_t> bytes = read_file(path);
  if (bytes.empty() || bytes.size() % kCifarRecord != 0)
    throw bad_data(path, std::to_string(bytes.size()) + " bytes is not a whole number of " +
                             std::to_string(kCifarRecord) + "-byte CIFAR-10 records");
  check_shape(path, kCifarChannels, kCifarSide, kCifarSide, sample);
  const size_t records = bytes.size() / kCifarRecord, first = set->labels.size();
  set->labels.reserve(first + records);
  set->pixels.reserve((first + records) * kCifarPixels);
  for (size_t r = 0; r < records; ++r) {
    const uint8_t* record = bytes.data() + r * kCifarRecord;
    set->labels.push_back(record[0]);
    set->pixels.insert(set->pixels.end(), record + 1, record + kCifarRecord);
  }
  check_labels(path, set->labels, first, sample);
}

Dataset load_cifar(const std::filesystem::path& dir, const std::vector<std::string>& files, const std::string& name,
                   const SampleSpec& sample) {
  Dataset set;
  set.name = name;
  set.channels = kCifarChannels;
  set.height = set.width = kCifarSide;
  for (const std::string& file : files) append_cifar_file((dir / file).string(), sample, &set);
  return set;
}

Source load_cifar_dir(const std::string& dir_text, const SampleSpec& sample) {
  const std::filesystem::path dir(dir_text);
  std::vector<std::string> train_files;
  for (int i = 1; i <= 5; ++i) train_files.push_back("data_batch_" + std::to_string(i) + ".bin");
  Source source;
  source.train = load_cifar(dir, train_files, (dir / "data_batch_1..5.bin").string(), sample);
  source.test = load_cifar(dir, {"test_batch.bin"}, (dir / "test_batch.bin").string(), sample);
  return source;
}

// --- the rest ------------------------------------------------------------------------

Source load_fashion_mnist(const SampleSpec& sample) {
  const std::string dir = std::string(kFashionMnistDir) + "/";
  // Without the package the first file is missing: say which package provides it.
  if (!std::filesystem::exists(dir + "train-images-idx3-ubyte.gz"))
    throw bad_data(dir + "train-images-idx3-ubyte.gz", "cannot open (install the Debian package dataset-fashion-mnist)");
  Source source;
  source.train = load_idx(dir + "train-images-idx3-ubyte.gz", dir + "train-labels-idx1-ubyte.gz", sample);
  source.test = load_idx(dir + "t10k-images-idx3-ubyte.gz", dir + "t10k-labels-idx1-ubyte.gz", sample);
  return source;
}

Error unknown_source(const std::string& spec) {
  return Error(ExitCode::Usage, "unknown data source '" + spec +
                                    "': expected fashion-mnist, idx:IMAGES,LABELS, cifar10:DIR or synthetic");
}

bool starts_with(const std::string& text, const std::string& prefix) { return text.rfind(prefix, 0) == 0; }

// A finite float filling all of `text`, or nothing.
std::optional<float> parse_float(const std::string& text) {
  if (text.empty() || std::isspace(static_cast<unsigned char>(text[0]))) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const float value = std::strtof(text.c_str(), &end);
  if (end != text.c_str() + text.size() || errno == ERANGE || !std::isfinite(value)) return std::nullopt;
  return value;
}

std::vector<std::string> split(const std::string& text, char separator) {
  std::vector<std::string> parts;
  size_t start = 0;
  for (;;) {
    const size_t end = text.find(separator, start);
    parts.push_back(text.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) return parts;
    start = end + 1;
  }
}

}  // namespace

Source load_source(const std::string& spec, const SampleSpec& sample) {
  if (sample.label_height > 0 && (spec == "fashion-mnist" || starts_with(spec, "cifar10:")))
    throw Error(ExitCode::Usage, "--data " + spec + " holds one label per image; a segmentation model (a label per "
                                 "pixel) trains on idx:IMAGES,LABEL_MAPS or synthetic");
  if (spec == "fashion-mnist") return load_fashion_mnist(sample);
  if (spec == "synthetic") {
    Source source;
    source.train = synthetic_dataset(sample, sample.synthetic_count, sample.synthetic_seed, "synthetic");
    source.test = synthetic_dataset(sample, std::max<int64_t>(1, sample.synthetic_count / 6), sample.synthetic_seed + 1,
                                    "synthetic test");
    return source;
  }
  if (starts_with(spec, "idx:")) {
    const std::string files = spec.substr(4);
    const size_t comma = files.find(',');
    if (comma == std::string::npos || comma == 0 || comma + 1 == files.size()) throw unknown_source(spec);
    Source source;
    source.train = load_idx(files.substr(0, comma), files.substr(comma + 1), sample);
    return source;
  }
  if (starts_with(spec, "cifar10:") && spec.size() > 8) return load_cifar_dir(spec.substr(8), sample);
  throw unknown_source(spec);
}

uint64_t mix64(uint64_t z) { return splitmix64(z); }

Dataset synthetic_dataset(const SampleSpec& sample, int64_t count, uint64_t seed, const std::string& name) {
  if (count < 1) throw Error(ExitCode::Usage, name + ": the synthetic data set needs at least one sample");
  // Labels are bytes, as in every other source.
  if (sample.classes < 1 || sample.classes > 256)
    throw Error(ExitCode::Unsupported, name + ": synthetic labels need 1 to 256 classes, the model has " +
                                           std::to_string(sample.classes));
  const bool maps = sample.label_height > 0;
  if (maps && (sample.label_height != sample.height || sample.label_width != sample.width))
    throw Error(ExitCode::Unsupported,
                name + ": synthetic label maps are the input's " + std::to_string(sample.height) + "x" +
                    std::to_string(sample.width) + " pixels, the model's logits are " +
                    std::to_string(sample.label_height) + "x" + std::to_string(sample.label_width));
  Dataset set;
  set.name = name;
  set.channels = sample.channels;
  set.height = sample.height;
  set.width = sample.width;
  set.label_elements = sample.label_elements();
  const uint64_t base = mix64(seed), bytes = static_cast<uint64_t>(set.sample_bytes());
  const uint64_t plane = static_cast<uint64_t>(set.height * set.width);
  set.pixels.resize(static_cast<size_t>(count) * bytes);
  set.labels.resize(static_cast<size_t>(count * set.label_elements));
  for (uint64_t i = 0; i < static_cast<uint64_t>(count); ++i) {
    uint8_t* pixels = set.pixels.data() + i * bytes;
    for (uint64_t j = 0; j < bytes; ++j) pixels[j] = static_cast<uint8_t>(mix64(base + i * bytes + j) >> 56);
    if (!maps) {
      set.labels[i] = static_cast<uint8_t>((mix64(~base + i) >> 32) % static_cast<uint64_t>(sample.classes));
      continue;
    }
    // A learnable map: each pixel's class is its channel-0 byte's bucket.
    for (uint64_t p = 0; p < plane; ++p)
      set.labels[i * plane + p] = sample.ignore_label >= 0 && pixels[p] >= 248
                                      ? static_cast<uint8_t>(sample.ignore_label)
                                      : static_cast<uint8_t>((uint32_t{pixels[p]} * uint32_t(sample.classes)) >> 8);
  }
  return set;
}

std::vector<int64_t> epoch_order(int64_t count, int64_t epoch, bool shuffle, uint64_t seed) {
  std::vector<int64_t> order(static_cast<size_t>(std::max<int64_t>(count, 0)));
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int64_t>(i);
  if (!shuffle) return order;
  uint64_t state = mix64(seed ^ mix64(static_cast<uint64_t>(epoch) + 1));
  for (int64_t i = count - 1; i >= 1; --i) {
    state = mix64(state);
    // Multiply-high maps the state onto [0, i] without the bias of a modulo.
    const auto j = static_cast<int64_t>((static_cast<unsigned __int128>(state) * static_cast<uint64_t>(i + 1)) >> 64);
    std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(j)]);
  }
  return order;
}

Normalization parse_normalization(const std::string& text, int64_t channels) {
  const std::string expected = "--normalize '" + text + "': expected MEAN,STD or " + std::to_string(channels) +
                               " means then " + std::to_string(channels) + " stds, comma-separated";
  std::vector<float> values;
  for (const std::string& part : split(text, ',')) {
    const std::optional<float> value = parse_float(part);
    if (!value) throw Error(ExitCode::Usage, expected);
    values.push_back(*value);
  }
  if (values.size() != 2 && values.size() != static_cast<size_t>(2 * channels)) throw Error(ExitCode::Usage, expected);
  Normalization norm;
  const size_t half = values.size() / 2;
  norm.mean.assign(values.begin(), values.begin() + half);
  norm.stddev.assign(values.begin() + half, values.end());
  for (float s : norm.stddev)
    if (!(s > 0.0f)) throw Error(ExitCode::Usage, "--normalize '" + text + "': a std must be positive");
  return norm;
}

void decode_batch(const Dataset& set, const std::vector<int64_t>& order, int64_t first, int64_t count,
                  const Normalization& norm, Batch* out, BatchPart part) {
  const auto channels = static_cast<size_t>(set.channels);
  const auto fits = [&](const std::vector<float>& v) { return v.size() == 1 || v.size() == channels; };
  if (!fits(norm.mean) || !fits(norm.stddev))
    throw Error(ExitCode::Usage, set.name + ": the normalization has " + std::to_string(norm.mean.size()) + " means and " +
                                     std::to_string(norm.stddev.size()) + " stds for " + std::to_string(channels) +
                                     " channels");
  if (first < 0 || count < 0 || first + count > static_cast<int64_t>(order.size()))
    throw Error(ExitCode::Internal, set.name + ": batch [" + std::to_string(first) + ", " + std::to_string(first + count) +
                                        ") is outside the order of " + std::to_string(order.size()) + " samples");
  if (set.pixels.size() != static_cast<size_t>(set.count() * set.sample_bytes()))
    throw Error(ExitCode::Internal, set.name + ": " + std::to_string(set.pixels.size()) + " pixel bytes for " +
                                        std::to_string(set.count()) + " samples of " +
                                        std::to_string(set.sample_bytes()) + " bytes");
  // Every byte value's float, per channel: the same expression, evaluated once per value.
  std::vector<float> table(channels * 256);
  for (size_t c = 0; c < channels; ++c) {
    const float mean = norm.mean[norm.mean.size() == 1 ? 0 : c];
    const float stddev = norm.stddev[norm.stddev.size() == 1 ? 0 : c];
    for (int b = 0; b < 256; ++b) table[c * 256 + b] = (static_cast<float>(b) / 255.0f - mean) / stddev;
  }
  const auto bytes = static_cast<size_t>(set.sample_bytes()), plane = bytes / std::max<size_t>(channels, 1);
  out->first = first;
  out->count = count;
  out->pixels.resize(static_cast<size_t>(count) * bytes);
  const auto label_elements = static_cast<size_t>(set.label_elements);
  out->labels.resize(static_cast<size_t>(count) * label_elements);
  const int64_t part_end = part.second < 0 ? count : std::min(part.second, count);
  for (int64_t k = std::max<int64_t>(part.first, 0); k < part_end; ++k) {
    const int64_t sample = order[static_cast<size_t>(first + k)];
    if (sample < 0 || sample >= set.count())
      throw Error(ExitCode::Internal, set.name + ": sample " + std::to_string(sample) + " is out of range");
    const uint8_t* in = set.pixels.data() + static_cast<size_t>(sample) * bytes;
    float* dst = out->pixels.data() + static_cast<size_t>(k) * bytes;
    for (size_t c = 0; c < channels; ++c) {
      const float* lut = table.data() + c * 256;
      for (size_t p = 0; p < plane; ++p) dst[c * plane + p] = lut[in[c * plane + p]];
    }
    std::copy_n(set.labels.begin() + static_cast<ptrdiff_t>(static_cast<size_t>(sample) * label_elements), label_elements,
                out->labels.begin() + static_cast<ptrdiff_t>(static_cast<size_t>(k) * label_elements));
  }
}

// --- BatchStream -----------------------------------------------------------------------

BatchStream::BatchStream(const Dataset& set, int64_t batch, bool shuffle, uint64_t seed, Normalization norm,
                         int64_t start_epoch, int64_t start_position, std::function<BatchPart(int64_t)> part)
    : set_(set),
      batch_(batch),
      shuffle_(shuffle),
      seed_(seed),
      norm_(std::move(norm)),
      part_(std::move(part)),
      epoch_(start_epoch),
      position_(start_position) {
  if (batch_ < 1) throw Error(ExitCode::Usage, "the batch size must be positive, not " + std::to_string(batch_));
  if (set_.count() == 0) throw Error(ExitCode::Usage, set_.name + ": no samples to train on");
  const auto channels = static_cast<size_t>(set_.channels);
  for (const std::vector<float>* v : {&norm_.mean, &norm_.stddev})
    if (v->size() != 1 && v->size() != channels)
      throw Error(ExitCode::Usage, set_.name + ": the normalization needs 1 or " + std::to_string(channels) +
                                       " values per statistic, not " + std::to_string(v->size()));
  if (epoch_ < 0 || position_ < 0 || position_ > set_.count() || (position_ % batch_ != 0 && position_ != set_.count()))
    throw Error(ExitCode::Usage, "cannot start at epoch " + std::to_string(epoch_) + ", sample " +
                                     std::to_string(position_) + " with batches of " + std::to_string(batch_) +
                                     " over " + std::to_string(set_.count()) + " samples");
  if (position_ == set_.count()) {  // the end of an epoch is the start of the next
    ++epoch_;
    position_ = 0;
  }
  order_ = epoch_order(set_.count(), epoch_, shuffle_, seed_);
  worker_ = std::thread([this] { run(); });
}

BatchStream::~BatchStream() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  worker_.join();
}

const Batch& BatchStream::next() {
  std::unique_lock<std::mutex> lock(mutex_);
  cv_.wait(lock, [this] { return ready_slot_ != -1 || error_; });
  if (ready_slot_ == -1) std::rethrow_exception(error_);
  // Taking the ready slot frees the one held so far: the worker may now decode into it.
  const int slot = ready_slot_;
  held_slot_ = slot;
  ready_slot_ = -1;
  lock.unlock();
  cv_.notify_all();
  return slots_[slot];
}

std::vector<int64_t> BatchStream::order(int64_t epoch) const { return epoch_order(set_.count(), epoch, shuffle_, seed_); }

int64_t BatchStream::batches_per_epoch() const { return (set_.count() + batch_ - 1) / batch_; }

void BatchStream::decode_next(Batch* out) {
  const int64_t count = std::min(batch_, set_.count() - position_);
  decode_batch(set_, order_, position_, count, norm_, out, part_ ? part_(count) : BatchPart{0, -1});
  out->epoch = epoch_;
  position_ += count;
  if (position_ == set_.count()) {
    ++epoch_;
    position_ = 0;
    order_ = epoch_order(set_.count(), epoch_, shuffle_, seed_);
  }
}

void BatchStream::run() {
  try {
    for (;;) {
      int slot = 0;
      {
        // Wait until the batch decoded last has been taken (or we are told to stop).
        std::unique_lock<std::mutex> lock(mutex_);
        cv_.wait(lock, [this] { return stop_ || ready_slot_ == -1; });
        if (stop_) return;
        slot = held_slot_ == 0 ? 1 : 0;  // the slot the caller is not reading
      }
      decode_next(&slots_[slot]);  // outside the lock: the caller trains meanwhile
      {
        std::lock_guard<std::mutex> lock(mutex_);
        ready_slot_ = slot;
      }
      cv_.notify_all();
    }
  } catch (...) {
    // Nothing escapes the thread: next() rethrows it.
    {
      std::lock_guard<std::mutex> lock(mutex_);
      error_ = std::current_exception();
    }
    cv_.notify_all();
  }
}

}  // namespace convgen::data
