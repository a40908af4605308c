// splash_bench_attention: times the MLA attention kernels at DeepSeek-V3 shapes next to the device's
// own limits measured in the same run: a device-to-device copy (bandwidth, for the memory-bound
// absorbed decode) and a large bf16 cuBLAS GEMM (tensor-core rate, for the compute-bound prefill).
// Where the seesaw decode kernel runs (bf16, heads a multiple of 64), the warp-specialized kernel it
// replaced (absorbed_attention_warp_specialized, v5) is timed next to it on the same inputs.
// Likewise the warp-specialized prefill kernel next to the one-warpgroup kernel it replaced
// (expanded_attention_one_warpgroup).
// Times are medians of several runs with CUDA events (decode: replays of a CUDA graph of one call, as the
// engine's decode steps and the peers in bench/peer_mla.py run); inputs are random, never zeros; inputs smaller
// than a few L2s are rotated so that repeated runs do not measure the cache. Decode runs over a bf16
// latent cache and over an FP8 one (e4m3 codes and an f32 scale per token) at the same points. Last, the
// generic kernels (every shape) run next to the specialized ones at the shapes those are built for, and
// alone at shapes only they run.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <functional>
#include <memory>
#include <numeric>
#include <random>
#include <utility>
#include <vector>

#include "kernels/cuda/mla_attention.cuh"

namespace {

using splash::DType;
using splash::Tensor;

#define CK(expr)                                                                                  \
  do {                                                                                            \
    cudaError_t e_ = (expr);                                                                      \
    if (e_ != cudaSuccess) {                                                                      \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #expr, cudaGetErrorString(e_)); \
      std::exit(1);                                                                               \
    }                                                                                             \
  } while (0)

Tensor device(DType dt, std::initializer_list<int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  void* p = nullptr;
  CK(cudaMalloc(&p, static_cast<size_t>(n) * splash::dtype_size(dt)));
  return Tensor(p, dt, shape, splash::Device::CUDA, std::shared_ptr<void>(p, [](void* q) { cudaFree(q); }));
}

// Random elements: f maps 32 random bits to a value.
template <class T, class F>
__global__ void fill_random(T* p, size_t n, uint32_t seed, F f) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x) {
    uint32_t x = static_cast<uint32_t>(i) * 2654435761u ^ seed;
    x ^= x >> 15, x *= 2246822519u, x ^= x >> 13, x *= 3266489917u, x ^= x >> 16;
    p[i] = f(x);
  }
}

struct UniformBf16 {  // in [-1, 1)
  __device__ __nv_bfloat16 operator()(uint32_t x) const {
    return __float2bfloat16(static_cast<float>(x) * (2.f / 4294967296.f) - 1.f);
  }
};
struct E4m3Code {  // any code but the NaNs
  __device__ uint8_t operator()(uint32_t x) const {
    const uint8_t c = static_cast<uint8_t>(x >> 24);
    return (c & 0x7f) == 0x7f ? c ^ 1 : c;
  }
};
struct TokenScale {  // a token's largest values in [0.5, 1.5)
  __device__ float operator()(uint32_t x) const { return (0.5f + static_cast<float>(x) / 4294967296.f) / 448.f; }
};

template <class T, class F>
void fill(const Tensor& t, uint32_t seed, F f) {
  fill_random<<<1024, 256>>>(t.ptr<T>(), static_cast<size_t>(t.numel()), seed, f);
  CK(cudaGetLastError());
}

void randomize(const Tensor& t, uint32_t seed) { fill<__nv_bfloat16>(t, seed, UniformBf16{}); }

// A latent page pool [pages, page, W] of random bf16 values, or of random e4m3 codes with their scales.
struct RandomPool {
  Tensor data, scales;
};
RandomPool random_pool(DType dt, int64_t pages, int page, int W, uint32_t seed) {
  RandomPool p{device(dt, {pages, page, W}), {}};
  if (dt == DType::BF16) {
    randomize(p.data, seed);
    return p;
  }
  fill<uint8_t>(p.data, seed, E4m3Code{});
  p.scales = device(DType::F32, {pages, page});
  fill<float>(p.scales, seed + 1, TokenScale{});
  return p;
}

