// Copies between host and device in any layout, fill, dtype conversion, upload and read-back.
#include <cstring>
#include <vector>

#include "kernels/cuda/cuda_check.cuh"

#include <algorithm>
#include "kernels/cuda/cuda_backend.cuh"
#include "kernels/cuda/cuda_layout.cuh"
#include "kernels/cuda/cuda_memory.cuh"
#include "kernels/cuda/cuda_types.cuh"
#include "kernels/cuda/kernel_launch_pdl.cuh"

namespace splash::cuda {

JointRows collapse_rows(std::initializer_list<const Tensor*> ts) {
  const Tensor& t0 = **ts.begin();
  const int n = static_cast<int>(ts.size());
  JointRows out;
  const int nd = t0.ndim();
  if (nd == 0) return out;
  for (const Tensor* t : ts)
    SPLASH_CHECK(t->size(-1) <= 1 || t->stride(-1) == 1, "tensor {} has a strided last dimension", t->shape_str());
  out.row_elems = t0.size(-1);
  struct Dim {
    int64_t size, stride[2];
  };
  Dim dims[Tensor::kMaxDims];
  int nd_out = 0;  // collected innermost first
  for (int d = nd - 2; d >= 0; --d) {
    const int64_t sz = t0.size(d);
    if (sz == 1) continue;
    bool into_row = nd_out == 0, into_prev = nd_out > 0;
    int i = 0;
    for (const Tensor* t : ts) {
      into_row = into_row && t->stride(d) == out.row_elems;
      into_prev = into_prev && t->stride(d) == dims[nd_out - 1].size * dims[nd_out - 1].stride[i];
      ++i;
    }
    if (into_row) {
      out.row_elems *= sz;
    } else if (into_prev) {
      dims[nd_out - 1].size *= sz;
    } else {
      Dim& nd_ = dims[nd_out++];
      nd_.size = sz;
      i = 0;
      for (const Tensor* t : ts) nd_.stride[i++] = t->stride(d);
    }
  }
  SPLASH_CHECK(nd_out <= RowLayout::kMaxOuter, "layout of {} has too many outer dims", t0.shape_str());
  for (int k = 0; k < n; ++k) {
    const int64_t es = static_cast<int64_t>(dtype_size((*(ts.begin() + k))->dtype()));
    RowLayout& l = out.layout[k];
    l.nd = nd_out;
    for (int j = 0; j < nd_out; ++j) {
      l.size[j] = dims[nd_out - 1 - j].size;
      l.stride[j] = dims[nd_out - 1 - j].stride[k] * es;
    }
  }
  for (int j = 0; j < nd_out; ++j) out.rows *= dims[j].size;
  return out;
}

int byte_vec_width(const JointRows& r, int64_t row_bytes, std::initializer_list<const void*> ptrs) {
  int64_t acc = row_bytes;
  for (const void* p : ptrs) acc |= static_cast<int64_t>(reinterpret_cast<uintptr_t>(p));
  for (const RowLayout& l : r.layout)
    for (int d = 0; d < l.nd; ++d) acc |= l.stride[d];
  for (int w = 16; w > 1; w /= 2)
    if (acc % w == 0) return w;
  return 1;
}

namespace {

template <typename V>
__global__ void copy_rows_kernel(char* dst, RowLayout dl, const char* src, RowLayout sl, int64_t rows, int64_t chunks) {
  pdl_begin();
  const int64_t n = rows * chunks;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = i / chunks, c = i % chunks;
    *reinterpret_cast<V*>(dst + dl.offset(r) + c * sizeof(V)) =
        *reinterpret_cast<const V*>(src + sl.offset(r) + c * sizeof(V));
  }
}

template <typename V>
__global__ void zero_rows_kernel(char* dst, RowLayout dl, int64_t rows, int64_t chunks) {
  pdl_begin();
  const int64_t n = rows * chunks;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = i / chunks, c = i % chunks;
    *reinterpret_cast<V*>(dst + dl.offset(r) + c * sizeof(V)) = V{};
  }
}

