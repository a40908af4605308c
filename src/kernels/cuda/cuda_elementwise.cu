// Memory-bound per-row ops: embedding, rms_norm, rope (and both at once on latent rows), silu_mul, add,
// and indexed row copies (gather, scatter, the latent cache). Each computes in f32 and rounds once on
// store, like the CPU reference.
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/cuda_backend.cuh"
#include "kernels/cuda/cuda_types.cuh"
#include "kernels/cuda/kernel_launch_pdl.cuh"
#include "kernels/cuda/latent_fp8.cuh"

namespace splash::cuda {
namespace {

__device__ __forceinline__ void report(int* err, int code, int value) {
  err[1] = value;
  err[0] = code;
}

#define GRID_STRIDE(i, n) \
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < (n); i += int64_t{gridDim.x} * blockDim.x)

template <typename TO, typename TT, int V>
__global__ void embedding_kernel(TO* out, int64_t out_stride, const int32_t* ids, const TT* table, int64_t table_stride,
                                 int64_t vocab, int64_t N, int64_t d, int* err) {
  pdl_begin();
  const int64_t per_row = d / V;
  GRID_STRIDE(i, N * per_row) {
    const int64_t n = i / per_row, c = (i % per_row) * V;
    const int32_t id = ids[n];
    float f[V];
    if (id < 0 || id >= vocab) {
      report(err, kErrTokenId, id);
#pragma unroll
      for (int j = 0; j < V; ++j) f[j] = 0.0f;
    } else {
      load_f32<V>(table + id * table_stride + c, f);
    }
    store_f32<V>(out + n * out_stride + c, f);
  }
}

// Sum over the block; every thread gets the result. Holds one barrier before reading shared memory
// and one after, so consecutive calls do not race.
__device__ float block_sum(float v) {
  __shared__ float partial[32];
#pragma unroll
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = (blockDim.x + 31) / 32;
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  float t = lane < warps ? partial[lane] : 0.0f;
#pragma unroll
  for (int o = 16; o > 0; o /= 2) t += __shfl_xor_sync(0xffffffffu, t, o);
  __syncthreads();
  return t;
}

// One row's rms_norm by the block's first `threads` threads (a multiple of 32). Every thread reads its
// elements of the row before the reduction's barrier and writes only those afterwards, so out may alias
// x. Out may have another dtype than x (the router reads an f32 normed hidden state). With a residual
// (add_rms_norm), each thread first stores residual + x rounded to TX, as add() does, and norms those
// stored values: it rereads only what it wrote itself. Threads past `threads` hold no elements and add
// whole warps of 0 to the sum, so it is bit for bit the sum of a block of `threads`.
template <typename TO, typename TX, int V, bool kResidual>
__device__ __forceinline__ void rms_norm_row(TO* orow, const TX* xr, TX* rr, const float* w, int64_t d, float eps,
                                             int threads) {
  const TX* src = kResidual ? rr : xr;  // what is normed
  const int64_t first = threadIdx.x < threads ? threadIdx.x * int64_t{V} : d, step = int64_t{threads} * V;
  float ss = 0.0f;
  for (int64_t i = first; i < d; i += step) {
    float f[V];
    load_f32<V>(xr + i, f);
    if constexpr (kResidual) {
      float r[V];
      load_f32<V>(rr + i, r);
#pragma unroll
      for (int j = 0; j < V; ++j) f[j] = to_f32(from_f32<TX>(r[j] + f[j]));
      store_f32<V>(rr + i, f);
    }
#pragma unroll
    for (int j = 0; j < V; ++j) ss += f[j] * f[j];
  }
  const float inv = 1.0f / sqrtf(block_sum(ss) / static_cast<float>(d) + eps);
  for (int64_t i = first; i < d; i += step) {
    float f[V], g[V];
    load_f32<V>(src + i, f);
    load_f32<V>(w + i, g);
#pragma unroll
    for (int j = 0; j < V; ++j) f[j] = g[j] * (f[j] * inv);
    store_f32<V>(orow + i, f);
  }
}

// One block per row.
template <typename TO, typename TX, int V, bool kResidual>
__global__ void rms_norm_kernel(TO* out, int64_t out_stride, const TX* x, int64_t x_stride, TX* residual,
                                int64_t res_stride, const float* w, int64_t d, float eps) {
  pdl_begin();
  rms_norm_row<TO, TX, V, kResidual>(out + blockIdx.x * out_stride, x + blockIdx.x * x_stride,
                                     kResidual ? residual + blockIdx.x * res_stride : nullptr, w, d, eps,
                                     static_cast<int>(blockDim.x));
}

// Whether position p has a row in the rope table; a thread with `reports` set reports one that has not.
__device__ __forceinline__ bool in_rope_table(int32_t p, int64_t max_pos, bool reports, int* err) {
  const bool ok = p >= 0 && p < max_pos;
  if (!ok && reports) report(err, kErrPosition, p);
  return ok;
}

// Pair i (2i, 2i+1) of a rope row x rotated by the table's (c, s): the values of out[i] and out[half + i].
// Reading apart from writing lets a kernel put a barrier between every read of a row and the writes
// that overwrite it.
struct RotatedPair {
  float lo, hi;
};
template <typename T>
__device__ __forceinline__ RotatedPair rotate_pair(const T* x, int i, float c, float s) {
  const float a = to_f32(x[2 * i]), b = to_f32(x[2 * i + 1]);
  return {a * c - b * s, b * c + a * s};
}
template <typename T>
__device__ __forceinline__ void store_pair(T* out, int i, int half, RotatedPair r) {
  out[i] = from_f32<T>(r.lo);
  out[half + i] = from_f32<T>(r.hi);
}

// Block = (half, rows): one row (token, head) per y lane, so the barrier separates every read of a row
// from the de-interleaved writes that overwrite it (out is x itself or apart from it).
template <typename T>
__global__ void rope_kernel(T* out, int64_t o0, int64_t o1, const T* x, int64_t s0, int64_t s1, int64_t N, int64_t H,
                            const int32_t* pos, const float* cos, const float* sin, int64_t cs_stride, int64_t max_pos,
                            int* err) {
  pdl_begin();
  const int half = blockDim.x, i = threadIdx.x;
  const int64_t row = blockIdx.x * int64_t{blockDim.y} + threadIdx.y;
  const int64_t n = row / H, h = row % H;
  const int32_t p = row < N * H ? pos[n] : 0;
  const bool live = row < N * H && in_rope_table(p, max_pos, i == 0, err);
  RotatedPair r{};
  if (live) r = rotate_pair(x + n * s0 + h * s1, i, cos[p * cs_stride + i], sin[p * cs_stride + i]);
  __syncthreads();
  if (live) store_pair(out + n * o0 + h * o1, i, half, r);
}

// One block per latent row [c_kv | k_pe], in place: rms_norm of c_kv by the first norm_threads threads
// (summed as rms_norm's block of that size sums it), rope of k_pe by threads i < half, one pair each. The
// pairs are read before the norm's barriers and written after them; c_kv and k_pe do not overlap.
template <typename T, int V>
__global__ void latent_norm_rope_kernel(T* lat, int64_t stride, const float* w, int64_t C, float eps, int norm_threads,
                                        const int32_t* pos, const float* cos, const float* sin, int64_t cs_stride,
                                        int64_t max_pos, int half, int* err) {
  pdl_begin();
  T* row = lat + blockIdx.x * stride;
  T* pe = row + C;
  const int i = threadIdx.x;
  const int32_t p = pos[blockIdx.x];
  const bool rotates = i < half && in_rope_table(p, max_pos, i == 0, err);
  RotatedPair r{};
  if (rotates) r = rotate_pair(pe, i, cos[p * cs_stride + i], sin[p * cs_stride + i]);
  rms_norm_row<T, T, V, false>(row, row, nullptr, w, C, eps, norm_threads);
  if (rotates) store_pair(pe, i, half, r);
}

// out[r] = silu(gu[r, :I]) * gu[r, I:] for r = rows[i], i < n (rows null: r = i; negative: skipped).
template <typename T, int V>
__global__ void silu_mul_kernel(T* out, int64_t out_stride, const T* gu, int64_t gu_stride, const int32_t* rows,
                                int64_t n, int64_t inter) {
  pdl_begin();
  const int64_t per_row = inter / V;
  GRID_STRIDE(i, n * per_row) {
    const int64_t r = rows ? rows[i / per_row] : i / per_row, c = (i % per_row) * V;
    if (r < 0) continue;
    float g[V], u[V];
    load_f32<V>(gu + r * gu_stride + c, g);
    load_f32<V>(gu + r * gu_stride + inter + c, u);
#pragma unroll
    for (int j = 0; j < V; ++j) g[j] = g[j] / (1.0f + expf(-g[j])) * u[j];
    store_f32<V>(out + r * out_stride + c, g);
  }
}

template <typename T, int V>
__global__ void add_kernel(T* out, int64_t os, const T* a, int64_t as, const T* b, int64_t bs, int64_t N, int64_t d) {
  pdl_begin();
  const int64_t per_row = d / V;
  GRID_STRIDE(i, N * per_row) {
    const int64_t n = i / per_row, c = (i % per_row) * V;
    float x[V], y[V];
    load_f32<V>(a + n * as + c, x);
    load_f32<V>(b + n * bs + c, y);
#pragma unroll
    for (int j = 0; j < V; ++j) x[j] += y[j];
    store_f32<V>(out + n * os + c, x);
  }
}

// dst[dst_idx[r]] = src[src_idx[r]] for byte rows (a null index is the identity). Negative indices
// skip the row when `skip_negative`; other out-of-range indices are reported and skipped.
template <typename W>
__global__ void indexed_rows_kernel(char* dst, int64_t dst_stride, const int32_t* dst_idx, int64_t dst_limit,
                                    const char* src, int64_t src_stride, const int32_t* src_idx, int64_t src_limit,
                                    int64_t rows, int64_t chunks, bool skip_negative, int err_code, int* err) {
  pdl_begin();
  GRID_STRIDE(i, rows * chunks) {
    const int64_t r = i / chunks, c = i % chunks;
    const int64_t dr = dst_idx ? dst_idx[r] : r, sr = src_idx ? src_idx[r] : r;
    if (skip_negative && (dr < 0 || sr < 0)) continue;
    if (dr < 0 || dr >= dst_limit || sr < 0 || sr >= src_limit) {
      if (c == 0) report(err, err_code, static_cast<int>(dr < 0 || dr >= dst_limit ? dr : sr));
      continue;
    }
    *reinterpret_cast<W*>(dst + dr * dst_stride + c * sizeof(W)) =
        *reinterpret_cast<const W*>(src + sr * src_stride + c * sizeof(W));
  }
}

void require_rows(const Tensor& t, const char* what) {
  SPLASH_CHECK(t.ndim() == 2 && (t.size(1) <= 1 || t.stride(1) == 1), "{} must be 2-D with contiguous rows, got {}",
               what, t.shape_str());
}

void require_device(const Tensor& t, const char* what) {
  SPLASH_CHECK(t.device() == Device::CUDA, "{} must be a CUDA tensor", what);
}

// Copies rows of 2-D byte views with optional index arrays; row widths and dtypes must match.
void indexed_copy(const Tensor& dst, const Tensor& dst_idx, int64_t dst_limit, int64_t dst_stride_bytes,
                  const Tensor& src, const Tensor& src_idx, int64_t src_limit, int64_t src_stride_bytes,
                  int64_t rows, int64_t row_bytes, bool skip_negative, int err_code, int* err, cudaStream_t st) {
  if (rows == 0 || row_bytes == 0) return;
  int64_t acc = row_bytes | dst_stride_bytes | src_stride_bytes | reinterpret_cast<intptr_t>(dst.data()) |
                reinterpret_cast<intptr_t>(src.data());
  int w = 16;
  while (w > 1 && acc % w != 0) w /= 2;
  auto launch = [&](auto word) {
    using W = decltype(word);
    const int64_t chunks = row_bytes / static_cast<int64_t>(sizeof(W));
    launch_kernel(indexed_rows_kernel<W>, grid_for(rows * chunks, 256), 256, 0, st,
        static_cast<char*>(dst.data()), dst_stride_bytes, dst_idx.defined() ? dst_idx.ptr<int32_t>() : nullptr,
        dst_limit, static_cast<const char*>(src.data()), src_stride_bytes,
        src_idx.defined() ? src_idx.ptr<int32_t>() : nullptr, src_limit, rows, chunks, skip_negative, err_code, err);
  };
  switch (w) {
    case 16: launch(uint4{}); break;
    case 8: launch(uint2{}); break;
    case 4: launch(uint32_t{}); break;
    case 2: launch(uint16_t{}); break;
    default: launch(uint8_t{}); break;
  }
  SPLASH_CUDA_LAUNCHED();
}

int64_t row_stride_bytes(const Tensor& t) {
  return t.size(0) <= 1 ? t.size(1) * static_cast<int64_t>(dtype_size(t.dtype()))
                        : t.stride(0) * static_cast<int64_t>(dtype_size(t.dtype()));
}

}  // namespace

