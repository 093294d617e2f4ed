#include "generator/object_code/object_code.h"

#include <cstdio>
#include <map>
#include <set>
#include <stdexcept>

#include <llvm/IR/Constants.h>
#include <llvm/IR/Function.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Instructions.h>
#include <llvm/IR/IntrinsicsX86.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Metadata.h>
#include <llvm/IR/Module.h>
#include <llvm/Linker/Linker.h>
#include <llvm/Support/raw_ostream.h>

namespace convgen {

namespace {

using namespace Halide;
using namespace Halide::Internal;

// Suffixes of the two variants' functions (exported: the entry point's object calls them).
// Halide names a variant's parallel loop bodies after it, so the suffix finds those too.
constexpr const char* kCachedSuffix = "__cached_stores";
constexpr const char* kStreamingSuffix = "__streaming_stores";

// The bytes of one native vector of the target: what a non-temporal store writes at once
// and the alignment it needs.
int vector_bytes(const Target& target) { return target.natural_vector_size<float>() * 4; }

std::vector<std::string> output_buffer_names(const Pipeline& pipeline) {
  std::vector<std::string> names;
  for (const Func& f : pipeline.outputs())
    for (const OutputImageParam& b : f.output_buffers()) names.push_back(b.name());
  return names;
}

// The streaming variant's code: each function of the lowered pipeline (its body and the
// parallel loop bodies Halide 14 lowers into functions of their own, named after it)
// copied under the variant's name, with references to those loop bodies renamed, and
// its stores to the outputs given a copy of the output's parameter that promises the
// host pointer aligned to a vector -- Halide's code generator reads the promise off each
// store's parameter, and gives whole-vector stores at vector offsets their full
// alignment. The original parameters stay as they were: the ordinary variant is
// generated from the same lowered functions.
class StreamingVariant : public IRMutator {
 public:
  StreamingVariant(std::string from, std::string to, const std::vector<std::string>& outputs, int alignment)
      : from_(std::move(from)), to_(std::move(to)), outputs_(outputs.begin(), outputs.end()), alignment_(alignment) {}

  // `name` with the ordinary variant's prefix replaced, or "" if it has none.
  std::string renamed(const std::string& name) const {
    return name.rfind(from_, 0) == 0 ? to_ + name.substr(from_.size()) : std::string();
  }

 private:
  using IRMutator::visit;
  Expr visit(const Variable* op) override {
    // Halide refers to a loop body's function as "::NAME".
    if (op->name.rfind("::", 0) == 0) {
      const std::string to = renamed(op->name.substr(2));
      if (!to.empty()) return Variable::make(op->type, "::" + to);
    }
    return IRMutator::visit(op);
  }

  Stmt visit(const Store* op) override {
    Stmt s = IRMutator::visit(op);
    op = s.as<Store>();
    if (!op || !op->param.defined() || !outputs_.count(op->name)) return s;
    return Store::make(op->name, op->value, op->index, aligned_copy(op->param), op->predicate, op->alignment);
  }

  Parameter aligned_copy(const Parameter& p) {
    auto it = copies_.find(p.name());
    if (it != copies_.end()) return it->second;
    Parameter copy(p.type(), p.is_buffer(), p.dimensions(), p.name());
    copy.set_host_alignment(alignment_);
    return copies_.emplace(p.name(), copy).first->second;
  }

