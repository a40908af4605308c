"""The peer of splash_bench_attention's generic-kernel rows: PyTorch's fused attention at the same shapes.

    python3 bench/attention_peer.py

For each shape of `bench_generic()` in bench/bench_attention.cu, times torch's scaled_dot_product_attention
under each fused backend that takes it (cuDNN, flash, memory-efficient) and prints the fastest, with
TFLOP/s counted as the C++ bench counts them. The absorbed rows give the peer one KV head of width
C + d_r over a contiguous cache (GQA broadcast, or the head expanded as a stride-0 view), V a copy
of its first C columns: no paging, which can only help it, and V read apart, which costs it bytes. Medians of CUDA-event timings after warm-up; inputs are random bf16. The device
script runs it in the same call as splash_bench_attention (stage `attention`).
"""
import warnings

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

BACKENDS = [("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION),
            ("efficient", SDPBackend.EFFICIENT_ATTENTION)]


def median_ms(fn, warm, reps):
    for _ in range(warm):
        fn()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return sorted(times)[len(times) // 2]


def fastest(calls, warm, reps):
    """(ms, backend) of the fastest fused backend and form in `calls` ({form: callable}); (None, why)
    if none runs."""
    best, why = None, []
    for form, call in calls.items():
        for name, backend in BACKENDS:
            try:
                with sdpa_kernel([backend]):
                    ms = median_ms(call, warm, reps)
            except RuntimeError as e:
                why.append(f"{name}/{form}: {str(e).splitlines()[0][:50]}")
                continue
            if best is None or ms < best[0]:
                best = (ms, f"{name} ({form})")
    return best if best else (None, "; ".join(why))


def absorbed(H, C, dr, B=64, ctx=4096):
    W = C + dr
    q = torch.randn(B, H, 1, W, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(B, 1, ctx, W, device="cuda", dtype=torch.bfloat16)
    v = k[..., :C].contiguous()
    sdpa = F.scaled_dot_product_attention
    calls = {"gqa": lambda: sdpa(q, k, v, scale=0.1352, enable_gqa=True),  # one KV head for all
             "expanded heads": lambda: sdpa(q, k.expand(B, H, ctx, W), v.expand(B, H, ctx, C), scale=0.1352)}
    ms, backend = fastest(calls, 2, 9)
    return ms, backend, 2.0 * B * H * ctx * (2 * C + dr)


def expanded(H, dn, dr, dv, T=4096):
    q = torch.randn(1, H, T, dn + dr, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(1, H, T, dn + dr, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(1, H, T, dv, device="cuda", dtype=torch.bfloat16)
    ms, backend = fastest({"mha": lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.1352)}, 1, 5)
    return ms, backend, 2.0 * H * (dn + dr + dv) * (T * (T + 1) / 2)


def main():
    warnings.filterwarnings("ignore", category=UserWarning)  # torch explains each backend it skips
    print(f"peer: torch {torch.__version__} scaled_dot_product_attention on {torch.cuda.get_device_name()}")
    print(f"{'form':<9} {'shape':<36} {'peer_ms':>9} {'TFLOP/s':>8}  backend")
    rows = [("absorbed", "H 128, C 512 + 64, B 64 x 4K", lambda: absorbed(128, 512, 64)),
            ("absorbed", "H 16, C 512 + 64, B 64 x 4K", lambda: absorbed(16, 512, 64)),
            ("absorbed", "H 40, C 256 + 32, B 64 x 4K (MiniCPM3)", lambda: absorbed(40, 256, 32)),
            ("expanded", "H 128, 128/64/128, causal 4K", lambda: expanded(128, 128, 64, 128)),
            ("expanded", "H 40, 64/32/64, causal 4K", lambda: expanded(40, 64, 32, 64))]
    for form, shape, run in rows:
        ms, backend, flops = run()
        if ms is None:
            print(f"{form:<9} {shape:<36} {'-':>9} {'-':>8}  none: {backend}")
        else:
            print(f"{form:<9} {shape:<36} {ms:9.3f} {flops / ms / 1e9:8.0f}  {backend}")


if __name__ == "__main__":
    main()
