// A few hundred SGD steps of LeNet on Fashion-MNIST through a generated training driver,
// then the test accuracy over the whole test split; the trained weights and a checkpoint
// saved into OUT_DIR, and the weights loaded again into a second trainer.
//   train [STEPS] [THREADS] [OUT_DIR]
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include "lenet_trainer.h"
#include "runtime/data/train_data.h"

namespace lenet = convgen_model_lenet_trainer;

int main(int argc, char** argv) try {
  const int64_t steps = argc > 1 ? std::atoll(argv[1]) : 300;
  lenet::TrainOptions options;
  options.lr = 0.01f;
  options.momentum = 0.9f;
  options.threads = argc > 2 ? std::atoi(argv[2]) : 2;
  lenet::Trainer trainer(LENET_TRAINER_WEIGHTS_FILE, options);

  convgen::data::SampleSpec spec;
  const convgen::data::Source source = convgen::data::load_source("fashion-mnist", spec);
  const convgen::data::Dataset& train_set = source.train;
  convgen::data::Batch batch;
  double first_loss = 0.0, last_loss = 0.0;
  int64_t epoch = 0, position = 0;
  std::vector<int64_t> order = convgen::data::epoch_order(train_set.count(), epoch, true, 1);
  for (int64_t step = 0; step < steps; ++step) {
    const int64_t count = std::min<int64_t>(lenet::kBatch, train_set.count() - position);
    convgen::data::decode_batch(train_set, order, position, count, convgen::data::Normalization{}, &batch);
    const convgen::model::StepStats s = trainer.train_step(batch.pixels.data(), batch.labels.data(), count);
    if (step == 0) first_loss = s.loss;
    last_loss = s.loss;
    if (step % 100 == 0) std::printf("step %lld loss %.4f\n", static_cast<long long>(step), s.loss);
    position += count;
    if (position == train_set.count()) {
      position = 0;
      order = convgen::data::epoch_order(train_set.count(), ++epoch, true, 1);
    }
  }
  std::printf("first loss %.4f last loss %.4f\n", first_loss, last_loss);

  // Test accuracy over the whole test split (its last batch is partial: 10000 mod 64).
  const convgen::data::Dataset& test = *source.test;
  const std::vector<int64_t> test_order = convgen::data::epoch_order(test.count(), 0, false, 0);
  int64_t correct = 0;
  for (int64_t first = 0; first < test.count(); first += lenet::kBatch) {
    const int64_t count = std::min<int64_t>(lenet::kBatch, test.count() - first);
    convgen::data::decode_batch(test, test_order, first, count, convgen::data::Normalization{}, &batch);
    correct += trainer.evaluate(batch.pixels.data(), batch.labels.data(), count).correct;
  }
  std::printf("test accuracy %.4f\n", double(correct) / double(test.count()));

  // Save: the trained weights (a weights file the constructor reads) and a checkpoint
  // with momentum, step count and our place in the data, to continue exactly later.
  const std::string out_dir = argc > 3 ? argv[3] : ".";
  trainer.save_weights(out_dir + "/lenet_trained.weights");
  trainer.save_checkpoint(out_dir + "/checkpoint", epoch, position);
  lenet::Trainer reloaded(out_dir + "/lenet_trained.weights", options);
  int64_t reloaded_correct = 0;
  for (int64_t first = 0; first < test.count(); first += lenet::kBatch) {
    const int64_t count = std::min<int64_t>(lenet::kBatch, test.count() - first);
    convgen::data::decode_batch(test, test_order, first, count, convgen::data::Normalization{}, &batch);
    reloaded_correct += reloaded.evaluate(batch.pixels.data(), batch.labels.data(), count).correct;
  }
  std::printf("reloaded test accuracy %.4f\n", double(reloaded_correct) / double(test.count()));
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "train: %s\n", e.what());
  return 1;
}