void CudaBackend::embedding(Tensor out, Tensor ids, Tensor table) {
  require_rows(out, "embedding out");
  require_rows(table, "embedding table");
  require_device(ids, "embedding ids");
  SPLASH_CHECK(ids.dtype() == DType::I32 && ids.numel() == out.size(0) && table.size(1) == out.size(1),
               "embedding: ids {} out {} table {}", ids.shape_str(), out.shape_str(), table.shape_str());
  const int64_t N = out.size(0), d = out.size(1);
  if (N == 0) return;
  const int V = vec_width(d, {&out, &table});
  dispatch_float(out.dtype(), "embedding out", [&](auto to) {
    dispatch_float(table.dtype(), "embedding table", [&](auto tt) {
      dispatch_vec(V > 8 ? 8 : V, [&](auto v) {
        using TO = typename decltype(to)::type;
        using TT = typename decltype(tt)::type;
        launch_kernel(embedding_kernel<TO, TT, decltype(v)::value>, grid_for(N * d / v, 256), 256, 0, op_stream(),
            out.ptr<TO>(), out.stride(0), ids.ptr<int32_t>(), table.ptr<TT>(), table.stride(0), table.size(0), N, d,
            errors());
      });
    });
  });
  SPLASH_CUDA_LAUNCHED();
}

