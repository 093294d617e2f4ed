// Classifies the first Fashion-MNIST test images with a compiled LeNet (one batch) and one
// synthetic 32x32 RGB image with a compiled cifar10_full, printing each predicted class.
// The bundled models are untrained: the point is the build, not the accuracy.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <vector>

#include "cifar.h"
#include "lenet.h"
#include "runtime/data/train_data.h"

int main() try {
  // LeNet: one batch of test images per forward call, pixels scaled to [0, 1].
  convgen_model_lenet::Model lenet(LENET_WEIGHTS_FILE);
  convgen::data::SampleSpec spec;  // 1 x 28 x 28, 10 classes
  const convgen::data::Source source = convgen::data::load_source("fashion-mnist", spec);
  const convgen::data::Dataset& test = *source.test;
  const std::vector<int64_t> order = convgen::data::epoch_order(test.count(), 0, false, 0);
  convgen::data::Batch batch;
  const int64_t images = convgen_model_lenet::Model::kInputElements[0] / (28 * 28);
  convgen::data::decode_batch(test, order, 0, images, convgen::data::Normalization{}, &batch);
  std::vector<float> logits(convgen_model_lenet::Model::kOutputElements[0]);
  const float* inputs[] = {batch.pixels.data()};
  float* outputs[] = {logits.data()};
  lenet.forward(inputs, outputs);
  for (int64_t i = 0; i < images; ++i) {
    const float* row = logits.data() + 10 * i;
    std::printf("lenet image %lld: label %d predicted %d\n", static_cast<long long>(i), batch.labels[i],
                int(std::max_element(row, row + 10) - row));
  }

  // cifar10_full at batch 1 on a synthetic image.
  example::cifar::Model cifar(CIFAR_WEIGHTS_FILE);
  std::vector<float> image(example::cifar::Model::kInputElements[0]);
  for (size_t i = 0; i < image.size(); ++i) image[i] = float((i * 37) % 255) / 255.0f;
  std::vector<float> scores(example::cifar::Model::kOutputElements[0]);
  const float* cifar_inputs[] = {image.data()};
  float* cifar_outputs[] = {scores.data()};
  cifar.forward(cifar_inputs, cifar_outputs);
  std::printf("cifar10_full synthetic image: predicted %d\n",
              int(std::max_element(scores.begin(), scores.end()) - scores.begin()));
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "classify: %s\n", e.what());
  return 1;
}
