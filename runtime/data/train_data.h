// Training data for `convgen train`: labelled image sets held in memory as bytes, the
// per-epoch sample order, and batches decoded to float on a background thread.
//
// Sources (the --data SOURCE forms, docs/training.md):
//   fashion-mnist           Debian's dataset-fashion-mnist (gzip IDX, train + test split)
//   idx:IMAGES,LABELS       IDX files, raw or gzip (detected by the gzip magic); for a
//                           segmentation model ([N, K, H, W] logits) LABELS holds label
//                           maps, an IDX file of [N][H][W] bytes
//   cifar10:DIR             the CIFAR-10 binary version (data_batch_1..5.bin, test_batch.bin)
//   synthetic               deterministic pseudo-random bytes of the model's input shape
//                           (a segmentation model's label maps derive from the pixels)
//
// Every data failure (missing file, wrong magic, truncated file, images not of the model's
// input shape, a label outside [0, classes)) is a convgen::Error with ExitCode::BadData
// naming the file, raised by load_source before training starts; a bad SOURCE text is a
// Usage error.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace convgen::data {

// A labelled image set: pixels as bytes, [count][channels][height][width] (CHW, as IDX and
// CIFAR-10 store them), label_elements label bytes per image (one, or a label map).
struct Dataset {
  std::string name;  // for messages: the file or source it came from
  int64_t channels = 0, height = 0, width = 0;
  int64_t label_elements = 1;
  std::vector<uint8_t> pixels;
  std::vector<uint8_t> labels;
  int64_t count() const { return static_cast<int64_t>(labels.size()) / label_elements; }
  int64_t sample_bytes() const { return channels * height * width; }
};

struct Source {
  Dataset train;
  std::optional<Dataset> test;  // fashion-mnist, cifar10, synthetic; none for idx
};

// What the model expects of a sample: its input shape (C, H, W) and the number of classes
// of its logits; synthetic data has `synthetic_count` training samples (seed
// `synthetic_seed`) and a test split of max(1, synthetic_count / 6) (seed synthetic_seed + 1).
struct SampleSpec {
  int64_t channels = 1, height = 28, width = 28;
  int64_t classes = 10;
  // Segmentation: the logits' extent (a label per pixel of it); 0 for a label per image.
  int64_t label_height = 0, label_width = 0;
  // A label value that is no class (PyTorch's ignore_index): allowed in the data, skipped
  // by the loss; -1 for none.
  int ignore_label = -1;
  int64_t label_elements() const { return label_height > 0 ? label_height * label_width : 1; }
  int64_t synthetic_count = 6000;
  uint64_t synthetic_seed = 0;
};

// Where Debian's dataset-fashion-mnist puts its files.
constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";

Source load_source(const std::string& spec, const SampleSpec& sample);

// The synthetic generator, exactly (scripts/torch-train-reference reimplements it):
//   mix(z): z += 0x9E3779B97F4A7C15; z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9;
//           z = (z ^ (z >> 27)) * 0x94D049BB133111EB; return z ^ (z >> 31)   (splitmix64)
//   base = mix(seed); byte j (CHW order) of sample i = mix(base + i * sample_bytes + j) >> 56;
//   label of sample i = (mix(~base + i) >> 32) % classes;
//   segmentation (label_height > 0, the input's extent): pixel p's label = (byte p of
//   channel 0) * classes >> 8, or ignore_label where that byte is 248 or more (when set).
uint64_t mix64(uint64_t z);
Dataset synthetic_dataset(const SampleSpec& sample, int64_t count, uint64_t seed, const std::string& name);

// The order of the samples in epoch `epoch` (0-based): 0..count-1 with shuffle off, else a
// Fisher-Yates shuffle: state = mix(seed ^ mix(epoch + 1)); for i = count-1 down to 1:
// state = mix(state); j = (uint128(state) * (i + 1)) >> 64; swap(order[i], order[j]).
std::vector<int64_t> epoch_order(int64_t count, int64_t epoch, bool shuffle, uint64_t seed);