  std::string from_, to_;
  std::set<std::string> outputs_;
  int alignment_;
  std::map<std::string, Parameter> copies_;
};

// The exported entry point: the streaming variant when every output's host pointer is
// aligned to a vector, else the ordinary one; either's status is returned.
LoweredFunc dispatcher(const std::string& name, const LoweredFunc& base, const std::vector<std::string>& outputs,
                       int alignment) {
  std::vector<Expr> call_args;
  for (const LoweredArgument& a : base.args) {
    // Scalars would need Halide's argument-passing types; convgen kernels take buffers.
    if (!a.is_buffer()) throw std::runtime_error(name + ": streaming stores: a scalar argument (" + a.name + ")");
    call_args.push_back(Variable::make(type_of<halide_buffer_t*>(), a.name + ".buffer"));
  }
  Expr aligned = const_true();
  for (const std::string& output : outputs) {
    Expr host = Call::make(type_of<void*>(), Call::buffer_get_host,
                           {Variable::make(type_of<halide_buffer_t*>(), output + ".buffer")}, Call::Extern);
    Expr address = Call::make(UInt(64), Call::reinterpret, {host}, Call::PureIntrinsic);
    aligned = aligned && (address % make_const(UInt(64), alignment)) == make_zero(UInt(64));
  }
  auto call = [&](const std::string& variant) {
    const std::string result = name + "_status";
    Expr status = Variable::make(Int(32), result);
    return LetStmt::make(result, Call::make(Int(32), variant, call_args, Call::Extern),
                         AssertStmt::make(status == 0, status));
  };
  Stmt body = IfThenElse::make(aligned, call(name + kStreamingSuffix), call(name + kCachedSuffix));
  return LoweredFunc(name, base.args, body, LinkageType::ExternalPlusMetadata);
}

// A kernel with streaming stores as three Halide modules, each generated into LLVM code
// on its own: the ordinary variant, the streaming variant and the entry point. Apart, LLVM
// never inlines a variant into the entry point, where its stores would no longer be told
// apart by function; and each variant is generated for the request's own target, so it
// is exactly the kernel an ordinary compilation makes but for its stores' alignment.
struct StreamingModules {
  Module cached, streaming, entry;
};

StreamingModules streaming_modules(const KernelObjectRequest& r, const std::vector<std::string>& outputs) {
  Pipeline pipeline = r.pipeline;  // a handle: compiling needs a non-const one
  // The variants leave the Halide runtime to the entry point's module (or the caller's).
  const Target variant_target = r.target.with_feature(Target::NoRuntime);
  const Module lowered =
      pipeline.compile_to_module(r.arguments, r.name + kCachedSuffix, variant_target, LinkageType::External);
  if (!lowered.submodules().empty() || !lowered.buffers().empty() || !lowered.external_code().empty())
    throw std::runtime_error(r.name + ": streaming stores: the pipeline has submodules, constant buffers or "
                                      "external code, which two variants would define twice");
  StreamingModules m{Module(r.name + kCachedSuffix, variant_target), Module(r.name + kStreamingSuffix, variant_target),
                     // Its status check is an assertion, which no_asserts would drop.
                     Module(r.name, r.target.without_feature(Target::NoAsserts))};
  // strict_float (the epilogues' Clip and HardSwish) keeps fast-math off in code
  // generation, and in the linked module's machine-code options: all three say the same.
  for (Module* part : {&m.cached, &m.streaming, &m.entry}) part->set_any_strict_float(lowered.any_strict_float());
  const LoweredFunc* base = nullptr;
  StreamingVariant variant(r.name + kCachedSuffix, r.name + kStreamingSuffix, outputs, vector_bytes(r.target));
  for (const LoweredFunc& f : lowered.functions()) {
    m.cached.append(f);
    if (f.name == r.name + kCachedSuffix) base = &f;
    LoweredFunc copy = f;
    copy.name = variant.renamed(f.name);
    if (copy.name.empty())
      throw std::runtime_error(r.name + ": streaming stores: a lowered function (" + f.name + ") not named after it");
    copy.body = variant.mutate(f.body);
    m.streaming.append(copy);
  }
  if (!base) throw std::runtime_error(r.name + ": streaming stores: the lowered module has no pipeline function");
  m.entry.append(dispatcher(r.name, *base, outputs, vector_bytes(r.target)));
  return m;
}

// The buffer a Halide load or store touches, from the type-based alias metadata Halide
// gives each one: a chain of scalar type nodes from the access up to the root "Halide
// buffer", whose child names the buffer.
std::string tbaa_buffer(const llvm::Instruction& inst) {
  const llvm::MDNode* tag = inst.getMetadata(llvm::LLVMContext::MD_tbaa);
  if (!tag || tag->getNumOperands() < 1) return {};
  const auto* node = llvm::dyn_cast<llvm::MDNode>(tag->getOperand(0));
  while (node && node->getNumOperands() >= 2) {
    const auto* name = llvm::dyn_cast<llvm::MDString>(node->getOperand(0));
    const auto* parent = llvm::dyn_cast<llvm::MDNode>(node->getOperand(1));
    if (!name || !parent || parent->getNumOperands() < 1) return {};
    const auto* parent_name = llvm::dyn_cast<llvm::MDString>(parent->getOperand(0));
    if (parent_name && parent_name->getString() == "Halide buffer") return name->getString().str();
    node = parent;
  }
  return {};
}

// Marks non-temporal the stores of the streaming variant (and its parallel loop bodies)
// that write whole vectors, aligned to a vector, into an output. Others -- partial
// vectors, scalars, masked stores, the staging buffers -- stay ordinary stores: a
// non-temporal store narrower than a line, or unaligned, would be split into scalar ones.
int mark_streaming_stores(llvm::Module& module, const std::string& variant, const std::vector<std::string>& outputs,
                          int vector_bytes) {
  const std::set<std::string> names(outputs.begin(), outputs.end());
  llvm::LLVMContext& context = module.getContext();
  llvm::MDNode* non_temporal = llvm::MDNode::get(
      context, {llvm::ConstantAsMetadata::get(llvm::ConstantInt::get(llvm::Type::getInt32Ty(context), 1))});
  const llvm::DataLayout& layout = module.getDataLayout();
  int marked = 0;
  for (llvm::Function& f : module) {
    if (f.getName().find(variant) == llvm::StringRef::npos) continue;
    for (llvm::BasicBlock& block : f) {
      for (llvm::Instruction& inst : block) {
        auto* store = llvm::dyn_cast<llvm::StoreInst>(&inst);
        if (!store || store->isVolatile() || !store->getValueOperand()->getType()->isVectorTy()) continue;
        const uint64_t bytes = layout.getTypeStoreSize(store->getValueOperand()->getType()).getFixedSize();
        if (bytes % vector_bytes != 0 || store->getAlign().value() < uint64_t(vector_bytes)) continue;
        if (!names.count(tbaa_buffer(*store))) continue;
        store->setMetadata(llvm::LLVMContext::MD_nontemporal, non_temporal);
        ++marked;
      }
    }
  }
  return marked;
}

// The streaming variant's stores are not ordered with later stores of other threads: an
// sfence after its call makes them visible before the entry point returns (a parallel
// loop's workers are ordered by the locked operations that end their tasks).
void fence_after_calls(llvm::Module& module, const std::string& callee) {
  llvm::Function* sfence = llvm::Intrinsic::getDeclaration(&module, llvm::Intrinsic::x86_sse_sfence);
  std::vector<llvm::CallInst*> calls;
  for (llvm::Function& f : module)
    for (llvm::BasicBlock& block : f)
      for (llvm::Instruction& inst : block)
        if (auto* call = llvm::dyn_cast<llvm::CallInst>(&inst))
          if (call->getCalledFunction() && call->getCalledFunction()->getName() == callee) calls.push_back(call);
  if (calls.empty()) throw std::runtime_error(callee + ": streaming stores: the entry point never calls the variant");
  for (llvm::CallInst* call : calls) {
    llvm::IRBuilder<> builder(call->getNextNode());
    builder.CreateCall(sfence);
  }
}

// LLVM code of a kernel with streaming stores: the three modules generated apart, the
// streaming variant's output stores marked, then linked into one module.
std::unique_ptr<llvm::Module> streaming_code(const StreamingModules& m, const KernelObjectRequest& r,
                                             const std::vector<std::string>& outputs, llvm::LLVMContext& context,
                                             KernelObjectReport* report) {
  std::unique_ptr<llvm::Module> code = codegen_llvm(m.entry, context);
  fence_after_calls(*code, r.name + kStreamingSuffix);
  std::unique_ptr<llvm::Module> streaming = codegen_llvm(m.streaming, context);
  report->streaming_stores =
      mark_streaming_stores(*streaming, r.name + kStreamingSuffix, outputs, vector_bytes(r.target));
  // linkModules returns true on an error (it reports it through the context).
  if (llvm::Linker::linkModules(*code, std::move(streaming)) ||
      llvm::Linker::linkModules(*code, codegen_llvm(m.cached, context)))
    throw std::runtime_error(r.name + ": streaming stores: linking the variants' code failed");
  return code;
}

void write_object(llvm::Module& module, const std::string& path) {
  auto out = make_raw_fd_ostream(path);
  compile_llvm_module_to_object(module, *out);
  out->flush();
  if (out->has_error()) throw std::runtime_error(path + ": cannot write the object file");
}

}  // namespace

KernelObjectReport compile_kernel_object(const KernelObjectRequest& r, const std::string& object_path) {
  KernelObjectReport report;
  if (!r.streaming_output_stores) {
    Pipeline pipeline = r.pipeline;
    pipeline.compile_to_object(object_path, r.arguments, r.name, r.target);
    return report;
  }
  const std::vector<std::string> outputs = output_buffer_names(r.pipeline);
  llvm::LLVMContext context;
  write_object(*streaming_code(streaming_modules(r, outputs), r, outputs, context, &report), object_path);
  return report;
}

KernelObjectReport compile_kernel_library(const KernelObjectRequest& r, const std::string& prefix, bool emit_assembly) {
  KernelObjectReport report;
  if (!r.streaming_output_stores) {
    Pipeline pipeline = r.pipeline;
    pipeline.compile_to_static_library(prefix, r.arguments, r.name, r.target);
    if (emit_assembly) pipeline.compile_to_assembly(prefix + ".s", r.arguments, r.name, r.target);
    return report;
  }
  const std::vector<std::string> outputs = output_buffer_names(r.pipeline);
  const StreamingModules modules = streaming_modules(r, outputs);
  modules.entry.compile({{OutputFileType::c_header, prefix + ".h"}});
  llvm::LLVMContext context;
  std::unique_ptr<llvm::Module> code = streaming_code(modules, r, outputs, context, &report);
  const std::string object = prefix + ".o";
  write_object(*code, object);
  if (emit_assembly) {
    auto out = make_raw_fd_ostream(prefix + ".s");
    compile_llvm_module_to_assembly(*code, *out);
  }
  create_static_library({object}, r.target, prefix + ".a");
  std::remove(object.c_str());
  return report;
}

}  // namespace convgen
