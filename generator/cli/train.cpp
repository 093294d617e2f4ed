// convgen train: trains a model in-process with the batch-parallel trainer
// (runtime/train/trainer.h) on a data source (runtime/data/train_data.h). docs/training.md.
#include <unistd.h>

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <cstdio>
#include <fstream>
#include <map>
#include <set>

#include <fmt/format.h>

#include "generator/cli/cli.h"
#include "generator/kernel_cache/kernel_cache.h"
#include "generator/onnx/export.h"
#include "generator/train/trainer_from_model.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/data/train_data.h"
#include "runtime/distributed/mpi_process_group.h"
#include "runtime/parallel/pairwise_tree.h"
#include "runtime/train/trainer.h"
#include "runtime/train/trainer_state.h"
#include "schedules/durable_file.h"
#include "schedules/errors.h"
#include "schedules/sha256.h"

namespace convgen::cli {

namespace {

const char* kTrainUsage = R"(usage: convgen train MODEL.onnx --data SOURCE [options]

Trains an ONNX CNN with softmax cross-entropy on its logits (a final Softmax is dropped)
and SGD with momentum (torch.optim.SGD semantics), batch-parallel: each mini-batch is
cut into micro-batches of consecutive samples that the threads take whole, and every
sum over samples is combined in a fixed tree, so the result is bit-identical for every
--threads value (docs/training.md). The same engine compiled ahead of time into a C++
program, with the same bits: the training driver of `convgen compile` (its --help).

SOURCE: fashion-mnist (Debian's dataset-fashion-mnist; accuracy on its test split),
        idx:IMAGES,LABELS (IDX files, raw or gzip), cifar10:DIR (CIFAR-10 binary version),
        synthetic (pseudo-random images of the model's input shape, random labels).
Segmentation: a model whose logits are [N, K, H, W] learns a label per pixel, with the
loss averaged over the labelled pixels (PyTorch's cross_entropy); LABELS of idx: is then
an IDX file of [N][H][W] label maps, synthetic labels each pixel by its first channel's
byte (byte * K / 256; 248 and up unlabelled when --ignore-index is given), and the test
split reports pixel accuracy and mean IoU.

  --batch B            mini-batch size (default 64)
  --micro-batch M      samples per micro-batch (default: the largest divisor of B <= B/4)
  --epochs E           passes over the data (default 1), or
  --steps S            stop after S steps
  --lr LR              learning rate (default 0.01)
  --momentum MU        (default 0.9)
  --weight-decay WD    L2 penalty added to every trainable tensor's gradient (default 0)
  --lr-schedule S      constant (default), step:SIZE:GAMMA (StepLR), cosine (CosineAnnealingLR
                       over the epochs the run spans), stepped per epoch
  --threads T          (default: all cores)
  --intra-kernel       micro-batches in sequence, kernels parallel inside (same bits)
  --parallel-mode NODE=MODE[,NODE=MODE...]
                       a Conv layer's weight gradient per micro-batch (micro-batch: summed by
                       the tree) or over the whole mini-batch (whole-batch); NODE * is every
                       other Conv; by default a cost model picks (--verbose says which and
                       why; never by --threads)
  --conv-impl I        generated (default: convgen's kernels) or im2col-blis (the baseline:
                       explicit im2col + BLIS SGEMM, one im2col buffer per thread)
  --profile            per node and pass: milliseconds per step (on stderr, at the end)
  --profile-json FILE  the same as JSON, with each layer's gradient size and how it crosses
                       ranks: the input of scripts/predict-scaling (docs/distributed.md)
  --seed N             shuffle and dropout seed (default 0)
  --no-shuffle         samples in file order every epoch
  --normalize M,S      pixels (x/255 - M) / S (per channel: M1,..,Mc,S1,..,Sc)
  --synthetic-count N  samples of the synthetic source (default 6000)
  --ignore-index V     label byte V marks a position as unlabelled: no loss, no gradient
                       (PyTorch's ignore_index; default: none)
  --log FILE.jsonl     one JSON line per step: step, epoch, loss, lr, images_per_s
  --dump-order FILE    the sample order of every epoch, one index per line
  --save OUT.onnx      the trained model: MODEL with its initializers updated
  --checkpoint DIR     write DIR/checkpoint.cgck (atomically) every --every steps (default:
                       each epoch's end), at the end and on SIGINT
  --every S            checkpoint interval in steps
  --resume DIR         continue from DIR's checkpoint, bit-identically to a run never
                       stopped; the model and the options that shape training must match
  --schedules FILE     records (`convgen tune`): schedules for the kernels, and a
                       training record for this model and batch sets the micro-batch and
                       every Conv layer's parallel mode (unless --micro-batch differs)
  --target STRING      Halide target of the kernels (default host: the widest this CPU
                       runs, AVX-512 where present, else
                       x86-64-linux-avx-avx2-f16c-fma-sse41). Results are bit-identical
                       for one target; pin it to compare runs across machines
  --verbose            kernels and schedules chosen, and why

Over several processes: mpirun -np R convgen train MODEL --data SOURCE [options]. Rank r
takes a contiguous range of each mini-batch's micro-batches (its threads take those
whole) and decodes only their samples; the sums are finished across ranks in the same
fixed tree, so weights, losses and checkpoints are bit-identical for every R and --threads,
and a checkpoint resumes with any R. Rank 0 alone prints, logs, saves and checkpoints; it
reads --resume's checkpoint and sends it to the others (no shared file system needed;
each rank needs the data). Every rank must be given the same model, options and data
(checked at start: exit 2 otherwise). docs/distributed.md.
  --rank-timeout S     after start-up, a rank that does not reach an exchange within S
                       seconds (time it spends building kernels not counted) ends the
                       run on every rank with exit code 12, named (default 600; 0: off)
)";

const char* kTrainExitCodes = R"(
Exit codes: 0 done, 130 stopped by SIGINT (after the running step, checkpointing if
asked; during set-up at once; under mpirun SIGTERM too, every rank after the same step),
10 a non-finite loss or weights (the step is named), 12 under mpirun a rank that hangs
(--rank-timeout), others as in docs/exit-codes.md. Under mpirun a rank that fails ends
every rank with its code (MPI_Abort).
)";

std::atomic<bool> g_interrupted{false};
std::atomic<bool> g_training{false};  // set once the first step may run
// Before training starts nothing is at stake (no step, no checkpoint): leave at once.
// After, let the running step finish (the loop checks the flag).
void on_sigint(int) {
  if (!g_training) {
    static const char message[] = "convgen: interrupted before training started\n";
    (void)!::write(STDERR_FILENO, message, sizeof message - 1);
    ::_exit(130);
  }
  g_interrupted = true;
}

struct TrainSetup {
  std::string model, data, log, dump_order, save, schedules, target, normalize, lr_schedule = "constant";
  std::string checkpoint, resume, profile_json;
  int64_t every = 0;
  double rank_timeout = 600;  // seconds; 0: no watchdog over the ranks
  model::TrainerOptions trainer;
  int64_t epochs = 1, steps = 0, synthetic_count = 6000;
  int64_t schedule_epochs = 1;  // the epochs the run spans (--epochs, or --steps' worth): cosine's T_max
  bool shuffle = true, verbose = false;
};

float parse_float(const std::string& option, const std::string& text) {
  try {
    size_t used = 0;
    const float v = std::stof(text, &used);
    if (used == text.size() && std::isfinite(v)) return v;
  } catch (const std::exception&) {
  }
  throw Error(ExitCode::Usage, fmt::format("{}: '{}' is not a number", option, text));
}

TrainSetup parse(const Args& args, bool* help) {
  TrainSetup s;
  s.trainer.threads = omp_get_num_procs();
  OptionReader r(args);
  while (!r.done()) {
    if (r.flag("--help") || r.flag("-h")) {
      *help = true;
      return s;
    }
    std::string v;
    if (r.value("--data", &s.data) || r.value("--log", &s.log) || r.value("--dump-order", &s.dump_order) ||
        r.value("--save", &s.save) || r.value("--schedules", &s.schedules) || r.value("--target", &s.target) ||
        r.value("--normalize", &s.normalize) || r.value("--lr-schedule", &s.lr_schedule) ||
        r.value("--checkpoint", &s.checkpoint) || r.value("--resume", &s.resume) ||
        r.value("--conv-impl", &s.trainer.conv_impl))
      continue;
    if (r.value("--parallel-mode", &v)) {
      for (const auto& [node, mode] : model::parse_parallel_modes(v)) s.trainer.parallel_modes[node] = mode;
      continue;
    }
    if (r.value("--batch", &v)) { s.trainer.batch = parse_count("--batch", v); continue; }
    if (r.value("--micro-batch", &v)) { s.trainer.micro_batch = parse_count("--micro-batch", v); continue; }
    if (r.value("--epochs", &v)) { s.epochs = parse_count("--epochs", v); continue; }
    if (r.value("--steps", &v)) { s.steps = parse_count("--steps", v); continue; }
    if (r.value("--every", &v)) { s.every = parse_count("--every", v); continue; }
    if (r.value("--threads", &v)) { s.trainer.threads = static_cast<int>(parse_count("--threads", v)); continue; }
    if (r.value("--seed", &v)) {
      const bool digits = !v.empty() && v.size() <= 20 && std::all_of(v.begin(), v.end(), ::isdigit);
      errno = 0;
      const unsigned long long seed = digits ? std::strtoull(v.c_str(), nullptr, 10) : 0;
      if (!digits || errno == ERANGE)
        throw Error(ExitCode::Usage, fmt::format("--seed: '{}' is not an integer in [0, 2^64)", v));
      s.trainer.seed = seed;
      continue;
    }
    if (r.value("--synthetic-count", &v)) { s.synthetic_count = parse_count("--synthetic-count", v); continue; }
    if (r.value("--ignore-index", &v)) {
      const bool digits = !v.empty() && v.size() <= 3 && std::all_of(v.begin(), v.end(), ::isdigit);
      if (!digits || std::stoi(v) > 255)
        throw Error(ExitCode::Usage, fmt::format("--ignore-index: '{}' is not a label byte in [0, 255]", v));
      s.trainer.ignore_label = std::stoi(v);
      continue;
    }
    if (r.value("--rank-timeout", &v)) {
      s.rank_timeout = parse_float("--rank-timeout", v);
      if (s.rank_timeout < 0) throw Error(ExitCode::Usage, fmt::format("--rank-timeout: '{}' is negative", v));
      continue;
    }
    if (r.value("--lr", &v)) { s.trainer.lr = parse_float("--lr", v); continue; }
    if (r.value("--momentum", &v)) { s.trainer.momentum = parse_float("--momentum", v); continue; }
    if (r.value("--weight-decay", &v)) { s.trainer.weight_decay = parse_float("--weight-decay", v); continue; }
    if (r.flag("--no-shuffle")) { s.shuffle = false; continue; }
    if (r.flag("--intra-kernel")) { s.trainer.intra_kernel = true; continue; }
    if (kernel_cache_option(r)) continue;
    if (r.flag("--profile")) { s.trainer.profile = true; continue; }
    if (r.value("--profile-json", &s.profile_json)) { s.trainer.profile = true; continue; }
    if (r.flag("--verbose") || r.flag("-v")) { s.verbose = true; continue; }
    if (!r.peek().empty() && r.peek()[0] == '-')
      throw Error(ExitCode::Usage, fmt::format("train: unknown option '{}' (see --help)", r.peek()));
    if (!s.model.empty()) throw Error(ExitCode::Usage, fmt::format("unexpected argument '{}'", r.peek()));
    s.model = r.positional();
  }
  if (s.model.empty()) throw Error(ExitCode::Usage, "train: missing MODEL.onnx (see --help)");
  if (s.data.empty()) throw Error(ExitCode::Usage, "train: missing --data SOURCE (see --help)");
  // Training runs on this machine: by default the widest target it supports ("host").
  // Resolved once, so the checkpoint key names the actual feature set and a resume on a
  // CPU with other features is refused rather than silently different.
  s.target = target_info(s.target.empty() ? "host" : s.target).target;
  return s;
}

// --profile-json: what --profile prints, per step, with each layer's gradient size and
// how it crosses ranks (Trainer::layer_exchanges), for scripts/predict-scaling. Written
// durably, like every file convgen writes (schedules/durable_file.h).
void write_profile_json(const TrainSetup& s, const model::Trainer& trainer, const ProcessGroup* group, int64_t steps) {
  const double per_step = 1e3 / double(std::max<int64_t>(1, steps));  // seconds in total -> ms per step
  std::map<std::string, std::map<std::string, double>> node_ms;
  std::string step_parts;
  for (const model::NodeTime& t : trainer.profile()) {
    if (t.node == "(step)") {
      step_parts += fmt::format("{}\n    \"{}\": {:.6f}", step_parts.empty() ? "" : ",", json_escape(t.op), t.seconds * per_step);
      continue;
    }
    node_ms[t.node][t.pass] += t.seconds * per_step;
  }
  std::string layers;
  std::set<std::string> with_parameters;
  for (const model::Trainer::LayerExchange& e : trainer.layer_exchanges()) {
    with_parameters.insert(e.node);
    auto ms = [&](const char* pass) {
      const auto n = node_ms.find(e.node);
      if (n == node_ms.end()) return 0.0;
      const auto p = n->second.find(pass);
      return p == n->second.end() ? 0.0 : p->second;
    };
    layers += fmt::format(
        "{}\n    {{\"node\": \"{}\", \"op\": \"{}\", \"forward_ms\": {:.6f}, \"backward_ms\": {:.6f}, "
        "\"gradient_floats\": {}, \"exchange\": \"{}\", \"shared_floats_per_sample\": {}, \"bucket\": {}}}",
        layers.empty() ? "" : ",", json_escape(e.node), json_escape(e.op), ms("forward"), ms("backward"), e.gradient_floats,
        e.by_tree ? "tree" : "activations", e.shared_per_sample, e.by_tree ? e.bucket : -1);
  }
  // Nodes without parameters: their time is computed on every rank's own micro-batches.
  double other_forward = 0, other_backward = 0;
  for (const auto& [node, passes] : node_ms) {
    if (with_parameters.count(node)) continue;
    for (const auto& [pass, ms] : passes) (pass == "forward" ? other_forward : other_backward) += ms;
  }
  const model::Trainer::ExchangeVolume v = trainer.exchange_volume();
  const std::string text = fmt::format(
      "{{\n  \"format\": \"convgen-train-profile/1\",\n  \"model\": \"{}\",\n  \"target\": \"{}\",\n"
      "  \"batch\": {},\n  \"micro_batch\": {},\n  \"threads\": {},\n  \"ranks\": {},\n  \"steps\": {},\n"
      "  \"step_ms\": {{{}\n  }},\n  \"other_nodes_ms\": {{\"forward\": {:.6f}, \"backward\": {:.6f}}},\n"
      "  \"received_bytes_per_step\": {:.1f},\n  \"gradient_exchange_bytes_per_step\": {:.1f},\n"
      "  \"ring_bytes_per_step\": {:.1f},\n  \"layers\": [{}\n  ]\n}}\n",
      json_escape(s.model), json_escape(s.target), s.trainer.batch, trainer.micro_batch(), s.trainer.threads,
      group ? group->size() : 1, steps, step_parts, other_forward, other_backward, double(v.received) * per_step / 1e3,
      double(v.gradients) * per_step / 1e3, double(v.ring) * per_step / 1e3, layers);
  write_file_durably(s.profile_json, text);
}

// The learning rate of an epoch under --lr-schedule (PyTorch's closed forms).
float learning_rate(const TrainSetup& s, int64_t epoch) {
  const float base = s.trainer.lr;
  if (s.lr_schedule == "constant") return base;
  if (s.lr_schedule == "cosine")
    return float(0.5 * double(base) *
                 (1.0 + std::cos(M_PI * double(epoch) / double(std::max<int64_t>(1, s.schedule_epochs)))));
  int64_t size = 0;
  float gamma = 0.0f;
  if (std::sscanf(s.lr_schedule.c_str(), "step:%ld:%f", &size, &gamma) == 2 && size > 0 && gamma > 0.0f)
    return float(double(base) * std::pow(double(gamma), double(epoch / size)));
  throw Error(ExitCode::Usage,
              fmt::format("--lr-schedule: '{}' is not constant, cosine or step:SIZE:GAMMA", s.lr_schedule));
}

std::string format_seconds(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  const int64_t t = int64_t(s + 0.5);
  return t >= 60 ? fmt::format("{}m{:02}s", t / 60, t % 60) : fmt::format("{}s", t);
}

// What a resumed run must share with the run that wrote the checkpoint: everything that
// shapes the sequence of steps (not --threads, --epochs or --steps: those only decide who
// computes and how far).
std::string resume_key(const TrainSetup& s, int64_t micro_batch, const std::string& execution) {
  return fmt::format("data={} batch={} micro_batch={} execution={} lr={:.9g} momentum={:.9g} weight_decay={:.9g} lr_schedule={} "
                     "seed={} shuffle={} normalize={} synthetic_count={} schedules={} target={} conv_impl={}",
                     s.data, s.trainer.batch, micro_batch, execution, s.trainer.lr, s.trainer.momentum, s.trainer.weight_decay,
                     s.lr_schedule, s.trainer.seed, s.shuffle, s.normalize, s.synthetic_count, s.schedules, s.target,
                     s.trainer.conv_impl) +
         (s.trainer.ignore_label >= 0 ? fmt::format(" ignore_index={}", s.trainer.ignore_label) : std::string()) +
         (s.lr_schedule == "cosine" ? fmt::format(" cosine_epochs={}", s.schedule_epochs) : std::string());
}

// Every rank of a run over several processes must train the same thing: each hashes
// what shapes the run, the hashes are gathered, and every rank refuses the same way.
void check_ranks_agree(ProcessGroup& group, const std::string& what) {
  const std::string mine = sha256_hex(what);
  const size_t width = mine.size();
  std::vector<char> all(width * static_cast<size_t>(group.size()));
  std::copy(mine.begin(), mine.end(), all.begin() + static_cast<ptrdiff_t>(width * static_cast<size_t>(group.rank())));
  group.allgather(all.data() + width * static_cast<size_t>(group.rank()), all.data(),
                  std::vector<int64_t>(static_cast<size_t>(group.size()), static_cast<int64_t>(width)));
  for (int r = 1; r < group.size(); ++r)
    if (!std::equal(all.begin(), all.begin() + static_cast<ptrdiff_t>(width), all.begin() + static_cast<ptrdiff_t>(width * r)))
      throw Error(ExitCode::Usage,
                  fmt::format("rank {} was given another model, options, data or kernel target than rank 0; every rank "
                              "of a run must train the same",
                              r));
}

// Whether any rank was interrupted: every rank stops after the same step.
bool any_rank(ProcessGroup* group, bool flag) {
  int64_t v = flag ? 1 : 0;
  group->sum(&v, 1);
  return v > 0;
}

int train_run(const Args& args, const std::shared_ptr<ProcessGroup>& group_owned) {
  ProcessGroup* group = group_owned.get();
  const bool lead = !group || group->rank() == 0;  // prints, logs, saves and checkpoints
  const bool several = group && group->size() > 1;  // else: exactly the one-process run
  bool help = false;
  TrainSetup s = parse(args, &help);
  if (help) {
    if (lead) fmt::print("{}{}{}", kTrainUsage, kKernelCacheHelp, kTrainExitCodes);
    return 0;
  }
  learning_rate(s, 0);  // validates --lr-schedule before any work
  // From the start: a shell's background job inherits SIGINT ignored until a handler is
  // installed, and set-up (importing, compiling kernels) takes seconds. mpirun forwards
  // SIGINT to its ranks as SIGTERM.
  std::signal(SIGINT, on_sigint);
  if (group) std::signal(SIGTERM, on_sigint);
  s.trainer.records = s.schedules;
  s.trainer.group = several ? group_owned : nullptr;
  const TargetInfo target = target_info(s.target);
  std::vector<std::string> why;
  auto trainer_owned = model::make_trainer(s.model, s.trainer, target, s.verbose ? &why : nullptr);
  model::Trainer& trainer = *trainer_owned;
  // Kernels are built when a batch size first needs them: with --verbose, the full
  // mini-batch's now, so their schedules (and where they came from) are printed up front.
  if (s.verbose) trainer.prepare(s.trainer.batch);
  if (lead) {
    for (const auto& line : why) fmt::print(stderr, "{}\n", line);
    if (s.verbose) fmt::print(stderr, "convgen: {}\n", kernel_cache_summary());
  }

  const model::TrainGraph& tg = trainer.graph();
  data::SampleSpec spec;
  spec.channels = tg.sample_shape[0], spec.height = tg.sample_shape[1], spec.width = tg.sample_shape[2];
  spec.classes = tg.classes;
  if (tg.label_elements > 1) {  // [N, K, H, W] logits: a label map per sample
    const std::vector<int64_t>& logits = tg.graph.value(tg.logits).shape;
    spec.label_height = logits[2], spec.label_width = logits[3];
  }
  spec.ignore_label = s.trainer.ignore_label;
  spec.synthetic_count = s.synthetic_count;
  spec.synthetic_seed = s.trainer.seed;
  const data::Source source = data::load_source(s.data, spec);
  const data::Normalization norm =
      s.normalize.empty() ? data::Normalization{} : data::parse_normalization(s.normalize, spec.channels);

  const int64_t batch = s.trainer.batch, count = source.train.count();
  const int64_t per_epoch = (count + batch - 1) / batch;
  const int64_t total_steps = s.steps > 0 ? s.steps : per_epoch * s.epochs;
  const int64_t epochs = (total_steps + per_epoch - 1) / per_epoch;
  s.schedule_epochs = epochs;
  if (!s.checkpoint.empty() && s.checkpoint == s.resume) {
    // Resuming into the same directory is the usual case: the new checkpoints replace it.
  }

  // Where results go must be writable before any step runs, not after the last.
  if (!s.save.empty() && lead) {
    std::vector<std::string> names;
    for (const model::Parameter& p : trainer.parameters()) names.push_back(p.name);
    for (const auto& [name, data] : trainer.state_tensors()) names.push_back(name);
    model::check_initializers(s.model, names);
  }
  for (const std::string& path : {s.save, s.profile_json}) {
    if (path.empty() || !lead) continue;
    const std::filesystem::path parent = std::filesystem::path(path).has_parent_path()
                                             ? std::filesystem::path(path).parent_path()
                                             : std::filesystem::path(".");
    if (!std::filesystem::is_directory(parent) || ::access(parent.c_str(), W_OK) != 0 ||
        std::filesystem::is_directory(path))
      throw Error(ExitCode::Io, fmt::format("{}: cannot write", path));
  }
  std::ofstream log;
  if (!s.log.empty() && lead) {
    log.open(s.log, s.resume.empty() ? std::ios::trunc : std::ios::app);  // a resumed run continues its log
    if (!log) throw Error(ExitCode::Io, fmt::format("{}: cannot write", s.log));
  }
  const std::string model_hash = sha256_file_hex(s.model);
  const std::string key = resume_key(s, trainer.micro_batch(), trainer.execution_key());
  if (several)
    // Also what decides which exchanges run: resuming (a broadcast) and a test split
    // (evaluation's exchanges).
    check_ranks_agree(*group, fmt::format("model={} key={} steps={} samples={} data_crc={:08x}{:08x} resume={} test={} "
                                          "rank_timeout={}",
                                          model_hash, key, total_steps, count,
                                          train::crc32_of(source.train.pixels.data(), source.train.pixels.size()),
                                          train::crc32_of(source.train.labels.data(), source.train.labels.size()),
                                          !s.resume.empty(), source.test ? source.test->count() : -1,
                                          s.rank_timeout));
  int64_t start_step = 0, start_epoch = 0, start_position = 0;
  if (!s.resume.empty()) {
    // One rank reads the checkpoint and sends its bytes: no file system is shared.
    std::string bytes;
    if (lead) bytes = train::read_checkpoint_file(s.resume);
    if (several) group->broadcast(bytes, 0);
    const train::Checkpoint c = train::parse_checkpoint(bytes, train::checkpoint_path(s.resume));
    model::restore_checkpoint(c, train::checkpoint_path(s.resume), model_hash, key, trainer);
    start_step = c.step, start_epoch = c.epoch, start_position = c.position;
    if (lead)
      fmt::print(stderr, "resuming from {} at step {} (epoch {}, sample {})\n", train::checkpoint_path(s.resume),
                 start_step, start_epoch, start_position);
  }
  // Start-up is over (model, data, agreement, resume): from here a rank that stops
  // arriving at the exchanges is a fault, not a slow start (docs/distributed.md).
  if (several) group->watch(s.rank_timeout);
  if (lead)
    fmt::print(stderr, "training {} on {} ({} samples, {}x{}x{}, {} classes): batch {}, micro-batch {}, {} threads, {} steps\n",
             s.model, s.data, count, spec.channels, spec.height, spec.width, spec.classes, batch,
             trainer.micro_batch(), s.trainer.threads, total_steps);
  if (lead && several) {
    // The split of a full mini-batch, and what finishing the gradient tree over it moves.
    const int64_t micro = (batch + trainer.micro_batch() - 1) / trainer.micro_batch();
    const std::vector<int64_t> cuts = tree_aligned_cuts(micro, group->size());
    std::string sizes;
    for (size_t r = 0; r + 1 < cuts.size(); ++r) sizes += fmt::format("{}{}", r ? "," : "", cuts[r + 1] - cuts[r]);
    const double ratio = tree_exchange_vs_ring(micro, cuts);
    fmt::print(stderr,
               "over {} processes: each takes a contiguous range of every mini-batch's micro-batches ({} of {}); "
               "finishing the gradient tree moves {:.2f}x the bytes of a ring all-reduce\n",
               group->size(), sizes, micro, ratio);
    // Ranges that are single tree nodes move no more than a ring: say which micro-batch
    // size would get closest (another size is another run: its bits differ).
    int64_t better = 0;
    double best = ratio;
    for (int64_t mb = 1; mb <= batch; ++mb) {
      const int64_t n = (batch + mb - 1) / mb;
      if (batch % mb != 0 || n < group->size()) continue;
      const double r = tree_exchange_vs_ring(n, tree_aligned_cuts(n, group->size()));
      if (r < best - 1e-9 || (better && r < best + 1e-9 && std::abs(mb - trainer.micro_batch()) < std::abs(better - trainer.micro_batch())))
        best = r, better = mb;
    }
    if (better && best < ratio - 1e-9)
      fmt::print(stderr, "  (--micro-batch {} would make it {:.2f}x; the micro-batch size is part of what the bits depend on)\n",
                 better, best);
  }
  const int64_t every = s.every > 0 ? s.every : per_epoch;
  data::BatchStream stream(source.train, batch, s.shuffle, s.trainer.seed, norm, start_epoch, start_position,
                           [&trainer](int64_t n) { return trainer.samples_of_this_rank(n); });
  if (!s.dump_order.empty() && lead) {
    std::ofstream order(s.dump_order);
    if (!order) throw Error(ExitCode::Io, fmt::format("{}: cannot write", s.dump_order));
    for (int64_t e = 0; e < epochs; ++e) {
      order << "# epoch " << e << "\n";
      for (int64_t i : stream.order(e)) order << i << "\n";
    }
  }

  trainer.prepare(std::min(batch, count));
  if (count % batch != 0) trainer.prepare(count % batch);
  const bool tty = lead && isatty(STDERR_FILENO);
  const auto start = std::chrono::steady_clock::now();
  double images = 0.0, last_loss = 0.0;
  int64_t step = start_step, epoch_next = start_epoch, position_next = start_position;
  auto checkpoint = [&] {
    if (s.checkpoint.empty() || !lead) return;
    train::save_checkpoint(s.checkpoint, model::make_checkpoint(trainer, model_hash, key, step, epoch_next, position_next,
                                                         s.trainer.seed, learning_rate(s, epoch_next)));
  };
  int64_t lr_epoch = -1;
  const int64_t first_step = start_step;
  g_training = true;
  // Whether to stop: this process's flag, or across ranks the flag they agreed on after
  // the last step (a signal may reach the ranks at different moments; all must stop
  // after the same step, or their exchanges would no longer match).
  bool agreed_stop = false;
  auto stopping = [&] { return several ? agreed_stop : bool(g_interrupted); };
  for (; step < total_steps && !stopping();) {
    const int64_t epoch = epoch_next;
    if (epoch != lr_epoch) trainer.set_learning_rate(learning_rate(s, epoch)), lr_epoch = epoch;
    const data::Batch& b = stream.next();
    const auto t0 = std::chrono::steady_clock::now();
    const model::StepStats st = trainer.train_step(b.pixels.data(), b.labels.data(), b.count);
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!std::isfinite(st.loss))
      throw Error(ExitCode::NonFiniteLoss, fmt::format("step {} (epoch {}): the loss is {}; training stopped", step,
                                                       epoch, std::isnan(st.loss) ? "NaN" : "infinite"));
    if (!st.non_finite.empty())
      throw Error(ExitCode::NonFiniteLoss,
                  fmt::format("step {} (epoch {}): '{}' holds NaN or infinite values after the update; training "
                              "stopped", step, epoch, st.non_finite));
    images += double(b.count);
    last_loss = st.loss;
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (log)
      log << fmt::format("{{\"step\":{},\"epoch\":{},\"loss\":{:.9g},\"lr\":{:.9g},\"images_per_s\":{:.1f}}}\n", step,
                         epoch, st.loss, learning_rate(s, epoch), double(b.count) / dt)
          << std::flush;
    if (tty && (step % 10 == 0 || step + 1 == total_steps)) {
      const int64_t in_epoch = b.first / batch + 1;
      const int width = 24, filled = int(width * in_epoch / per_epoch);
      const double done = double(step + 1 - first_step);
      fmt::print(stderr, "\repoch {}/{} [{}{}] {}/{} loss {:.4f} {:.0f} img/s ETA {}   ", epoch + 1, epochs,
                 std::string(filled, '='), std::string(width - filled, ' '), in_epoch, per_epoch, st.loss,
                 images / elapsed, format_seconds(elapsed / done * double(total_steps - step - 1)));
    }
    ++step;
    position_next = b.first + b.count, epoch_next = b.epoch;
    if (position_next == count) position_next = 0, ++epoch_next;
    if (several) agreed_stop = any_rank(group, g_interrupted);
    if (step % every == 0 || step == total_steps || stopping()) checkpoint();
  }
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (tty) fmt::print(stderr, "\n");
  if (lead)
    fmt::print("steps {} images {:.0f} seconds {:.2f} images_per_s {:.1f} last_loss {:.6f}\n", step - first_step, images, elapsed,
             images / elapsed, last_loss);

