#include "kernels/cpu/norm.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "kernels/cpu/loops.h"
#include "kernels/cpu/onednn.h"

namespace cleave::kernels::cpu {

std::string BatchNormGeometry::key() const {
  return fmt::format("x{},{},{} eps{} {}", n, c, spatial, epsilon,
                     training ? "training" : "inference");
}

std::string LayerNormGeometry::key() const {
  return fmt::format("x{},{} eps{}", rows, cols, epsilon);
}

namespace {

using dnnl::memory;
using tag = memory::format_tag;
using dt = memory::data_type;
using flags = dnnl::normalization_flags;

// ---------------------------------------------------------------------------------------------
// Reference loops (Float64, and Float32 tensors with no elements, which oneDNN rejects).
// ---------------------------------------------------------------------------------------------

template <typename T>
void reference_bn_forward(const BatchNormGeometry& g, const T* x, const T* gamma, const T* beta,
                          const T* running_mean, const T* running_var, T* y, T* mean_out,
                          T* var_out) {
  const int64_t m = g.n * g.spatial;
#pragma omp parallel for if (g.n * g.c * g.spatial > kParallelGrain)
  for (int64_t c = 0; c < g.c; ++c) {
    T mean = 0, var = 0;
    if (g.training) {
      for (int64_t n = 0; n < g.n; ++n) {
        const T* p = x + (n * g.c + c) * g.spatial;
        for (int64_t s = 0; s < g.spatial; ++s) mean += p[s];
      }
      mean /= T(m);
      for (int64_t n = 0; n < g.n; ++n) {
        const T* p = x + (n * g.c + c) * g.spatial;
        for (int64_t s = 0; s < g.spatial; ++s) var += (p[s] - mean) * (p[s] - mean);
      }
      var /= T(m);
    } else {
      mean = running_mean[c];
      var = running_var[c];
    }
    mean_out[c] = mean;
    var_out[c] = var;
    const T scale = gamma[c] / std::sqrt(var + T(g.epsilon));
    for (int64_t n = 0; n < g.n; ++n) {
      const T* p = x + (n * g.c + c) * g.spatial;
      T* q = y + (n * g.c + c) * g.spatial;
      for (int64_t s = 0; s < g.spatial; ++s) q[s] = (p[s] - mean) * scale + beta[c];
    }
  }
}

template <typename T>
void reference_bn_backward(const BatchNormGeometry& g, const T* dy, const T* x, const T* gamma,
                           const T* mean, const T* var, T* dx, T* dgamma, T* dbeta, T* dmean,
                           T* dvar) {
  const T m = T(g.n * g.spatial);
#pragma omp parallel for if (g.n * g.c * g.spatial > kParallelGrain)
  for (int64_t c = 0; c < g.c; ++c) {
    const T rstd = T(1) / std::sqrt(var[c] + T(g.epsilon));
    T sum_dy = 0, sum_dy_xhat = 0;
    for (int64_t n = 0; n < g.n; ++n) {
      const T* p = x + (n * g.c + c) * g.spatial;
      const T* d = dy + (n * g.c + c) * g.spatial;
      for (int64_t s = 0; s < g.spatial; ++s) {
        sum_dy += d[s];
        sum_dy_xhat += d[s] * (p[s] - mean[c]) * rstd;
      }
    }
    dbeta[c] = sum_dy;
    dgamma[c] = sum_dy_xhat;
    dmean[c] = g.training ? T(0) : -gamma[c] * rstd * sum_dy;
    dvar[c] = g.training ? T(0) : T(-0.5) * gamma[c] * rstd * rstd * sum_dy_xhat;
    for (int64_t n = 0; n < g.n; ++n) {
      const T* p = x + (n * g.c + c) * g.spatial;
      const T* d = dy + (n * g.c + c) * g.spatial;
      T* q = dx + (n * g.c + c) * g.spatial;
      for (int64_t s = 0; s < g.spatial; ++s) {
        if (g.training) {
          const T xhat = (p[s] - mean[c]) * rstd;
          q[s] = gamma[c] * rstd * (d[s] - sum_dy / m - xhat * sum_dy_xhat / m);
        } else {
          q[s] = gamma[c] * rstd * d[s];
        }
      }
    }
  }
}

template <typename T>
void reference_ln_forward(const LayerNormGeometry& g, const T* x, const T* gamma, const T* beta,
                          T* y, T* mean_out, T* var_out) {
#pragma omp parallel for if (g.rows * g.cols > kParallelGrain)
  for (int64_t r = 0; r < g.rows; ++r) {
    const T* p = x + r * g.cols;
    T mean = 0, var = 0;
    for (int64_t k = 0; k < g.cols; ++k) mean += p[k];
    mean /= T(g.cols);
    for (int64_t k = 0; k < g.cols; ++k) var += (p[k] - mean) * (p[k] - mean);
    var /= T(g.cols);
    mean_out[r] = mean;
    var_out[r] = var;
    const T rstd = T(1) / std::sqrt(var + T(g.epsilon));
    T* q = y + r * g.cols;
    for (int64_t k = 0; k < g.cols; ++k) q[k] = gamma[k] * (p[k] - mean) * rstd + beta[k];
  }
}

template <typename T>
void reference_ln_backward(const LayerNormGeometry& g, const T* dy, const T* x, const T* gamma,
                           const T* mean, const T* var, T* dx, T* dgamma, T* dbeta) {
  auto rstd = [&](int64_t r) { return T(1) / std::sqrt(var[r] + T(g.epsilon)); };
#pragma omp parallel for if (g.rows * g.cols > kParallelGrain)
  for (int64_t k = 0; k < g.cols; ++k) {
    T sum_dy = 0, sum_dy_xhat = 0;
    for (int64_t r = 0; r < g.rows; ++r) {
      const T d = dy[r * g.cols + k];
      sum_dy += d;
      sum_dy_xhat += d * (x[r * g.cols + k] - mean[r]) * rstd(r);
    }
    dbeta[k] = sum_dy;
    dgamma[k] = sum_dy_xhat;
  }
#pragma omp parallel for if (g.rows * g.cols > kParallelGrain)
  for (int64_t r = 0; r < g.rows; ++r) {
    const T* p = x + r * g.cols;
    const T* d = dy + r * g.cols;
    const T s = rstd(r);
    T mean_gdy = 0, mean_gdy_xhat = 0;
    for (int64_t k = 0; k < g.cols; ++k) {
      mean_gdy += gamma[k] * d[k];
      mean_gdy_xhat += gamma[k] * d[k] * (p[k] - mean[r]) * s;
    }
    mean_gdy /= T(g.cols);
    mean_gdy_xhat /= T(g.cols);
    T* q = dx + r * g.cols;
    for (int64_t k = 0; k < g.cols; ++k) {
      const T xhat = (p[k] - mean[r]) * s;
      q[k] = s * (gamma[k] * d[k] - mean_gdy - xhat * mean_gdy_xhat);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Float32: oneDNN with plain memory. Batch norm sees x as (n, c, spatial, 1) in nchw, layer norm
// as (rows, cols) in row-major (ab) with per-row statistics (a).
// ---------------------------------------------------------------------------------------------

memory::desc bn_data_desc(const BatchNormGeometry& g) {
  return memory::desc({g.n, g.c, g.spatial, 1}, dt::f32, tag::nchw);
}

flags bn_flags(const BatchNormGeometry& g) {
  const flags f = flags::use_scale | flags::use_shift;
  return g.training ? f : f | flags::use_global_stats;
}

dnnl::batch_normalization_forward::primitive_desc bn_forward_pd(const BatchNormGeometry& g,
                                                                dnnl::prop_kind prop) {
  dnnl::batch_normalization_forward::desc desc(prop, bn_data_desc(g), static_cast<float>(g.epsilon),
                                               bn_flags(g));
  return {desc, onednn_engine()};
}

memory channel_memory(int64_t c, const Tensor& t) {
  return memory(memory::desc({c}, dt::f32, tag::a), onednn_engine(), t.raw_data());
}

void onednn_bn_forward(const BatchNormGeometry& g, const Tensor& x, const Tensor& gamma,
                       const Tensor& beta, const Tensor& running_mean, const Tensor& running_var,
                       const Tensor& y, const Tensor& mean_out, const Tensor& var_out) {
  const auto prop =
      g.training ? dnnl::prop_kind::forward_training : dnnl::prop_kind::forward_inference;
  auto& prim = cached_primitive<dnnl::batch_normalization_forward>("BatchNorm f32 " + g.key(), [&] {
    return dnnl::batch_normalization_forward(bn_forward_pd(g, prop));
  });
  // Training writes the batch statistics straight into the outputs; inference reads the running
  // statistics and returns copies of them.
  if (!g.training) {
    mean_out.copy_from(running_mean);
    var_out.copy_from(running_var);
  }
  const memory::desc data = bn_data_desc(g);
  memory src(data, onednn_engine(), x.raw_data());
  memory dst(data, onednn_engine(), y.raw_data());
  prim.execute(onednn_stream(), {{DNNL_ARG_SRC, src},
                                 {DNNL_ARG_DST, dst},
                                 {DNNL_ARG_SCALE, channel_memory(g.c, gamma)},
                                 {DNNL_ARG_SHIFT, channel_memory(g.c, beta)},
                                 {DNNL_ARG_MEAN, channel_memory(g.c, mean_out)},
                                 {DNNL_ARG_VARIANCE, channel_memory(g.c, var_out)}});
  onednn_stream().wait();
}

void onednn_bn_backward(const BatchNormGeometry& g, const Tensor& dy, const Tensor& x,
                        const Tensor& gamma, const Tensor& mean, const Tensor& var,
                        const Tensor& dx, const Tensor& dgamma, const Tensor& dbeta,
                        const Tensor& dmean, const Tensor& dvar) {
  auto& prim =
      cached_primitive<dnnl::batch_normalization_backward>("BatchNormGrad f32 " + g.key(), [&] {
        const memory::desc data = bn_data_desc(g);
        dnnl::batch_normalization_backward::desc desc(dnnl::prop_kind::backward, data, data,
                                                      static_cast<float>(g.epsilon), bn_flags(g));
        return dnnl::batch_normalization_backward(
            dnnl::batch_normalization_backward::primitive_desc(
                desc, onednn_engine(), bn_forward_pd(g, dnnl::prop_kind::forward_training)));
      });
  const memory::desc data = bn_data_desc(g);
  memory src(data, onednn_engine(), x.raw_data());
  memory diff_dst(data, onednn_engine(), dy.raw_data());
  memory diff_src(data, onednn_engine(), dx.raw_data());
  prim.execute(onednn_stream(), {{DNNL_ARG_SRC, src},
                                 {DNNL_ARG_DIFF_DST, diff_dst},
                                 {DNNL_ARG_DIFF_SRC, diff_src},
                                 {DNNL_ARG_SCALE, channel_memory(g.c, gamma)},
                                 {DNNL_ARG_MEAN, channel_memory(g.c, mean)},
                                 {DNNL_ARG_VARIANCE, channel_memory(g.c, var)},
                                 {DNNL_ARG_DIFF_SCALE, channel_memory(g.c, dgamma)},
                                 {DNNL_ARG_DIFF_SHIFT, channel_memory(g.c, dbeta)}});
  onednn_stream().wait();
  // The running-statistics gradients are per channel: d/dmean of gamma·(x − mean)·rstd summed
  // against dy is −gamma·rstd·dbeta; d/dvar is −½·gamma·rstd²·dgamma.
  const float* pg = gamma.data<float>();
  const float* pv = var.data<float>();
  const float* pdg = dgamma.data<float>();
  const float* pdb = dbeta.data<float>();
  float* pdm = dmean.data<float>();
  float* pdv = dvar.data<float>();
  for (int64_t c = 0; c < g.c; ++c) {
    if (g.training) {
      pdm[c] = pdv[c] = 0;
      continue;
    }
    const float rstd = 1.0f / std::sqrt(pv[c] + static_cast<float>(g.epsilon));
    pdm[c] = -pg[c] * rstd * pdb[c];
    pdv[c] = -0.5f * pg[c] * rstd * rstd * pdg[c];
  }
}

struct LnDescs {
  memory::desc data, stat;
};

LnDescs ln_descs(const LayerNormGeometry& g) {
  return {memory::desc({g.rows, g.cols}, dt::f32, tag::ab),
          memory::desc({g.rows}, dt::f32, tag::a)};
}

dnnl::layer_normalization_forward::primitive_desc ln_forward_pd(const LayerNormGeometry& g) {
  const LnDescs d = ln_descs(g);
  dnnl::layer_normalization_forward::desc desc(dnnl::prop_kind::forward_training, d.data, d.stat,
                                               static_cast<float>(g.epsilon),
                                               flags::use_scale | flags::use_shift);
  return {desc, onednn_engine()};
}

void onednn_ln_forward(const LayerNormGeometry& g, const Tensor& x, const Tensor& gamma,
                       const Tensor& beta, const Tensor& y, const Tensor& mean, const Tensor& var) {
  auto& prim = cached_primitive<dnnl::layer_normalization_forward>("LayerNorm f32 " + g.key(), [&] {
    return dnnl::layer_normalization_forward(ln_forward_pd(g));
  });
  const LnDescs d = ln_descs(g);
  auto& engine = onednn_engine();
  prim.execute(onednn_stream(), {{DNNL_ARG_SRC, memory(d.data, engine, x.raw_data())},
                                 {DNNL_ARG_DST, memory(d.data, engine, y.raw_data())},
                                 {DNNL_ARG_SCALE, channel_memory(g.cols, gamma)},
                                 {DNNL_ARG_SHIFT, channel_memory(g.cols, beta)},
                                 {DNNL_ARG_MEAN, memory(d.stat, engine, mean.raw_data())},
                                 {DNNL_ARG_VARIANCE, memory(d.stat, engine, var.raw_data())}});
  onednn_stream().wait();
}

void onednn_ln_backward(const LayerNormGeometry& g, const Tensor& dy, const Tensor& x,
                        const Tensor& gamma, const Tensor& mean, const Tensor& var,
                        const Tensor& dx, const Tensor& dgamma, const Tensor& dbeta) {
  auto& prim =
      cached_primitive<dnnl::layer_normalization_backward>("LayerNormGrad f32 " + g.key(), [&] {
        const LnDescs d = ln_descs(g);
        dnnl::layer_normalization_backward::desc desc(dnnl::prop_kind::backward, d.data, d.data,
                                                      d.stat, static_cast<float>(g.epsilon),
                                                      flags::use_scale | flags::use_shift);
        return dnnl::layer_normalization_backward(
            dnnl::layer_normalization_backward::primitive_desc(desc, onednn_engine(),
                                                               ln_forward_pd(g)));
      });
  const LnDescs d = ln_descs(g);
  auto& engine = onednn_engine();
  prim.execute(onednn_stream(), {{DNNL_ARG_SRC, memory(d.data, engine, x.raw_data())},
                                 {DNNL_ARG_DIFF_DST, memory(d.data, engine, dy.raw_data())},
                                 {DNNL_ARG_DIFF_SRC, memory(d.data, engine, dx.raw_data())},
                                 {DNNL_ARG_SCALE, channel_memory(g.cols, gamma)},
                                 {DNNL_ARG_MEAN, memory(d.stat, engine, mean.raw_data())},
                                 {DNNL_ARG_VARIANCE, memory(d.stat, engine, var.raw_data())},
                                 {DNNL_ARG_DIFF_SCALE, channel_memory(g.cols, dgamma)},
                                 {DNNL_ARG_DIFF_SHIFT, channel_memory(g.cols, dbeta)}});
  onednn_stream().wait();
}

}  // namespace

void batch_norm_forward(const BatchNormGeometry& g, const Tensor& x, const Tensor& gamma,
                        const Tensor& beta, const Tensor& running_mean, const Tensor& running_var,
                        const Tensor& y, const Tensor& mean_out, const Tensor& var_out) {
  if (g.c == 0) return;
  if (x.dtype() == DType::kFloat32 && x.numel() > 0) {
    return onednn_bn_forward(g, x, gamma, beta, running_mean, running_var, y, mean_out, var_out);
  }
  CLEAVE_DISPATCH_FLOAT(x.dtype(), [&] {
    reference_bn_forward(g, x.data<T>(), gamma.data<T>(), beta.data<T>(), running_mean.data<T>(),
                         running_var.data<T>(), y.data<T>(), mean_out.data<T>(), var_out.data<T>());
  });
}

void batch_norm_backward(const BatchNormGeometry& g, const Tensor& dy, const Tensor& x,
                         const Tensor& gamma, const Tensor& mean, const Tensor& var,
                         const Tensor& dx, const Tensor& dgamma, const Tensor& dbeta,
                         const Tensor& dmean, const Tensor& dvar) {
  if (g.c == 0) return;
  if (x.dtype() == DType::kFloat32 && x.numel() > 0) {
    return onednn_bn_backward(g, dy, x, gamma, mean, var, dx, dgamma, dbeta, dmean, dvar);
  }
  CLEAVE_DISPATCH_FLOAT(x.dtype(), [&] {
    reference_bn_backward(g, dy.data<T>(), x.data<T>(), gamma.data<T>(), mean.data<T>(),
                          var.data<T>(), dx.data<T>(), dgamma.data<T>(), dbeta.data<T>(),
                          dmean.data<T>(), dvar.data<T>());
  });
}

void layer_norm_forward(const LayerNormGeometry& g, const Tensor& x, const Tensor& gamma,
                        const Tensor& beta, const Tensor& y, const Tensor& mean,
                        const Tensor& var) {
  if (x.dtype() == DType::kFloat32 && x.numel() > 0) {
    return onednn_ln_forward(g, x, gamma, beta, y, mean, var);
  }
  CLEAVE_DISPATCH_FLOAT(x.dtype(), [&] {
    reference_ln_forward(g, x.data<T>(), gamma.data<T>(), beta.data<T>(), y.data<T>(),
                         mean.data<T>(), var.data<T>());
  });
}

void layer_norm_backward(const LayerNormGeometry& g, const Tensor& dy, const Tensor& x,
                         const Tensor& gamma, const Tensor& mean, const Tensor& var,
                         const Tensor& dx, const Tensor& dgamma, const Tensor& dbeta) {
  if (x.dtype() == DType::kFloat32 && x.numel() > 0) {
    return onednn_ln_backward(g, dy, x, gamma, mean, var, dx, dgamma, dbeta);
  }
  CLEAVE_DISPATCH_FLOAT(x.dtype(), [&] {
    reference_ln_backward(g, dy.data<T>(), x.data<T>(), gamma.data<T>(), mean.data<T>(),
                          var.data<T>(), dx.data<T>(), dgamma.data<T>(), dbeta.data<T>());
  });
}

}  // namespace cleave::kernels::cpu