namespace {

// rms_norm's vector width (at most 8) and block size for rows of d elements over these tensors: latent_norm_rope
// norms c_kv with the same ones, so that it sums as rms_norm does.
struct NormBlock {
  int vec = 1, threads = 32;
};
NormBlock norm_block(int64_t d, std::initializer_list<const Tensor*> ts) {
  const int V = std::min(vec_width(d, ts), 8);
  return {V, static_cast<int>(std::clamp<int64_t>((d / V + 31) / 32 * 32, 32, 512))};
}

void check_norm_weight(const Tensor& weight, int64_t d) {
  SPLASH_CHECK(weight.dtype() == DType::F32 && weight.is_contiguous() && weight.numel() == d,
               "rms_norm weight must be contiguous F32 [{}], got {} {}", d, dtype_name(weight.dtype()),
               weight.shape_str());
}

// The rope table's half-width is d_r / 2; positions index its rows on the device.
void check_rope(const RopeTable& table, int64_t d_r, const Tensor& positions, int64_t rows) {
  SPLASH_CHECK(d_r % 2 == 0 && d_r <= 2048, "rope dim {}", d_r);
  SPLASH_CHECK(table.cos.dtype() == DType::F32 && table.sin.dtype() == DType::F32 && table.cos.size(1) * 2 == d_r &&
                   table.cos.stride(0) == table.sin.stride(0),
               "rope table {} for d_r {}", table.cos.shape_str(), d_r);
  require_device(positions, "rope positions");
  SPLASH_CHECK(positions.dtype() == DType::I32 && positions.numel() >= rows, "rope positions {} for {} rows",
               positions.shape_str(), rows);
}

// rms_norm and add_rms_norm: one block per row; a residual (defined) is added into first.
void launch_rms_norm(const Tensor& out, const Tensor& x, const Tensor& residual, const Tensor& weight, float eps,
                     cudaStream_t st) {
  require_rows(out, "rms_norm out");
  require_rows(x, "rms_norm x");
  SPLASH_CHECK(out.same_shape(x), "rms_norm: out {} x {}", out.shape_str(), x.shape_str());
  check_norm_weight(weight, x.size(1));
  const bool add = residual.defined();
  if (add) {
    require_rows(residual, "add_rms_norm residual");
    SPLASH_CHECK(residual.same_shape(x) && residual.dtype() == x.dtype(), "add_rms_norm: residual {} {} x {} {}",
                 dtype_name(residual.dtype()), residual.shape_str(), dtype_name(x.dtype()), x.shape_str());
  }
  const int64_t N = x.size(0), d = x.size(1);
  if (N == 0) return;
  const NormBlock nb = add ? norm_block(d, {&out, &x, &residual, &weight}) : norm_block(d, {&out, &x, &weight});
  dispatch_float(out.dtype(), "rms_norm out", [&](auto to) {
    dispatch_float(x.dtype(), "rms_norm x", [&](auto tx) {
      dispatch_vec(nb.vec, [&](auto v) {
        using TO = typename decltype(to)::type;
        using TX = typename decltype(tx)::type;
        constexpr int kV = decltype(v)::value;
        if (add)
          launch_kernel(rms_norm_kernel<TO, TX, kV, true>, static_cast<unsigned>(N), nb.threads, 0, st,
              out.ptr<TO>(), out.stride(0), x.ptr<TX>(), x.stride(0), residual.ptr<TX>(), residual.stride(0),
              weight.ptr<float>(), d, eps);
        else
          launch_kernel(rms_norm_kernel<TO, TX, kV, false>, static_cast<unsigned>(N), nb.threads, 0, st,
              out.ptr<TO>(), out.stride(0), x.ptr<TX>(), x.stride(0), nullptr, 0, weight.ptr<float>(), d, eps);
      });
    });
  });
  SPLASH_CUDA_LAUNCHED();
}

}  // namespace

