// Gradients summed over micro-batches by the fixed tree, then the SGD update.
#include "runtime/train/trainer_impl.h"

#include <algorithm>

#include <omp.h>

#include "runtime/ops/ops.h"
#include "runtime/ops/tensor.h"
#include "runtime/train/train_conv.h"
#include "runtime/train/train_ops.h"

namespace convgen::model {

void Trainer::Impl::reduce_and_update(int64_t micro) {
  constexpr int64_t chunk = 16384;
  struct Work {
    int p;
    int64_t begin, end;
  };
  std::vector<Work> work;
  for (size_t p = 0; p < parameters.size(); ++p)
    for (int64_t b = 0; b < static_cast<int64_t>(parameters[p].value.size()); b += chunk)
      work.push_back({static_cast<int>(p), b, std::min<int64_t>(b + chunk, parameters[p].value.size())});
  const bool first = steps == 0;
#pragma omp parallel num_threads(options.threads)
  {
    std::vector<float> expanded;  // a cropped layer's chunk of weight gradient, cache-resident
    std::vector<float*> grads(static_cast<size_t>(micro));
#pragma omp for schedule(static)
    for (size_t i = 0; i < work.size(); ++i) {
      const Work& w = work[i];
      Parameter& par = parameters[w.p];
      if (const ConvLayer* L = cropped_gradient_of[w.p]) {
        expanded.resize(static_cast<size_t>(w.end - w.begin));
        expand_weight_gradient_elements(L->full, L->taps, L->cropped_dw.data(), w.begin, w.end, expanded.data());
        ops::sgd_update(par.value.data() + w.begin, par.momentum.data() + w.begin, expanded.data(), 0,
                        w.end - w.begin, options.lr, options.momentum, options.weight_decay, first);
        continue;
      }
      const float* g = deferred_param[w.p] ? deferred_grad[w.p].data() : nullptr;
      if (!g) {
        for (int64_t s = 0; s < micro; ++s) grads[s] = slots[s].param_grad[w.p].data();
        ops::tree_sum(grads.data(), micro, w.begin, w.end);
        g = grads[0];
      }
      ops::sgd_update(par.value.data(), par.momentum.data(), g, w.begin, w.end, options.lr, options.momentum,
                      options.weight_decay, first);
    }
  }
  ++steps;
}

}  // namespace convgen::model