// Pixel scaling: x / 255, then (x - mean) / std per channel (mean 0, std 1 when not given;
// one value applies to every channel).
struct Normalization {
  std::vector<float> mean{0.0f}, stddev{1.0f};
};
// Parses --normalize "MEAN,STD" or "M1,M2,M3,S1,S2,S3" (one per channel); Usage error
// naming the text when it does not parse or a std is not positive.
Normalization parse_normalization(const std::string& text, int64_t channels);

// A decoded batch: `count` samples, pixels as float in NCHW order, labels as int32
// (label_elements per sample).
struct Batch {
  int64_t epoch = 0, first = 0;  // which epoch, and the position of its first sample in the order
  int64_t count = 0;
  std::vector<float> pixels;
  std::vector<int32_t> labels;
};

// Decodes samples order[first .. first+count) of `set` into `out` (resized to fit; its
// epoch is left alone). Pixel = (static_cast<float>(byte) / 255.0f - mean[c]) / std[c],
// exactly that float expression (scripts/torch-train-reference reproduces it).
// `part`, when given, is the batch's samples [part.first, part.second) to decode (a rank
// of a run over several processes reads only its own); the others are left as they were.
using BatchPart = std::pair<int64_t, int64_t>;
void decode_batch(const Dataset& set, const std::vector<int64_t>& order, int64_t first, int64_t count,
                  const Normalization& norm, Batch* out, BatchPart part = {0, -1});

// Batches of one pass over a data set in a given order per epoch, the next one decoded on a
// background thread while the caller trains on the current one. Batches are
// [first, first + batch) of each epoch's order; an epoch's last batch holds the remainder.
class BatchStream {
 public:
  // Starts at (epoch, position); position must be a multiple of `batch` or 0 (or the
  // set's count: the next epoch's start). Usage error on a bad batch, position or
  // normalization, or an empty set. The worker starts decoding at once.
  // `part` (when set) gives, for a batch of n samples, the part of it to decode.
  BatchStream(const Dataset& set, int64_t batch, bool shuffle, uint64_t seed, Normalization norm,
              int64_t start_epoch = 0, int64_t start_position = 0,
              std::function<BatchPart(int64_t)> part = nullptr);
  ~BatchStream();
  BatchStream(const BatchStream&) = delete;
  BatchStream& operator=(const BatchStream&) = delete;

  // The next batch (blocks until it is decoded); the previous one returned is recycled.
  // Endless: after an epoch's last batch comes the next epoch's first. One caller thread.
  // Rethrows what stopped the worker, if anything did.
  const Batch& next();
  // The order of an epoch (for --dump-order).
  std::vector<int64_t> order(int64_t epoch) const;
  int64_t batches_per_epoch() const;

 private:
  void run();                  // the worker thread: decode into the free slot, repeat
  void decode_next(Batch* out);  // the batch at (epoch_, position_), then advance

  const Dataset& set_;  // not owned: must outlive the stream
  const int64_t batch_;
  const bool shuffle_;
  const uint64_t seed_;
  const Normalization norm_;
  const std::function<BatchPart(int64_t)> part_;
  // The worker's alone once it runs: where the next batch to decode starts.
  int64_t epoch_, position_;
  std::vector<int64_t> order_;  // of epoch_
  // Handshake, under mutex_. A slot is written by the worker only while it is neither
  // ready_slot_ nor held_slot_, so the caller reads its batch without the lock.
  Batch slots_[2];
  int ready_slot_ = -1;  // decoded, not yet handed out
  int held_slot_ = -1;   // handed out by the last next()
  bool stop_ = false;
  std::exception_ptr error_;  // what ended the worker, rethrown by next()
  std::mutex mutex_;
  std::condition_variable cv_;
  std::thread worker_;  // last: starts once everything above is initialised
};

}  // namespace convgen::data