void CudaBackend::rms_norm(Tensor out, Tensor x, Tensor weight, float eps) {
  launch_rms_norm(out, x, {}, weight, eps, op_stream());
}

void CudaBackend::add_rms_norm(Tensor out, Tensor residual, Tensor x, Tensor weight, float eps) {
  launch_rms_norm(out, x, residual, weight, eps, op_stream());
}

void CudaBackend::rope(Tensor out, Tensor x, Tensor positions, const RopeTable& table) {
  SPLASH_CHECK(x.ndim() == 3 && (x.size(2) <= 1 || x.stride(2) == 1), "rope x must be [N, heads, d_r] with contiguous rows");
  SPLASH_CHECK(out.same_shape(x) && out.dtype() == x.dtype() && (out.size(2) <= 1 || out.stride(2) == 1),
               "rope: out {} {} for x {} {}", dtype_name(out.dtype()), out.shape_str(), dtype_name(x.dtype()),
               x.shape_str());
  const int64_t N = x.size(0), H = x.size(1);
  check_rope(table, x.size(2), positions, N);
  const int half = static_cast<int>(x.size(2) / 2);
  if (N * H == 0 || half == 0) return;
  const int rows_per_block = std::max(1, 256 / half);
  const dim3 block(half, rows_per_block);
  const unsigned grid = static_cast<unsigned>((N * H + rows_per_block - 1) / rows_per_block);
  dispatch_float(x.dtype(), "rope", [&](auto t) {
    using T = typename decltype(t)::type;
    launch_kernel(rope_kernel<T>, grid, block, 0, op_stream(), out.ptr<T>(), out.stride(0), out.stride(1), x.ptr<T>(),
                                                      x.stride(0), x.stride(1), N, H, positions.ptr<int32_t>(),
                                                      table.cos.ptr<float>(), table.sin.ptr<float>(),
                                                      table.cos.stride(0), table.cos.size(0), errors());
  });
  SPLASH_CUDA_LAUNCHED();
}

