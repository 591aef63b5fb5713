// The generated sharding tests' harness (NOTE [Sharded operator check] in op_sharding.h).
#include "testing/op_sharding.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include <mutex>
#include <random>

#include "cleave/parallel/step_parallel.h"
#include "cleave/runtime/pipeline.h"
#include "cleave/runtime/sharded_parameters.h"
#include "testing/gradcheck.h"
#include "testing/ranks.h"

namespace cleave::testing {
namespace {

std::string label_of(const OpCase& c) {
  if (!c.label.empty()) return c.label;
  std::vector<std::string> shapes;
  for (const Tensor& t : c.inputs) shapes.push_back(t.shape().to_string());
  return fmt::format("{}{} {}", c.op, c.attrs.empty() ? "" : " " + c.attrs.to_string(),
                     fmt::join(shapes, " "));
}

bool wants_grad(const OpCase& c, size_t k) {
  return is_floating(c.inputs[k].dtype()) &&
         std::find(c.no_grad.begin(), c.no_grad.end(), static_cast<int>(k)) == c.no_grad.end() &&
         ir::Registry::global().get(c.op).grad != nullptr;
}

// The fixed weights of the scalar L = sum_k sum(y_k * w_k).
Tensor weight_of(const ir::TensorMeta& m, size_t k) {
  return ops::cast(f64(m.shape, 1000 + k, 0.5, 1.5), m.dtype);
}

Tensor weighted_sum(const std::vector<Tensor>& outs) {
  Tensor loss;
  for (size_t k = 0; k < outs.size(); ++k) {
    if (!is_floating(outs[k].dtype())) continue;
    Tensor term =
        ops::reduce_sum(ops::mul(outs[k], weight_of({outs[k].shape(), outs[k].dtype()}, k)));
    term = ops::cast(term, DType::kFloat64);
    loss = loss.defined() ? ops::add(loss, term) : term;
  }
  return loss.defined() ? loss : Tensor::scalar(0.0, DType::kFloat64);
}

struct Reference {
  std::vector<Tensor> outputs;
  std::vector<Tensor> grads;    // per input; undefined where none is checked
  std::vector<Tensor> written;  // an op that mutates its inputs: every input after the call
};

bool mutates(const OpCase& c) { return ir::Registry::global().get(c.op).mutates_inputs; }

Reference reference_of(const OpCase& c) {
  Reference r;
  std::vector<Tensor> inputs;
  for (size_t k = 0; k < c.inputs.size(); ++k) {
    Tensor t = c.inputs[k].clone();
    if (wants_grad(c, k)) t.set_requires_grad(true);
    inputs.push_back(t);
  }
  std::vector<Tensor> outs = ir::call(ir::Registry::global().get(c.op), inputs, c.attrs);
  for (const Tensor& t : outs) r.outputs.push_back(t.detach().clone());
  if (mutates(c)) {
    for (const Tensor& t : inputs) r.written.push_back(t.detach().clone());
  }
  r.grads.resize(c.inputs.size());
  std::vector<Tensor> wrt;
  std::vector<size_t> which;
  for (size_t k = 0; k < inputs.size(); ++k) {
    if (wants_grad(c, k)) {
      wrt.push_back(inputs[k]);
      which.push_back(k);
    }
  }
  if (!wrt.empty()) {
    const std::vector<Tensor> g = autodiff::grad(weighted_sum(outs), wrt);
    for (size_t i = 0; i < which.size(); ++i) {
      r.grads[which[i]] =
          g[i].defined() ? g[i].clone() : Tensor::zeros(wrt[i].shape(), wrt[i].dtype());
    }
  }
  return r;
}

// One sharded run on this thread's rank; returns what differed ("" when nothing).
std::string run_sharded(const OpCase& c, const Reference& ref, const ir::Strategy& strategy,
                        int rank) {
  std::vector<Tensor> params;
  for (const Tensor& t : c.inputs) params.push_back(t.clone());
  std::vector<Tensor> sinks(params.size());
  runtime::StepProgram p;
  p.name = "op_case";
  for (size_t k = 0; k < params.size(); ++k) {
    p.parameters.emplace_back(fmt::format("in{}", k), params[k]);
    if (wants_grad(c, k)) p.wrt.push_back(params[k]);
  }
  // Without a gradient to check (comparisons, ArgMax, Fill) the step is an evaluation.
  const bool train = !p.wrt.empty();
  const size_t first_output = train ? 1 : 0;
  p.forward = [&](const std::vector<Tensor>&) {
    ir::Primitive prim(c.op, c.attrs);
    prim.shard(strategy);
    std::vector<Tensor> syms;
    for (size_t k = 0; k < params.size(); ++k)
      syms.push_back(ir::Tracer::current()->add_parameter(params[k], fmt::format("in{}", k)));
    std::vector<Tensor> outs = prim(syms);
    if (!train) return outs;
    std::vector<Tensor> result{weighted_sum(outs)};
    result.insert(result.end(), outs.begin(), outs.end());
    return result;
  };
  if (train)
    p.update = [&](const std::vector<Tensor>& grads) {
      size_t i = 0;
      for (size_t k = 0; k < params.size(); ++k) {
        if (!wants_grad(c, k)) continue;
        const Tensor& g = grads[i++];
        if (!g.defined()) continue;
        sinks[k] = Tensor::zeros(g.shape(), g.dtype());
        ir::call(ir::Registry::global().get("Assign"), {sinks[k], g}, {});
      }
    };
  std::unique_ptr<runtime::CompiledStep> step = runtime::compile_step(p);
  const std::vector<Tensor> outs = step->run({});
  std::string why;
  for (size_t k = 0; k < ref.outputs.size(); ++k) {
    const auto ok = all_close(outs[k + first_output], ref.outputs[k], 1e-9, 1e-5);
    if (!ok) why += fmt::format(" output {}: {};", k, ok.message());
  }
  // This rank's slice of `whole` (a global value of input k's shape), as input k is laid out.
  auto slice_of = [&](const Tensor& whole, size_t k) {
    const std::optional<runtime::ParameterShard> shard = runtime::parameter_shard(params[k]);
    if (!shard) return whole;
    const Shape local = shard->layout.slice_shape(whole.shape());
    return ops::slice(whole, shard->layout.slice_offset(whole.shape(), rank), local.dims());
  };
  for (size_t k = 0; k < ref.written.size(); ++k) {
    const auto ok = all_close(params[k], slice_of(ref.written[k], k), 1e-9, 1e-5);
    if (!ok) why += fmt::format(" input {} as written: {};", k, ok.message());
  }
  for (size_t k = 0; k < params.size(); ++k) {
    if (!ref.grads[k].defined()) continue;
    const Tensor expected = slice_of(ref.grads[k], k);
    const Tensor actual =
        sinks[k].defined() ? sinks[k] : Tensor::zeros(expected.shape(), expected.dtype());
    const auto ok = all_close(actual, expected, 1e-9, 1e-5);
    if (!ok) why += fmt::format(" gradient of input {}: {};", k, ok.message());
  }
  return why;
}

}  // namespace

Tensor f64(const Shape& shape, uint64_t seed, double low, double high) {
  return random_f64(shape, low, high, seed);
}

Tensor positive(const Shape& shape, uint64_t seed) { return f64(shape, seed, 0.5, 2.0); }

ir::Attrs with(ir::Attrs attrs, const char* name, const ir::AttrValue& value) {
  attrs.set(name, value);
  return attrs;
}

void expect_all_equal_one_device(const std::vector<OpCase>& cases) {
  int runs = 0;
  const std::vector<ShardFailure> failures = check_sharded(cases, {1, 2, 3, 4, 6, 8}, &runs);
  for (size_t i = 0; i < failures.size() && i < 20; ++i) ADD_FAILURE() << failures[i].what;
  EXPECT_TRUE(failures.empty()) << failures.size() << " of " << runs << " runs failed";
  EXPECT_GT(runs, static_cast<int>(cases.size()));
}

std::vector<ir::Strategy> strategies_of(const OpCase& c, int64_t device_num) {
  const ir::OpDef& op = ir::Registry::global().get(c.op);
  std::vector<ir::TensorMeta> in, out;
  for (const Tensor& t : c.inputs) in.push_back({t.shape(), t.dtype()});
  out = op.infer({op, c.attrs, in});
  const parallel::RuleContext ctx{op, c.attrs, in, out, "op", "", device_num};
  return parallel::rule_of(op).strategies(ctx);
}

std::string plan_error(const OpCase& c, const ir::Strategy& strategy, int64_t device_num) {
  ir::Graph g;
  g.name = "plan_check";
  try {
    {
      ir::Tracer tracer(g);
      std::vector<Tensor> syms;
      for (size_t k = 0; k < c.inputs.size(); ++k) {
        syms.push_back(tracer.add_parameter(c.inputs[k], fmt::format("in{}", k)));
      }
      ir::Primitive prim(c.op, c.attrs);
      if (!strategy.empty() || c.inputs.empty()) prim.shard(strategy);
      const std::vector<Tensor> outs = prim(syms);
      for (const Tensor& t : outs) g.outputs.push_back(tracer.value_of(t));
    }
    parallel::plan_step_parallel(g, {.device_num = device_num});
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

void expect_plan_error(const OpCase& c, const ir::Strategy& strategy, int64_t device_num,
                       const std::vector<std::string>& fragments) {
  const std::string error = plan_error(c, strategy, device_num);
  ASSERT_FALSE(error.empty()) << c.op << " strategy " << ir::strategy_to_string(strategy) << " on "
                              << device_num << " devices was accepted";
  for (const std::string& f : fragments) {
    EXPECT_NE(error.find(f), std::string::npos) << "missing \"" << f << "\" in: " << error;
  }
}

std::vector<ShardFailure> check_sharded(const std::vector<OpCase>& cases,
                                        const std::vector<int>& device_counts, int* runs) {
  std::vector<ShardFailure> failures;
  std::vector<Reference> refs;
  for (const OpCase& c : cases) refs.push_back(reference_of(c));
  *runs = 0;
  const runtime::AutoParallelContext saved = runtime::get_auto_parallel_context();
  runtime::set_auto_parallel_context({.parallel_mode = runtime::SEMI_AUTO_PARALLEL});
  for (int n : device_counts) {
    struct Job {
      size_t c;
      ir::Strategy s;
    };
    std::vector<Job> jobs;
    for (size_t i = 0; i < cases.size(); ++i) {
      for (ir::Strategy& s : strategies_of(cases[i], n)) jobs.push_back({i, std::move(s)});
    }
    std::vector<std::vector<std::string>> results(jobs.size(), std::vector<std::string>(n));
    run_thread_job(n, [&](int rank) {
      for (size_t j = 0; j < jobs.size(); ++j) {
        try {
          results[j][static_cast<size_t>(rank)] =
              run_sharded(cases[jobs[j].c], refs[jobs[j].c], jobs[j].s, rank);
        } catch (const std::exception& e) {
          results[j][static_cast<size_t>(rank)] = std::string(" threw: ") + e.what();
        }
      }
    });
    for (size_t j = 0; j < jobs.size(); ++j) {
      for (int r = 0; r < n; ++r) {
        const std::string& why = results[j][static_cast<size_t>(r)];
        if (!why.empty()) {
          failures.push_back(
              {fmt::format("{} strategy {} on {} devices, rank {}:{}", label_of(cases[jobs[j].c]),
                           ir::strategy_to_string(jobs[j].s), n, r, why)});
        }
      }
    }
    *runs += static_cast<int>(jobs.size());
  }
  runtime::set_auto_parallel_context(saved);
  return failures;
}

}  // namespace cleave::testing