// Bytes a token of the cache holds: W elements, and the f32 scale of an fp8 token.
double token_bytes(DType dt, int W) { return dt == DType::BF16 ? 2.0 * W : W + 4.0; }

Tensor upload_i32(const std::vector<int32_t>& v, std::initializer_list<int64_t> shape) {
  Tensor t = device(DType::I32, shape);
  CK(cudaMemcpy(t.data(), v.data(), v.size() * 4, cudaMemcpyHostToDevice));
  return t;
}

// Median milliseconds of `reps` runs of f(rep) after `warm` untimed ones.
double median_ms(int warm, int reps, const std::function<void(int)>& f) {
  for (int i = 0; i < warm; ++i) f(i);
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  std::vector<float> ms(reps);
  for (int i = 0; i < reps; ++i) {
    CK(cudaEventRecord(a));
    f(warm + i);
    CK(cudaEventRecord(b));
    CK(cudaEventSynchronize(b));
    CK(cudaEventElapsedTime(&ms[i], a, b));
  }
  CK(cudaGetLastError());
  CK(cudaEventDestroy(a));
  CK(cudaEventDestroy(b));
  std::sort(ms.begin(), ms.end());
  return ms[reps / 2];
}

// median_ms over replays of CUDA graphs, graph i holding the one call f(i, stream), each captured after an
// eager warm-up call of its own. The engine runs its decode steps as graph replays, and bench/peer_mla.py
// times the peers the same way, so neither side's host launch cost is counted.
double median_graph_ms(int warm, int reps, const std::function<void(int, cudaStream_t)>& f) {
  static const cudaStream_t s = [] {  // one stream: the split partials' buffer is kept per stream
    cudaStream_t t;
    CK(cudaStreamCreateWithFlags(&t, cudaStreamNonBlocking));
    return t;
  }();
  std::vector<cudaGraphExec_t> graphs(warm + reps);
  for (int i = 0; i < warm + reps; ++i) {
    f(i, s);  // buffers a call grows (split partials) are allocated outside the capture
    CK(cudaStreamSynchronize(s));
    cudaGraph_t g;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    f(i, s);
    CK(cudaStreamEndCapture(s, &g));
    CK(cudaGraphInstantiate(&graphs[i], g, 0));
    CK(cudaGraphDestroy(g));
  }
  // Replayed on the legacy stream, where median_ms records its events.
  const double ms = median_ms(warm, reps, [&](int i) { CK(cudaGraphLaunch(graphs[i], nullptr)); });
  for (cudaGraphExec_t g : graphs) CK(cudaGraphExecDestroy(g));
  return ms;
}

double copy_bandwidth_gbs() {
  const size_t bytes = size_t{2} << 30;
  Tensor a = device(DType::BF16, {static_cast<int64_t>(bytes / 2)}),
         b = device(DType::BF16, {static_cast<int64_t>(bytes / 2)});
  randomize(a, 1);
  const double ms =
      median_ms(2, 7, [&](int) { CK(cudaMemcpyAsync(b.data(), a.data(), bytes, cudaMemcpyDeviceToDevice)); });
  return 2.0 * bytes / ms / 1e6;  // read + write
}

double gemm_tflops() {
  const int n = 8192;
  Tensor a = device(DType::BF16, {n, n}), b = device(DType::BF16, {n, n}), c = device(DType::BF16, {n, n});
  randomize(a, 2);
  randomize(b, 3);
  cublasHandle_t h;
  if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) std::exit(1);
  const float one = 1.f, zero = 0.f;
  const double ms = median_ms(3, 10, [&](int) {
    if (cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, a.data(), CUDA_R_16BF, n, b.data(), CUDA_R_16BF, n,
                     &zero, c.data(), CUDA_R_16BF, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) != CUBLAS_STATUS_SUCCESS)
      std::exit(1);
  });
  cublasDestroy(h);
  return 2.0 * n * n * n / ms / 1e9;
}

// A comma-separated list from the environment variable `name` (to run a few points, e.g. under a
// profiler), else `fallback`.
std::vector<int> list_from_env(const char* name, std::vector<int> fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  std::vector<int> out;
  for (const char* p = v; *p != '\0';) {
    char* end = nullptr;
    out.push_back(static_cast<int>(std::strtol(p, &end, 10)));
    p = *end == ',' ? end + 1 : end;
    if (end == p && *p != '\0') break;
  }
  return out;
}

