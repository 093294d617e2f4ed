// The lowering pass of item_prefetch.h. Inside every item loop it adds a counter of
// the lines asked for (a one-element stack buffer); before each run of the inner loop
// it prefetches the next lines_per_visit lines of the plan's ranges, taken one after
// another, until every line was asked for once. Outside the inner loop: a test per
// FMA iteration cost 5-8% on 3x3 layers whose data were in cache. The prefetch is LLVM's
// own intrinsic with locality 3 (prefetcht0 on x86): Halide 14's Call::prefetch is
// fixed at locality 0 (prefetchnta), whose lines skip L2 on Intel and were refetched
// from memory by the item's next pass over them (1x1 256->64 backward-weights fell
// from 66 to 21-37 GF/s with it). The declaration of llvm.prefetch.p0i8 is in every
// x86 module Halide builds (its runtime's own prefetch helper calls it), so the
// extern call binds to the intrinsic, not to a new symbol.
#include "generator/conv/item_prefetch.h"

#include <algorithm>
#include <set>

#include <fmt/format.h>

namespace convgen {

namespace {

using namespace Halide;
using namespace Halide::Internal;

constexpr int kLineBytes = 64;

// A loop of the lowered kernel is `name` or a loop Halide derived from it (".rebased"
// when an RDom's where() bounds it, ".fused", ...).
bool is_loop(const std::string& loop, const std::string& name) {
  return loop == name || loop.rfind(name + ".", 0) == 0;
}

// The address of element `index` of the kernel argument `buffer` (its host pointer).
Expr element_address(const std::string& buffer, const Expr& index, int element_bytes) {
  Expr host = Call::make(UInt(64), Call::reinterpret, {Variable::make(Handle(), buffer)}, Call::PureIntrinsic);
  Expr offset = cast(UInt(64), cast(Int(64), index) * element_bytes);
  return Call::make(Handle(), Call::reinterpret, {host + offset}, Call::PureIntrinsic);
}

Stmt prefetch_line(const ItemPrefetch::Range& r, const Expr& line) {
  const int per_line = kLineBytes / r.element_bytes;
  // The extra line for an unaligned start stops at the range's last element.
  Expr address = element_address(r.buffer, r.first + min(line * per_line, r.elements - 1), r.element_bytes);
  // llvm.prefetch(address, rw = 0 read, locality = 3 all levels, cache = 1 data). The
  // name is LLVM 14's (typed pointers); with opaque pointers (LLVM 15+) it would be
  // llvm.prefetch.p0, and an undeclared name becomes a call LLVM's verifier rejects.
  return Evaluate::make(Call::make(Int(32), "llvm.prefetch.p0i8", {address, 0, 3, 1}, Call::Extern));
}

// One iteration's prefetch: line `line` of the concatenated ranges, or nothing past them.
Stmt prefetch_of_line(const ItemPrefetch& plan, const Expr& line) {
  Stmt chain;
  int start = 0;
  std::vector<std::pair<Expr, Stmt>> cases;
  for (const auto& r : plan.ranges) {
    const int lines = prefetch_lines(r);
    cases.emplace_back(line < start + lines, prefetch_line(r, line - start));
    start += lines;
  }
  for (auto it = cases.rbegin(); it != cases.rend(); ++it)
    chain = IfThenElse::make(it->first, it->second, chain);
  return chain;
}

// A mutator that knows the variables bound (by LetStmt or For) around the node it visits.
class BoundNamesMutator : public IRMutator {
 protected:
  explicit BoundNamesMutator(std::set<std::string> bound = {}) : bound_(std::move(bound)) {}

  // Binds a name for the guard's life; a name bound further out stays bound after it.
  class Binding {
   public:
    Binding(std::set<std::string>& bound, const std::string& name)
        : bound_(bound), name_(name), fresh_(bound.insert(name).second) {}
    ~Binding() {
      if (fresh_) bound_.erase(name_);
    }
    Binding(const Binding&) = delete;
    Binding& operator=(const Binding&) = delete;

   private:
    std::set<std::string>& bound_;
    std::string name_;
    bool fresh_;
  };

  std::set<std::string> bound_;

  using IRMutator::visit;
  Stmt visit(const LetStmt* op) override {
    Binding b(bound_, op->name);
    return IRMutator::visit(op);
  }
};

class VariableNames : public IRVisitor {
 public:
  std::set<std::string> names;

 private:
  using IRVisitor::visit;
  void visit(const Variable* op) override { names.insert(op->name); }
};

// The loop variables a plan's ranges are written in.
std::set<std::string> variables_of(const ItemPrefetch& plan) {
  VariableNames v;
  for (const auto& r : plan.ranges) r.first.accept(&v);
  return v.names;
}

int total_lines(const ItemPrefetch& plan) {
  int lines = 0;
  for (const auto& r : plan.ranges) lines += prefetch_lines(r);
  return lines;
}

// One counter's scope inside an item: the item loop's body, or the body of a parallel
// loop inside it, whose iterations (threads) each take an equal share of the item's
// lines with a counter of their own -- a counter shared by threads would be a data race
// and would leave most lines to one core's caches. Adds the prefetches before each run
// of the plan's inner loop where every variable of the plan's ranges is bound.
class CounterScope : public BoundNamesMutator {
 public:
  CounterScope(const ItemPrefetch& plan, int* counters, std::set<std::string> bound, Expr share_index, Expr shares)
      : BoundNamesMutator(std::move(bound)), plan_(plan), counters_(counters), needed_(variables_of(plan)) {
    counter_ = fmt::format("item_prefetch_counter{}", (*counters_)++);
    const int lines = total_lines(plan);
    Expr share = (lines + shares - 1) / shares;
    first_ = share_index * share;
    end_ = min(first_ + share, lines);
  }