// A block per row holds rms_norm's block for c_kv and, where k_pe has more pairs than that, enough
// threads for one pair each.
void CudaBackend::latent_norm_rope(Tensor lat, Tensor norm_weight, float eps, Tensor positions,
                                   const RopeTable& table) {
  require_rows(lat, "latent_norm_rope lat");
  const int64_t N = lat.size(0), C = norm_weight.numel(), d_r = lat.size(1) - C;
  SPLASH_CHECK(d_r >= 0, "latent_norm_rope: norm weight {} for latent rows {}", norm_weight.shape_str(),
               lat.shape_str());
  check_norm_weight(norm_weight, C);
  check_rope(table, d_r, positions, N);
  if (N == 0) return;
  const Tensor c_kv = lat.slice(1, 0, C);
  const NormBlock nb = norm_block(C, {&c_kv, &c_kv, &norm_weight});  // rms_norm(c_kv, c_kv, ...)'s
  const int half = static_cast<int>(d_r / 2), threads = std::max(nb.threads, (half + 31) / 32 * 32);
  dispatch_float(lat.dtype(), "latent_norm_rope", [&](auto t) {
    dispatch_vec(nb.vec, [&](auto v) {
      using T = typename decltype(t)::type;
      launch_kernel(latent_norm_rope_kernel<T, decltype(v)::value>, static_cast<unsigned>(N), threads, 0, op_stream(),
          lat.ptr<T>(), lat.stride(0), norm_weight.ptr<float>(), C, eps, nb.threads, positions.ptr<int32_t>(),
          table.cos.ptr<float>(), table.sin.ptr<float>(), table.cos.stride(0), table.cos.size(0), half, errors());
    });
  });
  SPLASH_CUDA_LAUNCHED();
}