void bench_decode(double copy_gbs) {
  constexpr int C = 512, W = 576, kPage = 64;
  const std::vector<int> batches = list_from_env("SPLASH_BENCH_BATCHES", {1, 16, 64, 128}),
                         contexts = list_from_env("SPLASH_BENCH_CONTEXTS", {4096, 16384, 65536, 131072}),
                         heads = list_from_env("SPLASH_BENCH_HEADS", {128, 16});
  // Uneven rows (a scheduler's balance shows only there): row b of B holds context x (1 - spread x b / B)
  // tokens, so the rows run evenly from the full context down to (1 - spread) of it. 0: every row full.
  const char* spread_env = std::getenv("SPLASH_BENCH_SPREAD");
  const double spread = spread_env ? std::clamp(std::atof(spread_env), 0.0, 1.0) : 0.0;
  // One pool of each dtype for every configuration: the largest needs 128 x 128K tokens (19.3 GB bf16 +
  // 9.7 GB fp8), fewer pages if memory is short.
  size_t free_b = 0, total_b = 0;
  CK(cudaMemGetInfo(&free_b, &total_b));
  const int64_t want_pages = int64_t{128} * 131072 / kPage;
  const double page_bytes = kPage * (token_bytes(DType::BF16, W) + token_bytes(DType::F8E4M3, W));
  const int64_t pages = std::min<int64_t>(want_pages, static_cast<int64_t>(free_b * 0.8 / page_bytes));
  const RandomPool pool = random_pool(DType::BF16, pages, kPage, W, 4);
  const RandomPool pool8 = random_pool(DType::F8E4M3, pages, kPage, W, 40);
  std::printf(
      "\nabsorbed decode (C %d + d_r 64, page %d, rows from the full context down to %.0f%% of it): a bf16 cache,\n"
      "then an fp8 cache\n"
      "(e4m3 + an f32 scale per token: %.0f bytes a token); limit: copy %.0f GB/s; fp8_speed = bf16 time / fp8 time;\n"
      "v5_*: the warp-specialized kernel on the same bf16 inputs where the seesaw one runs\n"
      "(heads a multiple of 64), seesaw_speed = v5 time / time\n",
      C, kPage, 100.0 * (1.0 - spread), token_bytes(DType::F8E4M3, W), copy_gbs);
  std::printf("%5s %8s %5s %10s %10s %9s %8s %10s %9s %12s %10s %10s %9s %10s %8s\n", "B", "context", "H", "time_ms",
              "GB/s", "of_copy", "TFLOP/s", "v5_ms", "v5_TFLOP", "seesaw_speed", "fp8_ms", "fp8_GB/s", "fp8_copy",
              "fp8_speed", "rotate");
  std::mt19937 rng(5);
  std::vector<double> fp8_long_16;  // fp8_speed at 16 heads, B >= 16, context >= 16K (issue 17: >= 1.8x)
  for (int H : heads)
    for (int B : batches)
      for (int ctx : contexts) {
        const int64_t seq_pages = ctx / kPage, need = int64_t{B} * seq_pages;
        if (need > pages) {
          std::printf("%5d %8d %5d   skipped: needs %.1f GB of latent cache (both dtypes), %.1f GB allocated\n", B, ctx,
                      H, need * page_bytes / 1e9, pages * page_bytes / 1e9);
          continue;
        }
        std::vector<int32_t> seq(B), len(B);
        std::iota(seq.begin(), seq.end(), 0);
        for (int b = 0; b < B; ++b) len[b] = std::max(1, static_cast<int>(ctx * (1.0 - spread * b / B)));
        const double tokens = std::accumulate(len.begin(), len.end(), 0.0);
        const double kv_bytes = tokens * token_bytes(DType::BF16, W);
        const double kv8_bytes = tokens * token_bytes(DType::F8E4M3, W);
        // Rotate over disjoint page sets until the working set (of the smaller, fp8 cache) is well past L2.
        const int rot = static_cast<int>(
            std::clamp<int64_t>(static_cast<int64_t>(512e6 / kv8_bytes) + 1, 1, std::min<int64_t>(16, pages / need)));
        std::vector<int32_t> ids(pages);
        std::iota(ids.begin(), ids.end(), 0);
        std::shuffle(ids.begin(), ids.end(), rng);
        std::vector<Tensor> tables;
        for (int r = 0; r < rot; ++r)
          tables.push_back(
              upload_i32(std::vector<int32_t>(ids.begin() + r * need, ids.begin() + (r + 1) * need), {B, seq_pages}));
        Tensor row_seq = upload_i32(seq, {B}), row_len = upload_i32(len, {B});
        Tensor q = device(DType::BF16, {B, H, W}), out = device(DType::BF16, {B, H, C}),
               lse = device(DType::F32, {B, H});
        randomize(q, 6);
        const float scale = 0.1352f;  // DeepSeek-V3's YaRN-scaled softmax scale
        auto time_pool = [&](const RandomPool& p, auto attention) {
          return median_graph_ms(2, 9, [&](int i, cudaStream_t s) {
            splash::PagedKv kv{p.data, tables[i % rot], row_seq, row_len};
            kv.scales = p.scales;
            attention(out, lse, q, kv, scale, s);
          });
        };
        const double ms = time_pool(pool, splash::cuda::absorbed_attention);
        const double ms8 = time_pool(pool8, splash::cuda::absorbed_attention);
        const double ms_v5 =
            H % 64 == 0 ? time_pool(pool, splash::cuda::absorbed_attention_warp_specialized) : 0.0;
        const double rest = B * H * (W + C) * 2.0 + B * H * 4.0;  // q, out, lse
        const double gbs = (kv_bytes + rest) / ms / 1e6, gbs8 = (kv8_bytes + rest) / ms8 / 1e6;
        const double flops = 2.0 * H * tokens * (W + C);
        char v5[64] = "         -         -            -";
        if (ms_v5 > 0) std::snprintf(v5, sizeof v5, "%10.3f %9.0f %11.2fx", ms_v5, flops / ms_v5 / 1e9, ms_v5 / ms);
        std::printf("%5d %8d %5d %10.3f %10.0f %8.0f%% %8.0f %s %10.3f %10.0f %8.0f%% %9.2fx %8d\n", B, ctx, H, ms, gbs,
                    100.0 * gbs / copy_gbs, flops / ms / 1e9, v5, ms8, gbs8, 100.0 * gbs8 / copy_gbs, ms / ms8, rot);
        if (H == 16 && B >= 16 && ctx >= 16384) fp8_long_16.push_back(ms / ms8);
      }
  if (!fp8_long_16.empty())
    std::printf("fp8_speed at 16 heads, B >= 16, context >= 16K: min %.2fx, max %.2fx over %zu points (target 1.8x)\n",
                *std::min_element(fp8_long_16.begin(), fp8_long_16.end()),
                *std::max_element(fp8_long_16.begin(), fp8_long_16.end()), fp8_long_16.size());
}

