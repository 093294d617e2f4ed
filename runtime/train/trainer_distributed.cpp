// The trainer across processes (docs/distributed.md): what crosses ranks, and the tree
// finished over every rank's nodes. The collectives only copy bytes and add integers;
// every floating-point sum is the one a single process makes.
#include "runtime/train/trainer_impl.h"

#include <algorithm>
#include <chrono>
#include <exception>
#include <mutex>

#include <omp.h>

#include "runtime/graph/operators.h"
#include "runtime/parallel/pairwise_tree.h"
#include "runtime/train/train_ops.h"

namespace convgen::model {

const std::vector<int64_t>& Trainer::Impl::rank_cuts(int64_t micro) const {
  std::lock_guard<std::mutex> lock(rank_cuts_mutex);
  auto it = rank_cuts_by_count.find(micro);
  if (it == rank_cuts_by_count.end())
    it = rank_cuts_by_count.emplace(micro, tree_aligned_cuts(micro, group ? group->size() : 1)).first;
  return it->second;  // std::map: the reference stays valid as entries are added
}

std::pair<int64_t, int64_t> Trainer::Impl::samples_of_rank(int64_t count, int rank) const {
  const int64_t micro = (count + m - 1) / m;
  const auto [b, e] = micro_batches_of_rank(micro, rank);
  return {std::min(b * m, count), std::min(e * m, count)};
}

std::vector<int64_t> Trainer::Impl::bytes_per_rank(int64_t bytes_per_micro_batch) const {
  std::vector<int64_t> bytes;
  for (int r = 0; r < group->size(); ++r) {
    const auto [b, e] = micro_batches_of_rank(active, r);
    bytes.push_back((e - b) * bytes_per_micro_batch);
  }
  return bytes;
}

void Trainer::Impl::exchange(int64_t bytes_in, const std::function<void()>& collective) {
  if (!timing_step) return collective();
  const auto start = std::chrono::steady_clock::now();
  collective();
  const auto end = std::chrono::steady_clock::now();
  comm_spans.emplace_back(start, end);
  step_seconds[kExposed] += std::chrono::duration<double>(end - start).count();  // the step waited for all of it
  exchanged_bytes += bytes_in;
}

void Trainer::Impl::count_communication() {
  // Buckets travel side by side: their spans overlap, and a sum would exceed the step.
  std::sort(comm_spans.begin(), comm_spans.end());
  std::chrono::steady_clock::duration busy{};
  std::chrono::steady_clock::time_point covered{};
  for (const auto& [start, end] : comm_spans) {
    const auto from = std::max(start, covered);
    if (end > from) busy += end - from;
    covered = std::max(covered, end);
  }
  step_seconds[kCommunication] += std::chrono::duration<double>(busy).count();
  comm_spans.clear();
}

namespace {

// What an all-gather of `bytes` (per rank) brings rank `me`: every other rank's block.
int64_t gathered_from_others(const std::vector<int64_t>& bytes, int me) {
  int64_t in = 0;
  for (size_t r = 0; r < bytes.size(); ++r)
    if (static_cast<int>(r) != me) in += bytes[r];
  return in;
}

}  // namespace

void Trainer::Impl::share_samples(float* base, int64_t sample_elements) {
  const int ranks = group->size();
  std::vector<int64_t> bytes(static_cast<size_t>(ranks));
  for (int r = 0; r < ranks; ++r) {
    const auto [b, e] = samples_of_rank(batch_count, r);
    bytes[static_cast<size_t>(r)] = (e - b) * sample_elements * int64_t(sizeof(float));
  }
  const int64_t mine = samples_of_rank(batch_count, group->rank()).first;
  exchange(gathered_from_others(bytes, group->rank()), [&] { group->allgather(base + mine * sample_elements, base, bytes); });
}

void Trainer::Impl::share_bn_partials(size_t node) {
  const int x = id(tg.graph.nodes[node].inputs[0]);
  const auto size = static_cast<size_t>(2 * values[x].shape[1]);  // both sums per channel
  std::vector<double> all(static_cast<size_t>(active) * size);
  for (int64_t i = own_begin; i < own_end; ++i) std::copy_n(slots[i].bn_partial[node].begin(), size, all.begin() + i * size);
  const std::vector<int64_t> bytes = bytes_per_rank(int64_t(size * sizeof(double)));
  exchange(gathered_from_others(bytes, group->rank()), [&] { group->allgather(all.data() + own_begin * size, all.data(), bytes); });
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

void Trainer::Impl::plan_gradient_buckets() {
  // updates_after[k] lists a parameter's update chunks after the last phase that touches
  // it in the backward: its gradient is complete then. Every rank plans the same buckets
  // (they depend on the model alone), so every rank starts the same exchanges in order.
  bucket_params.assign(updates_after.size(), {});
  for (size_t k = 0; k < updates_after.size(); ++k)
    for (const UpdateChunk& c : updates_after[k]) {
      if (deferred_param[c.p] || cropped_gradient_of[c.p]) continue;  // not summed by the tree
      std::vector<int>& list = bucket_params[k];
      if (list.empty() || list.back() != c.p) list.push_back(c.p);
    }
}

namespace {

// Element chunk `owner` of a parameter of `n` floats: rank `owner` finishes its tree.
std::pair<int64_t, int64_t> chunk_of(int64_t n, int owner, int ranks) { return rank_range(n, owner, ranks); }

}  // namespace

std::vector<std::vector<TreeNode>> Trainer::Impl::tree_nodes_of_ranks() const {
  std::vector<std::vector<TreeNode>> nodes(static_cast<size_t>(group->size()));
  for (int r = 0; r < group->size(); ++r) {
    const auto [first, last] = micro_batches_of_rank(active, r);
    nodes[static_cast<size_t>(r)] = nodes_within(active, first, last);
  }
  return nodes;
}

void Trainer::Impl::start_bucket(const std::vector<int>& params) {
  const int ranks = group->size(), me = group->rank();
  const std::vector<std::vector<TreeNode>> nodes_of = tree_nodes_of_ranks();
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
  buckets.emplace_back();
  GradientBucket& b = buckets.back();
  b.params = params;
  b.send_bytes.assign(static_cast<size_t>(ranks), 0);
  b.recv_bytes.assign(static_cast<size_t>(ranks), 0);
  for (int p : params) {
    const int64_t n = int64_t(parameters[p].value.size());
    const auto [own_begin, own_end] = chunk_of(n, me, ranks);
    for (int r = 0; r < ranks; ++r) {
      const auto [cb, ce] = chunk_of(n, r, ranks);
      const auto nodes = static_cast<int64_t>(nodes_of[static_cast<size_t>(r)].size());
      b.send_bytes[static_cast<size_t>(r)] += (ce - cb) * int64_t(mine.size() * sizeof(float));
      b.recv_bytes[static_cast<size_t>(r)] += (own_end - own_begin) * nodes * int64_t(sizeof(float));
    }
  }
  int64_t send_total = 0, recv_total = 0;
  for (int r = 0; r < ranks; ++r) send_total += b.send_bytes[r], recv_total += b.recv_bytes[r];
  b.send.resize(static_cast<size_t>(send_total / int64_t(sizeof(float))));
  b.recv.resize(static_cast<size_t>(recv_total / int64_t(sizeof(float))));
  size_t at = 0;
  for (int r = 0; r < ranks; ++r)
    for (int p : params) {
      const auto [cb, ce] = chunk_of(int64_t(parameters[p].value.size()), r, ranks);
      for (const TreeNode& nd : mine) {
        const float* g = slots[nd.first].param_grad[p].data();
        at = static_cast<size_t>(std::copy(g + cb, g + ce, b.send.begin() + static_cast<ptrdiff_t>(at)) - b.send.begin());
      }
    }
  if (timing_step) b.posted = std::chrono::steady_clock::now();
  b.exchange = group->start_alltoall(b.send.data(), b.send_bytes, b.recv.data(), b.recv_bytes);
  b.in_flight = true;
  polling = true;
}

void Trainer::Impl::poll_buckets() {
  for (GradientBucket& b : buckets) {
    if (!b.in_flight) continue;
    if (!group->test(b.gather ? b.gather : b.exchange)) return;  // in order: later ones are behind it
    b.in_flight = false;
    b.arrived = std::chrono::steady_clock::now();
  }
}

void Trainer::Impl::wait_for(GradientBucket& b, ProcessGroup::Ticket ticket) {
  const auto start = std::chrono::steady_clock::now();
  group->complete(ticket);
  if (!timing_step) {
    b.in_flight = false;
    return;
  }
  const auto end = std::chrono::steady_clock::now();
  // In flight from posting until a poll found it done, or until this wait returned.
  step_seconds[kExposed] += std::chrono::duration<double>(end - start).count();
  comm_spans.emplace_back(b.posted, b.in_flight ? end : b.arrived);
  b.in_flight = false;
}

void Trainer::Impl::gather_bucket(GradientBucket& b) {
  const int ranks = group->size(), me = group->rank();
  wait_for(b, b.exchange);
  // Finish the tree over every rank's nodes (in rank order: slot order) for this rank's
  // chunks, then copy every rank's finished chunks to every rank.
  const std::vector<std::vector<TreeNode>> nodes_of = tree_nodes_of_ranks();
  std::vector<TreeNode> all_nodes;
  for (const auto& nodes : nodes_of) all_nodes.insert(all_nodes.end(), nodes.begin(), nodes.end());
  b.gather_bytes.assign(static_cast<size_t>(ranks), 0);
  int64_t total_floats = 0;
  for (int p : b.params) {
    const int64_t n = int64_t(parameters[p].value.size());
    total_floats += n;
    for (int r = 0; r < ranks; ++r) {
      const auto [cb, ce] = chunk_of(n, r, ranks);
      b.gather_bytes[static_cast<size_t>(r)] += (ce - cb) * int64_t(sizeof(float));
    }
  }
  b.gathered.resize(static_cast<size_t>(total_floats));
  b.mine_at = 0;
  for (int r = 0; r < me; ++r) b.mine_at += b.gather_bytes[static_cast<size_t>(r)] / int64_t(sizeof(float));
  std::vector<size_t> at(static_cast<size_t>(ranks), 0);  // running offset in each rank's block of recv
  for (int r = 1; r < ranks; ++r) at[static_cast<size_t>(r)] = at[r - 1] + static_cast<size_t>(b.recv_bytes[r - 1] / int64_t(sizeof(float)));
  size_t out = static_cast<size_t>(b.mine_at);
  std::vector<float*> values(all_nodes.size());
  for (int p : b.params) {
    const auto [cb, ce] = chunk_of(int64_t(parameters[p].value.size()), me, ranks);
    const int64_t len = ce - cb;
    size_t v = 0;
    for (int r = 0; r < ranks; ++r)
      for (size_t k = 0; k < nodes_of[static_cast<size_t>(r)].size(); ++k) {
        values[v++] = b.recv.data() + at[static_cast<size_t>(r)];
        at[static_cast<size_t>(r)] += static_cast<size_t>(len);
      }
    if (len > 0 && !all_nodes.empty()) {
      finish_tree(active, all_nodes, values.data(), 0, len);
      std::copy(values[0], values[0] + len, b.gathered.begin() + static_cast<ptrdiff_t>(out));
    }
    out += static_cast<size_t>(len);
  }
  if (timing_step) {
    // What the bucket brought this rank, and what a ring all-reduce of the same gradients
    // would have (2 (R - 1) / R of them: scatter-reduce, then all-gather).
    int64_t in = 0;
    for (int r = 0; r < ranks; ++r)
      if (r != me) in += b.recv_bytes[r] + b.gather_bytes[r];
    exchanged_bytes += in;
    gradient_bytes += in;
    ring_bytes += 2 * (ranks - 1) * total_floats * int64_t(sizeof(float)) / ranks;
    b.posted = std::chrono::steady_clock::now();
  }
  b.send = {};  // sent: no longer needed
  b.gather = group->start_allgather(b.gathered.data() + b.mine_at, b.gathered.data(), b.gather_bytes);
  b.in_flight = true;
}

void Trainer::Impl::finish_bucket(GradientBucket& b) {
  const int ranks = group->size();
  wait_for(b, b.gather);
  size_t at = 0;
  for (int r = 0; r < ranks; ++r)
    for (int p : b.params) {
      FloatBuffer& g = reduced_grad[static_cast<size_t>(p)];
      g.resize(parameters[p].value.size());
      const auto [cb, ce] = chunk_of(int64_t(parameters[p].value.size()), r, ranks);
      std::copy(b.gathered.begin() + static_cast<ptrdiff_t>(at), b.gathered.begin() + static_cast<ptrdiff_t>(at + (ce - cb)),
                g.begin() + cb);
      at += static_cast<size_t>(ce - cb);
    }
}

void Trainer::Impl::reduce_gradients_across_ranks() {
  if (reduced_grad.size() < parameters.size()) reduced_grad.resize(parameters.size());
  if (!bucket_params.back().empty()) start_bucket(bucket_params.back());
  // Each bucket's all-gather is posted as soon as its tree is finished, so it runs while
  // the next bucket is waited for and finished.
  for (GradientBucket& b : buckets) gather_bucket(b);
  for (GradientBucket& b : buckets) finish_bucket(b);
  buckets.clear();
  polling = false;
}

void Trainer::Impl::share_step_stats(std::vector<double>& losses, StepStats& stats) {
  const std::vector<int64_t> bytes = bytes_per_rank(int64_t(sizeof(double)));
  exchange(gathered_from_others(bytes, group->rank()), [&] { group->allgather(losses.data() + own_begin, losses.data(), bytes); });
  std::vector<int64_t> counts = {stats.correct};
  counts.insert(counts.end(), stats.per_class.begin(), stats.per_class.end());
  exchange(int64_t(counts.size() * sizeof(int64_t)) * (group->size() - 1),
           [&] { group->sum(counts.data(), int64_t(counts.size())); });
  stats.correct = counts[0];
  std::copy(counts.begin() + 1, counts.end(), stats.per_class.begin());
}

std::vector<Trainer::LayerExchange> Trainer::layer_exchanges() const {
  const Impl& s = *impl_;
  std::vector<int> bucket_of(s.parameters.size(), -1);
  int started = 0;
  for (size_t k = 0; k + 1 < s.bucket_params.size(); ++k) {
    if (s.bucket_params[k].empty()) continue;
    for (int p : s.bucket_params[k]) bucket_of[static_cast<size_t>(p)] = started;
    ++started;
  }
  std::vector<LayerExchange> out;
  for (size_t i = 0; i < s.tg.graph.nodes.size(); ++i) {
    const Node& n = s.tg.graph.nodes[i];
    LayerExchange e{n.name, op_name(n.op)};
    std::vector<int> seen;
    for (const std::string& input : n.inputs) {
      const int v = s.id(input);
      if (v < 0 || s.values[v].parameter < 0) continue;
      const int p = s.values[v].parameter;
      if (std::find(seen.begin(), seen.end(), p) != seen.end()) continue;
      seen.push_back(p);
      e.gradient_floats += int64_t(s.parameters[p].value.size());
      e.bucket = std::max(e.bucket, bucket_of[static_cast<size_t>(p)]);
    }
    if (e.gradient_floats == 0) continue;
    const auto layer = s.conv_layers.find(i);
    const bool whole = layer != s.conv_layers.end() && layer->second.mode == ParallelMode::WholeBatch;
    if (s.deferred_node[i] || whole) {
      const int x = s.id(n.inputs[0]), y = s.id(n.outputs[0]);
      e.by_tree = false;
      e.shared_per_sample = s.values[x].sample_elements + s.values[y].sample_elements;
      if (whole && !layer->second.batched && n.attributes.fused_relu) e.shared_per_sample += s.values[y].sample_elements;
    }
    out.push_back(std::move(e));
  }
  return out;
}

}  // namespace convgen::model