void CudaBackend::silu_mul(Tensor out, Tensor gate_up) { silu_mul_rows(out, gate_up, {}); }

void CudaBackend::silu_mul_rows(const Tensor& out, const Tensor& gate_up, const Tensor& rows) {
  require_rows(out, "silu_mul out");
  require_rows(gate_up, "silu_mul gate_up");
  const int64_t N = out.size(0), inter = out.size(1);
  SPLASH_CHECK(gate_up.size(0) == N && gate_up.size(1) == 2 * inter && gate_up.dtype() == out.dtype(),
               "silu_mul: gate_up {} vs out {}", gate_up.shape_str(), out.shape_str());
  SPLASH_CHECK(!rows.defined() || (rows.dtype() == DType::I32 && rows.is_contiguous() && rows.device() == Device::CUDA),
               "silu_mul rows {}", rows.shape_str());
  const int64_t n = rows.defined() ? rows.numel() : N;
  if (n * inter == 0) return;
  const int V = vec_width(inter, {&out, &gate_up});
  dispatch_float(out.dtype(), "silu_mul", [&](auto t) {
    dispatch_vec(V > 8 ? 8 : V, [&](auto v) {
      using T = typename decltype(t)::type;
      launch_kernel(silu_mul_kernel<T, decltype(v)::value>, grid_for(n * inter / v, 256), 256, 0, op_stream(),
          out.ptr<T>(), out.stride(0), gate_up.ptr<T>(), gate_up.stride(0),
          rows.defined() ? rows.ptr<int32_t>() : nullptr, n, inter);
    });
  });
  SPLASH_CUDA_LAUNCHED();
}