// Causal prefill of `rows` new tokens at the end of a context of T (rows == T: a whole prompt), timed on
// the warp-specialized kernel (expanded_attention) and the one-warpgroup kernel it replaced, same inputs.
void bench_prefill(double gemm) {
  constexpr int H = 128, DN = 128, DR = 64, DV = 128;
  std::printf("\nexpanded prefill (causal, one sequence, H %d, qk %d / v %d); limit: cuBLAS bf16 GEMM %.0f TFLOP/s\n",
              H, DN + DR, DV, gemm);
  std::printf("%8s %8s %10s %9s %8s %10s %9s %8s\n", "rows", "context", "ws_ms", "TFLOP/s", "of_gemm", "1wg_ms",
              "1wg_TF/s", "speedup");
  struct Point {
    int rows, T;
  };
  for (const Point p : {Point{4096, 4096}, Point{8192, 8192}, Point{16384, 16384}, Point{32768, 32768},
                        Point{65536, 65536}, Point{4096, 32768}}) {
    const int R = p.rows, T = p.T;
    const double need = static_cast<double>(R) * H * ((DN + DR) + DV) * 2 + static_cast<double>(T) * H * (DN + DV) * 2 +
                        T * 576.0 * 2;
    size_t free_b = 0, total_b = 0;
    CK(cudaMemGetInfo(&free_b, &total_b));
    if (need > 0.9 * free_b) {
      std::printf("%8d %8d   skipped: needs %.1f GB, %.1f GB free\n", R, T, need / 1e9, free_b / 1e9);
      continue;
    }
    Tensor q = device(DType::BF16, {R, H, DN + DR}), kv = device(DType::BF16, {T, H, DN + DV});
    Tensor lat = device(DType::BF16, {T, 576}), out = device(DType::BF16, {R, H, DV}), lse = device(DType::F32, {R, H});
    randomize(q, 7);
    randomize(kv, 8);
    randomize(lat, 9);
    std::vector<int32_t> start(R, 0), len(R);
    std::iota(len.begin(), len.end(), T - R + 1);
    Tensor row_start = upload_i32(start, {R}), row_len = upload_i32(len, {R});
    const Tensor k_nope = kv.slice(2, 0, DN), k_pe = lat.slice(1, 512, 576), v = kv.slice(2, DN, DN + DV);
    const int reps = T >= 32768 ? 3 : 5;
    const double ws = median_ms(1, reps, [&](int) {
      splash::cuda::expanded_attention(out, lse, q, k_nope, k_pe, v, row_start, row_len, 0.1352f, nullptr);
    });
    const double one_wg = median_ms(1, reps, [&](int) {
      splash::cuda::expanded_attention_one_warpgroup(out, lse, q, k_nope, k_pe, v, row_start, row_len, 0.1352f,
                                                     nullptr);
    });
    const double pairs = static_cast<double>(R) * (T - R) + static_cast<double>(R) * (R + 1) / 2;
    const double flops = 2.0 * H * (DN + DR + DV) * pairs;
    std::printf("%8d %8d %10.3f %9.0f %7.0f%% %10.3f %9.0f %7.2fx\n", R, T, ws, flops / ws / 1e9,
                100.0 * flops / ws / 1e9 / gemm, one_wg, flops / one_wg / 1e9, one_wg / ws);
  }
}