  // The scope's body with its counter, or `body` unchanged when it holds no inner loop.
  Stmt run(const Stmt& body) {
    Stmt with = mutate(body);
    if (!added_) return with;
    Stmt init = Store::make(counter_, first_, 0, Parameter(), const_true(), ModulusRemainder());
    return Allocate::make(counter_, Int(32), MemoryType::Stack, {1}, const_true(), Block::make(init, with));
  }

 private:
  using BoundNamesMutator::visit;
  const ItemPrefetch& plan_;
  int* counters_;
  std::string counter_;
  std::set<std::string> needed_;
  Expr first_, end_;
  int added_ = 0;

  Stmt visit(const For* op) override {
    Stmt result;
    {
      Binding b(bound_, op->name);
      if (op->for_type == ForType::Parallel) {
        // A scope of its own per iteration: its share of the lines, its own counter.
        Expr index = Variable::make(Int(32), op->name) - op->min;
        Stmt body = CounterScope(plan_, counters_, bound_, index, op->extent).run(op->body);
        result = body.same_as(op->body) ? Stmt(op)
                                        : For::make(op->name, op->min, op->extent, op->for_type, op->device_api, body);
      } else {
        result = IRMutator::visit(op);
      }
    }
    if (op->for_type == ForType::Parallel || !is_loop(op->name, plan_.inner_loop)) return result;
    if (!std::includes(bound_.begin(), bound_.end(), needed_.begin(), needed_.end())) return result;
    ++added_;
    // Before each run of the inner loop: the scope's next lines_per_visit lines.
    const std::string first = counter_ + ".first", line = counter_ + ".line";
    Expr first_line = Variable::make(Int(32), first);
    Expr at = first_line + Variable::make(Int(32), line);
    Stmt bump = Store::make(counter_, first_line + plan_.lines_per_visit, 0, Parameter(), const_true(),
                            ModulusRemainder());
    Stmt burst = For::make(line, 0, plan_.lines_per_visit, ForType::Serial, DeviceAPI::None,
                           IfThenElse::make(at < end_, prefetch_of_line(plan_, at)));
    Expr load = Load::make(Int(32), counter_, 0, Buffer<>(), Parameter(), const_true(), ModulusRemainder());
    return LetStmt::make(first, load, Block::make({bump, burst, result}));
  }
};

// Finds each plan's item loops. Halide may lower a loop differently from the schedule's
// names (a 2-iteration loop peeled into two copies, a 1-iteration loop gone): then the
// kernel is left without that prefetch, as it computes the same either way; the unit
// tests hold the usual forms to having it.
class ItemPrefetchPass : public BoundNamesMutator {
 public:
  explicit ItemPrefetchPass(std::vector<ItemPrefetch> plans) : plans_(std::move(plans)) {}

 private:
  using BoundNamesMutator::visit;
  std::vector<ItemPrefetch> plans_;
  int counters_ = 0;

  Stmt visit(const For* op) override {
    Stmt body;
    {
      Binding b(bound_, op->name);
      body = mutate(op->body);
      for (const auto& plan : plans_) {
        if (!is_loop(op->name, plan.item_loop)) continue;
        // The item loop's body is one scope: one counter per item, and per thread when
        // the item loop itself runs in parallel (its iterations are items).
        body = CounterScope(plan, &counters_, bound_, 0, 1).run(body);
      }
    }
    if (body.same_as(op->body)) return op;
    return For::make(op->name, op->min, op->extent, op->for_type, op->device_api, body);
  }
};

}  // namespace

Expr item_loop_var(const std::string& loop_name) { return Variable::make(Int(32), loop_name); }

int prefetch_lines(const ItemPrefetch::Range& r) {
  const int per_line = kLineBytes / r.element_bytes;
  return (r.elements + per_line - 1) / per_line + 1;  // +1: an unaligned start
}

ItemPrefetch::Range clamped_range(const std::string& buffer, const Expr& first, int64_t elements, int64_t total) {
  const int n = int(std::min(elements, total));
  return {buffer, min(first, int(total - n)), n};
}

void spread_over_visits(ItemPrefetch& plan, int64_t visits) {
  const int64_t lines = total_lines(plan);
  plan.lines_per_visit = int(std::max<int64_t>(1, (lines + visits - 1) / std::max<int64_t>(visits, 1)));
}

IRMutator* item_prefetch_pass(const std::vector<ItemPrefetch>& plans) { return new ItemPrefetchPass(plans); }

}  // namespace convgen