template <typename TO, typename TI, int V>
__global__ void convert_kernel(char* dst, RowLayout dl, const char* src, RowLayout sl, int64_t rows, int64_t row_elems) {
  pdl_begin();
  const int64_t per_row = row_elems / V, n = rows * per_row;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = i / per_row, c = i % per_row;
    float f[V];
    load_f32<V>(reinterpret_cast<const TI*>(src + sl.offset(r)) + c * V, f);
    store_f32<V>(reinterpret_cast<TO*>(dst + dl.offset(r)) + c * V, f);
  }
}

// Calls f(V{}) with V an unsigned type of `bytes` bytes.
template <typename F>
void with_word(int bytes, F&& f) {
  switch (bytes) {
    case 16: return f(uint4{});
    case 8: return f(uint2{});
    case 4: return f(uint32_t{});
    case 2: return f(uint16_t{});
    default: return f(uint8_t{});
  }
}

// Calls f(Tag<T>{}) for every dtype a conversion may read.
template <typename F>
void dispatch_source(DType t, F&& f) {
  switch (t) {
    case DType::F8E4M3: return f(Tag<__nv_fp8_e4m3>{});
    case DType::I32: return f(Tag<int32_t>{});
    default: return dispatch_float(t, "convert source", f);
  }
}

// Host loop over the rows of a host tensor (row-major order), for packing and unpacking.
template <typename Fn>
void for_each_host_row(const Tensor& t, Fn fn) {
  const JointRows r = collapse_rows({&t});
  const size_t row_bytes = static_cast<size_t>(r.row_elems) * dtype_size(t.dtype());
  for (int64_t i = 0; i < r.rows; ++i) fn(static_cast<char*>(t.data()) + r.layout[0].offset(i), i, row_bytes);
}

// A tensor's shape, as empty() takes it.
struct Shape {
  int64_t dims[Tensor::kMaxDims];
  int n;
  explicit Shape(const Tensor& t) : n(t.ndim()) {
    for (int d = 0; d < n; ++d) dims[d] = t.size(d);
  }
  operator std::span<const int64_t>() const { return {dims, static_cast<size_t>(n)}; }
};

}  // namespace

void CudaBackend::copy_device(const Tensor& dst, const Tensor& src, cudaStream_t st) {
  const JointRows r = collapse_rows({&dst, &src});
  const int64_t row_bytes = r.row_elems * static_cast<int64_t>(dtype_size(dst.dtype()));
  if (r.layout[0].nd == 0) {
    SPLASH_CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.data(), row_bytes, cudaMemcpyDeviceToDevice, st));
    return;
  }
  with_word(byte_vec_width(r, row_bytes, {dst.data(), src.data()}), [&](auto w) {
    using V = decltype(w);
    const int64_t chunks = row_bytes / static_cast<int64_t>(sizeof(V));
    launch_kernel(copy_rows_kernel<V>, grid_for(r.rows * chunks, 256), 256, 0, st,
        static_cast<char*>(dst.data()), r.layout[0], static_cast<const char*>(src.data()), r.layout[1], r.rows, chunks);
  });
  SPLASH_CUDA_LAUNCHED();
}

void CudaBackend::convert(const Tensor& dst, const Tensor& src, cudaStream_t st) {
  SPLASH_CHECK(dst.same_shape(src), "convert: shapes {} and {} differ", dst.shape_str(), src.shape_str());
  if (dst.numel() == 0) return;
  const JointRows r = collapse_rows({&dst, &src});
  const int V = vec_width(dst.size(-1), {&dst, &src});
  dispatch_float(dst.dtype(), "convert destination", [&](auto to) {
    dispatch_source(src.dtype(), [&](auto ti) {
      dispatch_vec(V, [&](auto v) {
        using TO = typename decltype(to)::type;
        using TI = typename decltype(ti)::type;
        launch_kernel(convert_kernel<TO, TI, decltype(v)::value>, grid_for(r.rows * r.row_elems / v, 256), 256, 0, st,
            static_cast<char*>(dst.data()), r.layout[0], static_cast<const char*>(src.data()), r.layout[1], r.rows,
            r.row_elems);
      });
    });
  });
  SPLASH_CUDA_LAUNCHED();
}