// Absorbed decode of B rows at ctx tokens each (pages of 64, scattered) over a cache of dtype dt: the
// specialized kernel's time (0 where the shape has none) and the generic kernel's, on the same inputs.
std::pair<double, double> time_absorbed(int H, int C, int dr, int B, int ctx, bool has_specialized, DType dt) {
  constexpr int kPage = 64;
  const int W = C + dr, seq_pages = ctx / kPage;
  const RandomPool pool = random_pool(dt, int64_t{B} * seq_pages, kPage, W, 10);
  std::vector<int32_t> ids(static_cast<size_t>(B) * seq_pages);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), std::mt19937(11));
  std::vector<int32_t> seq(B), len(B, ctx);
  std::iota(seq.begin(), seq.end(), 0);
  splash::PagedKv kv{pool.data, upload_i32(ids, {B, seq_pages}), upload_i32(seq, {B}), upload_i32(len, {B})};
  kv.scales = pool.scales;
  Tensor q = device(DType::BF16, {B, H, W}), out = device(DType::BF16, {B, H, C}), lse = device(DType::F32, {B, H});
  randomize(q, 12);
  const float scale = 0.1352f;
  double special = 0.0;
  if (has_specialized)
    special = median_ms(2, 9, [&](int) { splash::cuda::absorbed_attention(out, lse, q, kv, scale, nullptr); });
  const double generic =
      median_ms(2, 9, [&](int) { splash::cuda::absorbed_attention_generic(out, lse, q, kv, scale, nullptr); });
  return {special, generic};
}

// Causal expanded prefill of one sequence of T tokens, as time_absorbed.
std::pair<double, double> time_expanded(int H, int dn, int dr, int dv, int T, bool has_specialized) {
  Tensor q = device(DType::BF16, {T, H, dn + dr}), kv = device(DType::BF16, {T, H, dn + dv});
  Tensor lat = device(DType::BF16, {T, 512 + dr}), out = device(DType::BF16, {T, H, dv}),
         lse = device(DType::F32, {T, H});
  randomize(q, 13);
  randomize(kv, 14);
  randomize(lat, 15);
  std::vector<int32_t> start(T, 0), len(T);
  std::iota(len.begin(), len.end(), 1);
  Tensor row_start = upload_i32(start, {T}), row_len = upload_i32(len, {T});
  const Tensor k_nope = kv.slice(2, 0, dn), k_pe = lat.slice(1, 512, 512 + dr), v = kv.slice(2, dn, dn + dv);
  double special = 0.0;
  if (has_specialized)
    special = median_ms(1, 5, [&](int) {
      splash::cuda::expanded_attention(out, lse, q, k_nope, k_pe, v, row_start, row_len, 0.1352f, nullptr);
    });
  const double generic = median_ms(1, 5, [&](int) {
    splash::cuda::expanded_attention_generic(out, lse, q, k_nope, k_pe, v, row_start, row_len, 0.1352f, nullptr);
  });
  return {special, generic};
}

