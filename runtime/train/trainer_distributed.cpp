// The trainer across processes (docs/distributed.md): what crosses ranks, and the tree
// finished over every rank's nodes. The collectives only copy bytes and add integers;
// every floating-point sum is the one a single process makes.
#include "runtime/train/trainer_impl.h"

#include <algorithm>
#include <exception>

#include <omp.h>

#include "runtime/parallel/pairwise_tree.h"
#include "runtime/train/train_ops.h"

namespace convgen::model {

std::pair<int64_t, int64_t> Trainer::Impl::samples_of_rank(int64_t count, int rank) const {
  const int64_t micro = (count + m - 1) / m;
  const auto [b, e] = rank_range(micro, rank, group ? group->size() : 1);
  return {std::min(b * m, count), std::min(e * m, count)};
}

std::vector<int64_t> Trainer::Impl::bytes_per_rank(int64_t bytes_per_micro_batch) const {
  std::vector<int64_t> bytes;
  for (int r = 0; r < group->size(); ++r) {
    const auto [b, e] = rank_range(active, r, group->size());
    bytes.push_back((e - b) * bytes_per_micro_batch);
  }
  return bytes;
}

void Trainer::Impl::share_samples(float* base, int64_t sample_elements) {
  const int ranks = group->size();
  std::vector<int64_t> bytes(static_cast<size_t>(ranks));
  for (int r = 0; r < ranks; ++r) {
    const auto [b, e] = samples_of_rank(batch_count, r);
    bytes[static_cast<size_t>(r)] = (e - b) * sample_elements * int64_t(sizeof(float));
  }
  const int64_t mine = samples_of_rank(batch_count, group->rank()).first;
  group->allgather(base + mine * sample_elements, base, bytes);
}

void Trainer::Impl::share_bn_partials(size_t node) {
  const int x = id(tg.graph.nodes[node].inputs[0]);
  const auto size = static_cast<size_t>(2 * values[x].shape[1]);  // both sums per channel
  std::vector<double> all(static_cast<size_t>(active) * size);
  for (int64_t i = own_begin; i < own_end; ++i) std::copy_n(slots[i].bn_partial[node].begin(), size, all.begin() + i * size);
  group->allgather(all.data() + own_begin * size, all.data(), bytes_per_rank(int64_t(size * sizeof(double))));
  for (int64_t i = 0; i < active; ++i) {
    Slot& slot = slots[i];
    if (slot.bn_partial.size() < tg.graph.nodes.size()) slot.bn_partial.resize(tg.graph.nodes.size());
    slot.bn_partial[node].assign(all.begin() + i * size, all.begin() + (i + 1) * size);
  }
}

void Trainer::Impl::share_whole_batch_inputs(const std::vector<size_t>& layers) {
  for (size_t node : layers) {
    const ConvLayer& L = conv_layers.at(node);
    const Node& n = tg.graph.nodes[node];
    const int x = id(n.inputs[0]), y = id(n.outputs[0]);
    // A batched layer's input and output gradient were shared at its barriers, its output
    // computed whole on every rank.
    if (L.batched) continue;
    share_samples(batch_act[x].data(), values[x].sample_elements);
    share_samples(batch_grad[y].data(), values[y].sample_elements);
    if (n.attributes.fused_relu) share_samples(batch_act[y].data(), values[y].sample_elements);
  }
}

void Trainer::Impl::reduce_gradients_across_ranks() {
  const int ranks = group->size(), me = group->rank();
  // The parameters whose gradient the micro-batches hold: not a Gemm's nor a whole-batch
  // layer's, which every rank computed over the whole mini-batch.
  std::vector<int> params;
  for (size_t p = 0; p < parameters.size(); ++p)
    if (!deferred_param[p] && !cropped_gradient_of[p]) params.push_back(static_cast<int>(p));
  if (reduced_grad.size() < parameters.size()) reduced_grad.resize(parameters.size());

  std::vector<std::vector<TreeNode>> nodes_of(static_cast<size_t>(ranks));
  for (int r = 0; r < ranks; ++r) {
    const auto [b, e] = rank_range(active, r, ranks);
    nodes_of[static_cast<size_t>(r)] = nodes_within(active, b, e);
  }
  const std::vector<TreeNode>& mine = nodes_of[static_cast<size_t>(me)];

  // This rank's nodes: each node's slots summed by the tree into its first slot (a node's
  // first slot is a multiple of its span, so its subtree is tree_sum's over its slots).
  struct Work {
    int p;
    size_t node;
  };
  std::vector<Work> work;
  for (int p : params)
    for (size_t k = 0; k < mine.size(); ++k) work.push_back({p, k});
  std::exception_ptr failure;
#pragma omp parallel for schedule(dynamic, 1) num_threads(options.threads)
  for (size_t j = 0; j < work.size(); ++j) try {
    const int p = work[j].p;
    const TreeNode& nd = mine[work[j].node];
    const int64_t end = std::min(nd.first + nd.span, active), n = int64_t(parameters[p].value.size());
    std::vector<float*> grads;
    for (int64_t s = nd.first; s < end; ++s) {
      float* g = slots[s].param_grad[p].data();
      if (!slots[s].param_written[p]) std::fill(g, g + n, 0.0f);  // no gradient reached it: zeros
      grads.push_back(g);
    }
    ops::tree_sum(grads.data(), end - nd.first, 0, n);
  } catch (...) {
#pragma omp critical(convgen_reduce_failure)
    if (!failure) failure = std::current_exception();
  }
  if (failure) std::rethrow_exception(failure);

  // Element chunk c of every parameter belongs to rank c. To each owner, this rank's node
  // values of its chunks: parameter by parameter, node by node.
  auto chunk = [&](int p, int owner) { return rank_range(int64_t(parameters[p].value.size()), owner, ranks); };
  std::vector<int64_t> send_bytes(static_cast<size_t>(ranks), 0), recv_bytes(static_cast<size_t>(ranks), 0);
  int64_t my_chunk_floats = 0;
  for (int p : params) {
    const auto [b, e] = chunk(p, me);
    my_chunk_floats += e - b;
    for (int r = 0; r < ranks; ++r) {
      const auto [rb, re] = chunk(p, r);
      send_bytes[static_cast<size_t>(r)] += (re - rb) * int64_t(mine.size() * sizeof(float));
      recv_bytes[static_cast<size_t>(r)] += (e - b) * int64_t(nodes_of[static_cast<size_t>(r)].size() * sizeof(float));
    }
  }
  int64_t send_total = 0, recv_total = 0;
  for (int r = 0; r < ranks; ++r) send_total += send_bytes[r], recv_total += recv_bytes[r];
  std::vector<float> send(static_cast<size_t>(send_total / int64_t(sizeof(float))));
  std::vector<float> recv(static_cast<size_t>(recv_total / int64_t(sizeof(float))));
  {
    size_t at = 0;
    for (int r = 0; r < ranks; ++r)
      for (int p : params) {
        const auto [rb, re] = chunk(p, r);
        for (const TreeNode& nd : mine) {
          const float* g = slots[nd.first].param_grad[p].data();
          at = static_cast<size_t>(std::copy(g + rb, g + re, send.begin() + static_cast<ptrdiff_t>(at)) - send.begin());
        }
      }
  }
  group->alltoall(send.data(), send_bytes, recv.data(), recv_bytes);

  // Finish the tree over every rank's nodes (in rank order: slot order) for this rank's
  // chunks, then copy every rank's finished chunks to every rank.
  std::vector<TreeNode> all_nodes;
  for (const auto& nodes : nodes_of) all_nodes.insert(all_nodes.end(), nodes.begin(), nodes.end());
  std::vector<size_t> from_rank(static_cast<size_t>(ranks), 0);  // offsets of each rank's block in recv
  for (int r = 1; r < ranks; ++r)
    from_rank[static_cast<size_t>(r)] = from_rank[r - 1] + static_cast<size_t>(recv_bytes[r - 1] / int64_t(sizeof(float)));
  std::vector<float> finished(static_cast<size_t>(my_chunk_floats));
  {
    std::vector<size_t> at = from_rank;  // running offset in each rank's block
    size_t out = 0;
    std::vector<float*> values(all_nodes.size());
    for (int p : params) {
      const auto [b, e] = chunk(p, me);
      const int64_t len = e - b;
      size_t v = 0;
      for (int r = 0; r < ranks; ++r)
        for (size_t k = 0; k < nodes_of[static_cast<size_t>(r)].size(); ++k) {
          values[v++] = recv.data() + at[static_cast<size_t>(r)];
          at[static_cast<size_t>(r)] += static_cast<size_t>(len);
        }
      if (len > 0 && !all_nodes.empty()) {
        finish_tree(active, all_nodes, values.data(), 0, len);
        std::copy(values[0], values[0] + len, finished.begin() + static_cast<ptrdiff_t>(out));
      }
      out += static_cast<size_t>(len);
    }
  }
  std::vector<int64_t> gather_bytes(static_cast<size_t>(ranks), 0);
  int64_t total_floats = 0;
  for (int p : params) total_floats += int64_t(parameters[p].value.size());
  for (int r = 0; r < ranks; ++r)
    for (int p : params) {
      const auto [b, e] = chunk(p, r);
      gather_bytes[static_cast<size_t>(r)] += (e - b) * int64_t(sizeof(float));
    }
  std::vector<float> gathered(static_cast<size_t>(total_floats));
  int64_t mine_at = 0;
  for (int r = 0; r < me; ++r) mine_at += gather_bytes[static_cast<size_t>(r)] / int64_t(sizeof(float));
  std::copy(finished.begin(), finished.end(), gathered.begin() + mine_at);
  group->allgather(gathered.data() + mine_at, gathered.data(), gather_bytes);
  size_t at = 0;
  for (int r = 0; r < ranks; ++r)
    for (int p : params) {
      FloatBuffer& g = reduced_grad[static_cast<size_t>(p)];
      g.resize(parameters[p].value.size());
      const auto [b, e] = chunk(p, r);
      std::copy(gathered.begin() + static_cast<ptrdiff_t>(at), gathered.begin() + static_cast<ptrdiff_t>(at + (e - b)),
                g.begin() + b);
      at += static_cast<size_t>(e - b);
    }
}

void Trainer::Impl::share_step_stats(std::vector<double>& losses, StepStats& stats) {
  group->allgather(losses.data() + own_begin, losses.data(), bytes_per_rank(int64_t(sizeof(double))));
  std::vector<int64_t> counts = {stats.correct};
  counts.insert(counts.end(), stats.per_class.begin(), stats.per_class.end());
  group->sum(counts.data(), int64_t(counts.size()));
  stats.correct = counts[0];
  std::copy(counts.begin() + 1, counts.end(), stats.per_class.begin());
}

}  // namespace convgen::model
