#include "testing/gradcheck.h"

#include <cmath>
#include <optional>
#include <random>

namespace cleave::testing {

Tensor random_f64(const Shape& shape, double low, double high, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> dist(low, high);
  Tensor t = Tensor::empty(shape, DType::kFloat64);
  double* p = t.data<double>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = dist(gen);
  return t;
}

namespace {

double weighted_sum(const Tensor& out, const Tensor& w) {
  const Tensor o = out.dtype() == DType::kFloat64 ? out : ops::cast(out, DType::kFloat64);
  const double* po = o.data<double>();
  const double* pw = w.data<double>();
  double s = 0;
  for (int64_t i = 0; i < o.numel(); ++i) s += po[i] * pw[i];
  return s;
}

}  // namespace

::testing::AssertionResult gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                                     const std::vector<Tensor>& inputs,
                                     const GradcheckOptions& options) {
  std::vector<int> check = options.inputs_to_check;
  if (check.empty()) {
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (is_floating(inputs[i].dtype())) check.push_back(static_cast<int>(i));
    }
  }
  // Leaves for the analytic pass.
  std::vector<Tensor> leaves;
  for (size_t i = 0; i < inputs.size(); ++i) {
    Tensor t = inputs[i].clone();
    if (std::find(check.begin(), check.end(), static_cast<int>(i)) != check.end()) {
      t.set_requires_grad(true);
    }
    leaves.push_back(t);
  }
  const Tensor out = fn(leaves);
  const Tensor w = random_f64(out.shape(), -1.0, 1.0, 7);
  const Tensor w_out = out.dtype() == DType::kFloat64 ? w : ops::cast(w, out.dtype());
  std::vector<Tensor> wrt;
  for (int i : check) wrt.push_back(leaves[i]);
  const std::vector<Tensor> analytic = autodiff::grad(out, wrt, w_out);

  for (size_t k = 0; k < check.size(); ++k) {
    const int i = check[k];
    Tensor a = analytic[k];
    if (a.dtype() != DType::kFloat64) a = ops::cast(a, DType::kFloat64);
    for (int64_t e = 0; e < inputs[i].numel(); ++e) {
      std::vector<Tensor> plus, minus;
      for (const Tensor& t : inputs) {
        plus.push_back(t.clone());
        minus.push_back(t.clone());
      }
      double step = options.eps;
      CLEAVE_DISPATCH_FLOAT(inputs[i].dtype(), [&] {
        plus[i].data<T>()[e] += static_cast<T>(step);
        minus[i].data<T>()[e] -= static_cast<T>(step);
      });
      double numeric;
      {
        NoGradGuard no_grad;
        numeric = (weighted_sum(fn(plus), w) - weighted_sum(fn(minus), w)) / (2 * step);
      }
      const double got = a.data<double>()[e];
      if (!(std::abs(got - numeric) <= options.atol + options.rtol * std::abs(numeric))) {
        return ::testing::AssertionFailure()
               << "gradient of input " << i << " (shape " << inputs[i].shape().to_string()
               << ") element " << e << ": analytic " << got << ", numeric " << numeric;
      }
    }
  }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult all_close(const Tensor& actual, const Tensor& expected, double atol,
                                     double rtol) {
  if (actual.shape() != expected.shape()) {
    return ::testing::AssertionFailure() << "shape " << actual.shape().to_string()
                                         << " != expected " << expected.shape().to_string();
  }
  const std::vector<double> a = actual.to_double_vector();
  const std::vector<double> b = expected.to_double_vector();
  double worst = 0;
  int64_t worst_i = -1;
  for (size_t i = 0; i < a.size(); ++i) {
    const double excess = std::abs(a[i] - b[i]) - (atol + rtol * std::abs(b[i]));
    if (excess > worst || std::isnan(a[i]) != std::isnan(b[i])) {
      worst = std::isnan(excess) ? 1e300 : excess;
      worst_i = static_cast<int64_t>(i);
    }
  }
  if (worst_i >= 0) {
    return ::testing::AssertionFailure()
           << "element " << worst_i << ": " << a[worst_i] << " vs expected " << b[worst_i]
           << " (atol " << atol << ", rtol " << rtol << ")";
  }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult throws_error(const std::function<void()>& fn,
                                        const std::vector<std::string>& fragments) {
  try {
    fn();
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (const std::string& f : fragments) {
      if (msg.find(f) == std::string::npos) {
        return ::testing::AssertionFailure()
               << "error message \"" << msg << "\" lacks \"" << f << "\"";
      }
    }
    return ::testing::AssertionSuccess();
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << "threw a non-cleave exception: " << e.what();
  }
  return ::testing::AssertionFailure() << "no error was thrown";
}

::testing::AssertionResult throws_error_of_kind(const std::function<void()>& fn, ErrorKind kind,
                                                const std::vector<std::string>& fragments) {
  std::optional<ErrorKind> thrown;
  ::testing::AssertionResult message = throws_error(
      [&] {
        try {
          fn();
        } catch (const Error& e) {
          thrown = e.kind();
          throw;
        }
      },
      fragments);
  if (!message) return message;
  if (*thrown != kind) {
    return ::testing::AssertionFailure() << "the error is of kind " << error_kind_name(*thrown)
                                         << "; expected " << error_kind_name(kind);
  }
  return ::testing::AssertionSuccess();
}

}  // namespace cleave::testing
