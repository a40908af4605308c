"""The peers of splash_bench_attention's main tables, timed on the same shapes in the same call.

    python3 bench/peer_mla.py --output peer.json

- Absorbed decode: FlashInfer's BatchMLAPagedAttentionWrapper (backend fa3 on Hopper) over a paged
  latent cache, C 512 + d_r 64, page 64, every row at the full context, softmax scale 0.1352: the grid
  of `bench_decode()` in bench/bench_attention.cu (heads 128 and 16, B 1/16/64/128, contexts 4K-128K).
  FlashInfer keeps the latent and rope parts in two caches ([pages, 64, 512] and [pages, 64, 64]); the
  bytes are the same as SPLASH's interleaved [pages, 64, 576].
- Expanded prefill: cuDNN's fused SDPA through PyTorch (falling back to the fastest fused backend that
  takes the shape), H 128, qk 192 / v 128, one causal sequence, the token counts of `bench_prefill()`,
  and its chunked point (4K rows against a 32K context, causal at the bottom right).

Each peer call is captured in a CUDA graph and replayed, so Python's launch cost is not timed; the
median of 9 (decode) or 3-5 (prefill) event-timed replays after warm-up, as the C++ bench does. Inputs
smaller than ~512 MB rotate over up to 16 disjoint random page sets, as the C++ bench does, so
repeated calls do not read L2. Writes one JSON record per point; bench/peer_table.py joins them with
splash_bench_attention's output.
"""
import argparse
import json
import random
import warnings

import torch

from attention_peer import fastest, median_ms

C, DR, PAGE, SCALE = 512, 64, 64, 0.1352


def graphed(fn):
    """fn captured in a CUDA graph (after one eager warm-up call). The graph reads the memory of
    whatever fn uses at replay: the caller keeps those alive as long as the graph."""
    fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    return g


def flashinfer_decode(flashinfer, ckv, kpe, pages, H, B, ctx, rng, workspace):
    seq_pages = ctx // PAGE
    need = B * seq_pages
    if need > pages:
        return None, f"needs {need} pages, {pages} allocated"
    kv_bytes = need * PAGE * (C + DR) * 2
    rot = max(1, min(int(512e6 / kv_bytes) + 1, 16, pages // need))
    ids = list(range(pages))
    rng.shuffle(ids)
    q_nope = torch.randn(B, H, C, device="cuda", dtype=torch.bfloat16)
    q_pe = torch.randn(B, H, DR, device="cuda", dtype=torch.bfloat16)
    qo_indptr = torch.arange(B + 1, device="cuda", dtype=torch.int32)
    kv_indptr = torch.arange(B + 1, device="cuda", dtype=torch.int32) * seq_pages
    kv_len = torch.full((B,), ctx, device="cuda", dtype=torch.int32)
    graphs, alive = [], []
    for r in range(rot):
        indices = torch.tensor(ids[r * need:(r + 1) * need], device="cuda", dtype=torch.int32)
        w = flashinfer.mla.BatchMLAPagedAttentionWrapper(workspace, backend="fa3")
        w.plan(qo_indptr, kv_indptr, indices, kv_len, H, C, DR, PAGE, False, SCALE, torch.bfloat16, torch.bfloat16)
        out = torch.empty(B, H, C, device="cuda", dtype=torch.bfloat16)
        graphs.append(graphed(lambda: w.run(q_nope, q_pe, ckv, kpe, out=out)))
        alive.append((w, out, indices))  # the wrapper's plan buffers and the page ids the graph reads
    calls = iter(range(10**9))
    ms = median_ms(lambda: graphs[next(calls) % rot].replay(), 2, 9)
    return ms, f"flashinfer {flashinfer.__version__} fa3, rotate {rot}"


def decode_points(pages_cap):
    try:
        import flashinfer
    except ImportError as e:
        return [{"form": "decode", "error": f"flashinfer not importable: {e}"}]
    free, _ = torch.cuda.mem_get_info()
    pages = min(pages_cap, int(free * 0.6 / (PAGE * (C + DR) * 2)))
    ckv = torch.randn(pages, PAGE, C, device="cuda", dtype=torch.bfloat16)
    kpe = torch.randn(pages, PAGE, DR, device="cuda", dtype=torch.bfloat16)
    workspace = torch.empty(128 << 20, dtype=torch.int8, device="cuda")
    rng = random.Random(5)
    points = []
    for H in (128, 16):
        for B in (1, 16, 64, 128):
            for ctx in (4096, 16384, 65536, 131072):
                try:
                    ms, how = flashinfer_decode(flashinfer, ckv, kpe, pages, H, B, ctx, rng, workspace)
                except Exception as e:  # a peer failing one point is reported, not fatal
                    ms, how = None, f"{type(e).__name__}: {str(e).splitlines()[0][:80]}"
                points.append({"form": "decode", "H": H, "B": B, "context": ctx, "ms": ms, "peer": how})
                print(json.dumps(points[-1]), flush=True)
    return points


def prefill_points():
    H, DN, DV = 128, 128, 128
    points = []
    for T in (4096, 8192, 16384, 32768, 65536):
        need = T * H * ((DN + DR) * 2 + DV * 2) * 2
        if need > 0.5 * torch.cuda.mem_get_info()[0]:
            points.append({"form": "prefill", "tokens": T, "ms": None, "peer": "skipped: memory"})
            continue
        q = torch.randn(1, H, T, DN + DR, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(1, H, T, DN + DR, device="cuda", dtype=torch.bfloat16)
        v = torch.randn(1, H, T, DV, device="cuda", dtype=torch.bfloat16)
        sdpa = torch.nn.functional.scaled_dot_product_attention
        ms, how = fastest({"mha": lambda: sdpa(q, k, v, is_causal=True, scale=SCALE)}, 1, 3 if T >= 32768 else 5)
        points.append({"form": "prefill", "tokens": T, "ms": ms, "peer": f"torch {torch.__version__} {how}"})
        print(json.dumps(points[-1]), flush=True)
        del q, k, v
    # Chunked prefill: 4K new rows against a 32K context (the cached prefix first), causal at the bottom
    # right, as splash_bench_attention's chunked point.
    from torch.nn.attention.bias import causal_lower_right
    rows, ctx = 4096, 32768
    q = torch.randn(1, H, rows, DN + DR, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(1, H, ctx, DN + DR, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(1, H, ctx, DV, device="cuda", dtype=torch.bfloat16)
    mask = causal_lower_right(rows, ctx)
    sdpa = torch.nn.functional.scaled_dot_product_attention
    ms, how = fastest({"mha": lambda: sdpa(q, k, v, attn_mask=mask, scale=SCALE)}, 1, 5)
    points.append({"form": "prefill", "tokens": rows, "context": ctx, "ms": ms, "peer": f"torch {torch.__version__} {how}"})
    print(json.dumps(points[-1]), flush=True)
    return points


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--output", required=True)
    ap.add_argument("--max-pages", type=int, default=128 * 131072 // PAGE, help="cache pages at most (default: 128 x 128K)")
    args = ap.parse_args()
    warnings.filterwarnings("ignore", category=UserWarning)
    torch.manual_seed(0)
    print(f"peer device: {torch.cuda.get_device_name()}", flush=True)
    points = decode_points(args.max_pages)
    torch.cuda.empty_cache()
    points += prefill_points()
    with open(args.output, "w") as f:
        json.dump(points, f, indent=1)


if __name__ == "__main__":
    main()