Tensor CudaBackend::contiguous_as(const Tensor& t, DType dt) {
  if (t.dtype() == dt && t.is_contiguous()) return t;
  const Shape shape(t);
  Tensor out = empty(dt, shape);
  if (t.dtype() == dt)
    copy_device(out, t, op_stream());
  else
    convert(out, t, op_stream());
  return out;
}

void CudaBackend::copy(Tensor dst, Tensor src, Stream s) {
  SPLASH_CHECK(dst.same_shape(src), "copy: shapes {} and {} differ", dst.shape_str(), src.shape_str());
  SPLASH_CHECK(dst.dtype() == src.dtype(), "copy: dtypes {} and {} differ", dtype_name(dst.dtype()),
               dtype_name(src.dtype()));
  if (dst.numel() == 0) return;
  const cudaStream_t st = stream_of(s);
  const bool dst_dev = dst.device() == Device::CUDA, src_dev = src.device() == Device::CUDA;
  const size_t bytes = dst.nbytes();
  if (dst_dev && src_dev) return copy_device(dst, src, st);
  if (!dst_dev && !src_dev) {
    const JointRows r = collapse_rows({&dst, &src});
    const size_t row_bytes = static_cast<size_t>(r.row_elems) * dtype_size(dst.dtype());
    for (int64_t i = 0; i < r.rows; ++i)
      std::memmove(static_cast<char*>(dst.data()) + r.layout[0].offset(i),
                   static_cast<const char*>(src.data()) + r.layout[1].offset(i), row_bytes);
    return;
  }
  if (dst_dev) {
    // Host -> device: pack the source rows, copy them to a contiguous target, then scatter on the GPU
    // if the destination is strided.
    Tensor target = dst.is_contiguous() ? dst : alloc(dst.dtype(), Shape(dst), st);
    auto pack = [&](char* p) {
      for_each_host_row(src, [&](const char* row, int64_t i, size_t rb) { std::memcpy(p + i * rb, row, rb); });
    };
    if (bytes <= HostStaging::kMaxCopy) {
      char* p = static_cast<char*>(staging_->acquire(bytes));
      pack(p);
      SPLASH_CUDA_CHECK(cudaMemcpyAsync(target.data(), p, bytes, cudaMemcpyHostToDevice, st));
      staging_->commit(st);
    } else {
      std::vector<char> packed;
      const void* p = src.data();
      if (!src.is_contiguous()) {
        packed.resize(bytes);
        pack(packed.data());
        p = packed.data();
      }
      SPLASH_CUDA_CHECK(cudaMemcpyAsync(target.data(), p, bytes, cudaMemcpyHostToDevice, st));
      // The pageable source belongs to the caller, who may free it once we return.
      SPLASH_CUDA_CHECK(cudaStreamSynchronize(st));
    }
    if (target.data() != dst.data()) copy_device(dst, target, st);
    return;
  }
  // Device -> host: gather to a contiguous block on the GPU, copy, wait, unpack if strided.
  Tensor from = src.is_contiguous() ? src : alloc(src.dtype(), Shape(src), st);
  if (from.data() != src.data()) copy_device(from, src, st);
  if (dst.is_contiguous()) {
    SPLASH_CUDA_CHECK(cudaMemcpyAsync(dst.data(), from.data(), bytes, cudaMemcpyDeviceToHost, st));
    SPLASH_CUDA_CHECK(cudaStreamSynchronize(st));
  } else {
    std::vector<char> buf(bytes);
    SPLASH_CUDA_CHECK(cudaMemcpyAsync(buf.data(), from.data(), bytes, cudaMemcpyDeviceToHost, st));
    SPLASH_CUDA_CHECK(cudaStreamSynchronize(st));
    for_each_host_row(dst, [&](char* row, int64_t i, size_t rb) { std::memcpy(row, buf.data() + i * rb, rb); });
  }
  check_device_errors();
}