void CudaBackend::add(Tensor out, Tensor a, Tensor b) {
  require_rows(out, "add out");
  require_rows(a, "add a");
  require_rows(b, "add b");
  SPLASH_CHECK(out.same_shape(a) && out.same_shape(b) && a.dtype() == out.dtype() && b.dtype() == out.dtype(),
               "add: out {} a {} b {}", out.shape_str(), a.shape_str(), b.shape_str());
  const int64_t N = out.size(0), d = out.size(1);
  if (N * d == 0) return;
  const int V = vec_width(d, {&out, &a, &b});
  dispatch_float(out.dtype(), "add", [&](auto t) {
    dispatch_vec(V > 8 ? 8 : V, [&](auto v) {
      using T = typename decltype(t)::type;
      launch_kernel(add_kernel<T, decltype(v)::value>, grid_for(N * d / v, 256), 256, 0, op_stream(),
          out.ptr<T>(), out.stride(0), a.ptr<T>(), a.stride(0), b.ptr<T>(), b.stride(0), N, d);
    });
  });
  SPLASH_CUDA_LAUNCHED();
}

void CudaBackend::gather_rows(Tensor out, Tensor in, Tensor rows) {
  require_rows(out, "gather_rows out");
  require_rows(in, "gather_rows in");
  require_device(rows, "gather_rows rows");
  SPLASH_CHECK(rows.dtype() == DType::I32 && rows.numel() == out.size(0) && in.size(1) == out.size(1) &&
                   in.dtype() == out.dtype(),
               "gather_rows: out {} in {} rows {}", out.shape_str(), in.shape_str(), rows.shape_str());
  indexed_copy(out, {}, out.size(0), row_stride_bytes(out), in, rows, in.size(0), row_stride_bytes(in), out.size(0),
               out.size(1) * static_cast<int64_t>(dtype_size(out.dtype())), false, kErrRowIndex, errors(),
               op_stream());
}

void CudaBackend::scatter_rows(Tensor out, Tensor in, Tensor rows) {
  require_rows(out, "scatter_rows out");
  require_rows(in, "scatter_rows in");
  require_device(rows, "scatter_rows rows");
  SPLASH_CHECK(rows.dtype() == DType::I32 && rows.numel() == in.size(0) && in.size(1) == out.size(1) &&
                   in.dtype() == out.dtype(),
               "scatter_rows: out {} in {} rows {}", out.shape_str(), in.shape_str(), rows.shape_str());
  indexed_copy(out, rows, out.size(0), row_stride_bytes(out), in, {}, in.size(0), row_stride_bytes(in), in.size(0),
               in.size(1) * static_cast<int64_t>(dtype_size(in.dtype())), false, kErrRowIndex, errors(),
               op_stream());
}

// Raw records (U8 [n, record_bytes]) move bytes: the elements, then for an F8E4M3 pool the scale's 4
// bytes, both by the indexed row copy. Values of the pool's dtype are copied; values into an F8E4M3 pool
// are quantized, out of it dequantized (latent_fp8.cu).
void CudaBackend::store_latents(const LatentPool& pool, Tensor latent, Tensor slots, Stream s) {
  require_rows(latent, "store_latents latent");
  require_device(slots, "store_latents slots");
  const Tensor& data = pool.data;
  SPLASH_CHECK(data.ndim() == 3 && data.is_contiguous() && slots.dtype() == DType::I32 &&
                   slots.numel() == latent.size(0),
               "store_latents: pool {} latent {} slots {}", data.shape_str(), latent.shape_str(), slots.shape_str());
  const int64_t W = data.size(2), es = static_cast<int64_t>(dtype_size(data.dtype())), n = latent.size(0);
  if (latent.dtype() == DType::U8) {
    SPLASH_CHECK(latent.size(1) == pool.record_bytes(), "store_latents: records {} for a pool of {}-byte records {}",
                 latent.shape_str(), pool.record_bytes(), data.shape_str());
    indexed_copy(data, slots, pool.slots(), W * es, latent, {}, n, row_stride_bytes(latent), n, W * es, true, kErrSlot,
                 errors(), stream_of(s));
    if (pool.fp8())
      indexed_copy(pool.scales, slots, pool.slots(), 4, latent.slice(1, W, W + 4), {}, n, row_stride_bytes(latent), n,
                   4, true, kErrSlot, errors(), stream_of(s));
    return;
  }
  if (pool.fp8()) return quantize_latents(data, pool.scales, latent, slots, kErrSlot, errors(), stream_of(s));
  SPLASH_CHECK(latent.size(1) == W && latent.dtype() == data.dtype(),
               "store_latents: pool {} {} latent {} {}", dtype_name(data.dtype()), data.shape_str(),
               dtype_name(latent.dtype()), latent.shape_str());
  indexed_copy(data, slots, pool.slots(), W * es, latent, {}, n, row_stride_bytes(latent), n, W * es, true, kErrSlot,
               errors(), stream_of(s));
}