  if (!s.profile_json.empty() && lead)
    write_profile_json(s, trainer, group, step - first_step);
  if (s.trainer.profile && lead) {
    const double steps_run = double(std::max<int64_t>(1, step - first_step));
    for (const auto& t : trainer.profile())
      fmt::print(stderr, "{:<28} {:<20} {:<10} {:8.3f} ms/step{}\n", t.node, t.op, t.pass, 1e3 * t.seconds / steps_run,
                 t.node == "(step)" ? "" : " (thread time)");
    if (several) {
      // Rank 0's figures; every rank's exchange of the gradients moves about the same.
      const model::Trainer::ExchangeVolume v = trainer.exchange_volume();
      fmt::print(stderr, "{:<28} {:<20} {:<10} {:8.3f} MB/step from the other ranks\n", "(step)", "received", "rank 0",
                 double(v.received) / 1e6 / steps_run);
      if (v.ring > 0)
        fmt::print(stderr, "{:<28} {:<20} {:<10} {:8.3f} MB/step: {:.2f}x a ring all-reduce's {:.3f}\n", "(step)",
                   "gradient exchange", "rank 0", double(v.gradients) / 1e6 / steps_run, double(v.gradients) / double(v.ring),
                   double(v.ring) / 1e6 / steps_run);
    }
  }
  if (source.test && !stopping()) {
    const data::Dataset& test = *source.test;
    std::vector<int64_t> order(static_cast<size_t>(test.count()));
    for (int64_t i = 0; i < test.count(); ++i) order[i] = i;
    data::Batch b;
    double loss = 0.0;
    int64_t correct = 0, labelled = 0;
    std::vector<int64_t> per_class(static_cast<size_t>(3 * tg.classes), 0);
    for (int64_t first = 0; first < test.count(); first += batch) {
      const int64_t n = std::min(batch, test.count() - first);
      data::decode_batch(test, order, first, n, norm, &b, trainer.samples_of_this_rank(n));
      const model::StepStats st = trainer.evaluate(b.pixels.data(), b.labels.data(), b.count);
      loss += st.loss * double(st.labelled);
      correct += st.correct;
      labelled += st.labelled;
      for (size_t c = 0; c < per_class.size(); ++c) per_class[c] += st.per_class[c];
    }
    const double mean_loss = labelled > 0 ? loss / double(labelled) : 0.0;
    if (!lead) {
      // rank 0 reports
    } else if (tg.label_elements == 1) {
      fmt::print("test_accuracy {:.4f} test_loss {:.6f} ({} samples)\n", double(correct) / double(test.count()),
                 mean_loss, test.count());
    } else {
      // Mean IoU over the classes that occur in the labels or the predictions.
      double iou = 0.0;
      int64_t present = 0;
      for (int64_t c = 0; c < tg.classes; ++c) {
        const int64_t hits = per_class[c], unite = per_class[tg.classes + c] + per_class[2 * tg.classes + c] - hits;
        if (unite == 0) continue;
        iou += double(hits) / double(unite);
        ++present;
      }
      fmt::print("test_pixel_accuracy {:.4f} test_mean_iou {:.4f} test_loss {:.6f} ({} samples, {} labelled pixels)\n",
                 labelled > 0 ? double(correct) / double(labelled) : 0.0, present > 0 ? iou / double(present) : 0.0,
                 mean_loss, test.count(), labelled);
    }
  }
  if (!s.save.empty() && lead) {
    std::map<std::string, std::vector<float>> trained;
    for (const model::Parameter& p : trainer.parameters()) trained[p.name] = p.value;
    for (const auto& [name, data] : trainer.state_tensors()) trained[name] = data;
    model::save_onnx_with_initializers(s.model, trained, s.save);
    fmt::print("saved {}\n", s.save);
  }
  return stopping() ? 130 : 0;
}

}  // namespace

int train_model(const Args& args) {
  // Under mpirun: one process group for the run. Started on its own, no MPI call at all.
  std::shared_ptr<MpiProcessGroup> group;
  if (launched_by_mpirun()) group = std::make_shared<MpiProcessGroup>();
  if (!group || group->size() == 1) return train_run(args, group);
  try {
    return train_run(args, group);
  } catch (const Error& e) {
    // The others may be waiting for this rank in a collective: end them all.
    std::fprintf(stderr, "convgen: rank %d: %s\n", group->rank(), e.what());
    group->abort(static_cast<int>(e.code()));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "convgen: rank %d: internal error: %s\n", group->rank(), e.what());
    group->abort(static_cast<int>(ExitCode::Internal));
  } catch (...) {
    std::fprintf(stderr, "convgen: rank %d: internal error: an unknown exception\n", group->rank());
    group->abort(static_cast<int>(ExitCode::Internal));
  }
}

}  // namespace convgen::cli