void CudaBackend::fill_zero(Tensor dst, Stream s) {
  if (dst.numel() == 0) return;
  SPLASH_CHECK(dst.device() == Device::CUDA, "fill_zero of a host tensor on the CUDA backend");
  const cudaStream_t st = stream_of(s);
  const JointRows r = collapse_rows({&dst});
  const int64_t row_bytes = r.row_elems * static_cast<int64_t>(dtype_size(dst.dtype()));
  if (r.layout[0].nd == 0) {
    SPLASH_CUDA_CHECK(cudaMemsetAsync(dst.data(), 0, row_bytes, st));
    return;
  }
  with_word(byte_vec_width(r, row_bytes, {dst.data()}), [&](auto w) {
    using V = decltype(w);
    const int64_t chunks = row_bytes / static_cast<int64_t>(sizeof(V));
    launch_kernel(zero_rows_kernel<V>, grid_for(r.rows * chunks, 256), 256, 0, st,
        static_cast<char*>(dst.data()), r.layout[0],
        r.rows, chunks);
  });
  SPLASH_CUDA_LAUNCHED();
}

// Pinned host buffers for read-backs (every step's logits): a copy into pageable memory runs at a third
// of the speed. A buffer returns to the pool when the last tensor viewing it dies; a few are kept.
std::shared_ptr<void> CudaBackend::pinned_buffer(size_t bytes) {
  for (auto& [cap, buf] : pinned_)
    if (buf.use_count() == 1 && cap >= bytes) return buf;
  constexpr size_t kKept = 4;
  if (pinned_.size() >= kKept) {  // all in use: replace the smallest idle one, or fall back to pageable
    auto idle = std::find_if(pinned_.begin(), pinned_.end(), [](const auto& p) { return p.second.use_count() == 1; });
    if (idle == pinned_.end()) return nullptr;
    pinned_.erase(idle);
  }
  void* p = nullptr;
  SPLASH_CUDA_CHECK(cudaHostAlloc(&p, bytes, cudaHostAllocDefault));
  pinned_.emplace_back(bytes, std::shared_ptr<void>(p, [](void* q) { cudaFreeHost(q); }));
  return pinned_.back().second;
}

Tensor CudaBackend::to_host_f32(Tensor src) {
  const Shape shape(src);
  std::shared_ptr<void> pinned = src.device() == Device::CUDA && src.numel() > 0
                                     ? pinned_buffer(static_cast<size_t>(src.numel()) * sizeof(float))
                                     : nullptr;
  Tensor flat = pinned ? Tensor(pinned.get(), DType::F32, {src.numel()}, Device::CPU, pinned)
                       : cpu_tensor(DType::F32, {src.numel()});
  Tensor out(flat.data(), DType::F32, shape.dims, shape.n, Device::CPU, flat.owner());
  if (src.numel() == 0) return out;
  if (src.device() == Device::CPU) {
    float* o = out.ptr<float>();
    for_each_host_row(src, [&](const char* row, int64_t i, size_t rb) {
      const size_t n = rb / dtype_size(src.dtype());
      convert_to_f32(src.dtype(), row, o + i * n, n);
    });
    return out;
  }
  Tensor f = contiguous_as(src, DType::F32);
  SPLASH_CUDA_CHECK(cudaMemcpyAsync(out.data(), f.data(), out.nbytes(), cudaMemcpyDeviceToHost, op_stream()));
  SPLASH_CUDA_CHECK(cudaStreamSynchronize(op_stream()));
  check_device_errors();
  return out;
}

Tensor CudaBackend::upload(Tensor host, DType dtype) {
  const Shape shape(host);
  Tensor out = empty(dtype, shape);
  if (host.numel() == 0) return out;
  if (host.dtype() == dtype) {
    copy(out, host);
    return out;
  }
  // Convert on the GPU: the host only moves the raw bytes.
  Tensor raw = host;
  if (host.device() != Device::CUDA) {
    raw = empty(host.dtype(), shape);
    copy(raw, host);
  }
  convert(out, raw, op_stream());
  return out;
}

}  // namespace splash::cuda