void CudaBackend::gather_latents(Tensor out, const LatentPool& pool, Tensor slots, Stream s) {
  require_rows(out, "gather_latents out");
  require_device(slots, "gather_latents slots");
  const Tensor& data = pool.data;
  SPLASH_CHECK(data.ndim() == 3 && data.is_contiguous() && slots.dtype() == DType::I32 && slots.numel() == out.size(0),
               "gather_latents: out {} pool {} slots {}", out.shape_str(), data.shape_str(), slots.shape_str());
  const int64_t W = data.size(2), es = static_cast<int64_t>(dtype_size(data.dtype())), n = out.size(0);
  if (out.dtype() == DType::U8) {
    SPLASH_CHECK(out.size(1) == pool.record_bytes(), "gather_latents: records {} for a pool of {}-byte records {}",
                 out.shape_str(), pool.record_bytes(), data.shape_str());
    indexed_copy(out, {}, n, row_stride_bytes(out), data, slots, pool.slots(), W * es, n, W * es, false, kErrSlot,
                 errors(), stream_of(s));
    if (pool.fp8())
      indexed_copy(out.slice(1, W, W + 4), {}, n, row_stride_bytes(out), pool.scales, slots, pool.slots(), 4, n, 4,
                   false, kErrSlot, errors(), stream_of(s));
    return;
  }
  if (pool.fp8()) return dequantize_latents(out, data, pool.scales, slots, kErrSlot, errors(), stream_of(s));
  SPLASH_CHECK(out.size(1) == W && out.dtype() == data.dtype(), "gather_latents: out {} {} pool {} {}",
               dtype_name(out.dtype()), out.shape_str(), dtype_name(data.dtype()), data.shape_str());
  indexed_copy(out, {}, n, row_stride_bytes(out), data, slots, pool.slots(), W * es, n, W * es, false, kErrSlot,
               errors(), stream_of(s));
}

__global__ void map_page_slots_kernel(int32_t* slots, const int32_t* v, int64_t n, const int32_t* pages,
                                      int64_t n_pages, int page_size, int* err) {
  pdl_begin();
  GRID_STRIDE(i, n) {
    const int32_t x = v[i];
    if (x < 0 || x / page_size >= n_pages) {
      report(err, kErrSlot, x);
      slots[i] = -1;
      continue;
    }
    slots[i] = pages[x / page_size] * page_size + x % page_size;
  }
}

void CudaBackend::map_page_slots(Tensor slots, Tensor v, Tensor pages, int page_size, Stream s) {
  require_device(slots, "map_page_slots slots");
  require_device(v, "map_page_slots positions");
  require_device(pages, "map_page_slots pages");
  SPLASH_CHECK(slots.dtype() == DType::I32 && v.dtype() == DType::I32 && pages.dtype() == DType::I32 &&
                   slots.numel() == v.numel(),
               "map_page_slots: slots {} positions {} pages {}", slots.shape_str(), v.shape_str(), pages.shape_str());
  if (v.numel() == 0) return;
  launch_kernel(map_page_slots_kernel, grid_for(v.numel(), 256), 256, 0, stream_of(s),
      slots.ptr<int32_t>(), v.ptr<int32_t>(), v.numel(), pages.ptr<int32_t>(), pages.numel(), page_size, errors());
}

}  // namespace splash::cuda