void print_generic_row(const char* form, const char* shape, std::pair<double, double> ms, double flops) {
  if (ms.first > 0)
    std::printf("%-9s %-36s %11.3f %11.3f %7.2fx %9.0f\n", form, shape, ms.first, ms.second, ms.second / ms.first,
                flops / ms.second / 1e9);
  else
    std::printf("%-9s %-36s %11s %11.3f %8s %9.0f\n", form, shape, "-", ms.second, "-", flops / ms.second / 1e9);
}

void bench_generic() {
  std::printf("\ngeneric kernels (any shape) next to the specialized ones; ratio = generic / specialized time\n");
  std::printf("%-9s %-36s %11s %11s %8s %9s\n", "form", "shape", "special_ms", "generic_ms", "ratio", "gen_TFLOPs");
  constexpr int B = 64, ctx = 4096;
  struct Absorbed {
    int H, C, dr;
    bool specialized;
    const char* name;
  };
  for (DType dt : {DType::BF16, DType::F8E4M3})
    for (const Absorbed& x : {Absorbed{128, 512, 64, true, "H 128, C 512 + 64, B 64 x 4K"},
                              Absorbed{16, 512, 64, true, "H 16, C 512 + 64, B 64 x 4K"},
                              Absorbed{40, 256, 32, false, "H 40, C 256 + 32, B 64 x 4K (MiniCPM3)"}}) {
      const double flops = 2.0 * B * x.H * static_cast<double>(ctx) * (2 * x.C + x.dr);
      print_generic_row(dt == DType::BF16 ? "absorbed" : "abs_fp8", x.name,
                        time_absorbed(x.H, x.C, x.dr, B, ctx, x.specialized, dt), flops);
    }
  constexpr int T = 4096;
  struct Expanded {
    int H, dn, dr, dv;
    bool specialized;
    const char* name;
  };
  for (const Expanded& x : {Expanded{128, 128, 64, 128, true, "H 128, 128/64/128, causal 4K"},
                            Expanded{40, 64, 32, 64, false, "H 40, 64/32/64, causal 4K"}}) {
    const double flops = 2.0 * x.H * (x.dn + x.dr + x.dv) * (static_cast<double>(T) * (T + 1) / 2);
    print_generic_row("expanded", x.name, time_expanded(x.H, x.dn, x.dr, x.dv, T, x.specialized), flops);
  }
}

}  // namespace

// Arguments name the sections to run (decode, prefill, generic); none runs all three. SPLASH_BENCH_HEADS,
// SPLASH_BENCH_BATCHES and SPLASH_BENCH_CONTEXTS (comma lists) narrow the decode points, SPLASH_BENCH_SPREAD
// (0-1) makes their rows uneven (bench/peer_mla.py times full rows only).
int main(int argc, char** argv) {
  const auto want = [&](const char* section) {
    if (argc < 2) return true;
    for (int i = 1; i < argc; ++i)
      if (std::strcmp(argv[i], section) == 0) return true;
    return false;
  };
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s, %d SMs, %.0f MB L2, %.1f GB\n", prop.name, prop.multiProcessorCount, prop.l2CacheSize / 1e6,
              prop.totalGlobalMem / 1e9);
  const double copy = copy_bandwidth_gbs();
  const double gemm = gemm_tflops();
  std::printf("limits: device-to-device copy %.0f GB/s (read + write), bf16 GEMM 8192^3 %.0f TFLOP/s\n", copy, gemm);
  if (want("decode")) bench_decode(copy);
  if (want("prefill")) bench_prefill(gemm);
  if (want("generic")) bench_generic();
  return 0;
}
