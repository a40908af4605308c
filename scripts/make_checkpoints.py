"""Random valid MLA checkpoints with HF transformers reference logits, for `splash check` on any shape.

    python3 scripts/make_checkpoints.py OUTDIR [--count N] [--seed S] [--heads-multiple-of K]

Each checkpoint is a small random DeepseekV3ForCausalLM whose attention dimensions are drawn from the
ranges a real MLA config can have (head dims 16..256 in steps of 8, kv_lora_rank 32..1024 in steps of
16, odd head counts, q_lora on or off, yarn or no rope scaling, dense-only or MoE with expert groups),
saved in DeepSeek's original checkpoint layout (bf16, per-expert weights), reloaded by transformers and
run in float32 over the bf16 weights: the same contract as the shared fixture (reference.safetensors
with pK.input_ids / pK.logits / pK.greedy, reference.json with each prompt's greedy margin). Needs torch
and transformers (the device machine has both); the seed makes the set reproducible.
"""
import argparse
import json
import os
import random

import torch
from safetensors.torch import save_file
from transformers import DeepseekV3Config, DeepseekV3ForCausalLM

PROMPT_LENS = [1, 9, 40, 130]
GREEDY_TOKENS = 12


def random_config(rng, heads_multiple_of):
    """A valid config with every attention dimension off the common values where the draw lands."""
    step8 = lambda lo, hi: rng.randrange(lo, hi + 1, 8)
    heads = rng.choice([1, 3, 5, 7, 9, 11, 16, 20]) if heads_multiple_of == 1 else heads_multiple_of * rng.randint(1, 4)
    hidden = rng.choice([64, 96, 128, 192])
    layers = rng.randint(2, 3)
    moe = rng.random() < 0.6
    c = dict(vocab_size=384, hidden_size=hidden, intermediate_size=rng.choice([128, 176, 256]),
             num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=heads,
             kv_lora_rank=rng.randrange(32, 1024 + 1, 16), q_lora_rank=rng.choice([None, step8(16, 256)]),
             qk_nope_head_dim=step8(16, 256), qk_rope_head_dim=step8(16, 256), v_head_dim=step8(16, 256),
             max_position_embeddings=2048, rms_norm_eps=1e-6, initializer_range=0.04,
             rope_theta=rng.choice([10000.0, 50000.0]), bos_token_id=0, eos_token_id=1)
    if moe:
        groups = rng.choice([1, 2, 4])
        experts = groups * rng.choice([2, 4])
        c.update(n_routed_experts=experts, n_shared_experts=rng.choice([0, 1]), moe_intermediate_size=rng.choice([48, 64, 88]),
                 n_group=groups, topk_group=rng.randint(1, groups), routed_scaling_factor=rng.choice([1.0, 2.5]),
                 norm_topk_prob=rng.random() < 0.5, first_k_dense_replace=rng.randint(0, 1))
        c["num_experts_per_tok"] = rng.randint(1, min(4, c["topk_group"] * experts // groups))
    else:  # every layer dense
        c.update(n_routed_experts=4, n_shared_experts=1, moe_intermediate_size=64, n_group=1, topk_group=1,
                 num_experts_per_tok=2, first_k_dense_replace=layers, routed_scaling_factor=1.0, norm_topk_prob=True)
    if rng.random() < 0.5:
        c["rope_scaling"] = {"type": "yarn", "rope_type": "yarn", "factor": rng.choice([2.0, 4.0]),
                             "original_max_position_embeddings": 512, "beta_fast": 32.0, "beta_slow": 1.0,
                             "mscale": 1.0, "mscale_all_dim": rng.choice([0.0, 1.0])}
    return c


def to_original(sd, cfg):
    """This transformers version's fused expert tensors as DeepSeek's per-expert names."""
    res = {}
    I, H = cfg["moe_intermediate_size"], cfg["hidden_size"]
    for k, v in sd.items():
        if ".experts.gate_up_proj" in k:
            pre = k.split(".experts.gate_up_proj")[0]
            for e in range(v.shape[0]):
                w = v[e] if v[e].shape == (2 * I, H) else v[e].t()
                res[f"{pre}.experts.{e}.gate_proj.weight"] = w[:I].contiguous()
                res[f"{pre}.experts.{e}.up_proj.weight"] = w[I:].contiguous()
        elif ".experts.down_proj" in k:
            pre = k.split(".experts.down_proj")[0]
            for e in range(v.shape[0]):
                w = v[e] if v[e].shape == (H, I) else v[e].t()
                res[f"{pre}.experts.{e}.down_proj.weight"] = w.contiguous()
        else:
            res[k] = v.contiguous()
    return res


def make(d, c, seed):
    os.makedirs(d, exist_ok=True)
    torch.manual_seed(seed)
    kw = dict(c)
    rope_scaling, theta = kw.pop("rope_scaling", None), kw.pop("rope_theta")
    if rope_scaling:
        kw["rope_scaling"] = dict(rope_scaling, rope_theta=theta)
    else:
        kw["rope_theta"] = theta
    model = DeepseekV3ForCausalLM(DeepseekV3Config(**kw)).float().eval()
    with torch.no_grad():  # norms and router biases away from their trivial initial values
        for n, p in model.named_parameters():
            if n.endswith("norm.weight") or "layernorm" in n:
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
        for n, b in model.named_buffers():
            if n.endswith("e_score_correction_bias"):
                b.copy_(0.05 * torch.randn_like(b))
    sd = {k: v.detach().to(torch.bfloat16) for k, v in model.state_dict().items() if "rotary_emb" not in k}
    save_file(to_original(sd, c), os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
    cfg = {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "torch_dtype": "bfloat16",
           "hidden_act": "silu", "tie_word_embeddings": False, "attention_bias": False, "scoring_func": "sigmoid",
           "topk_method": "noaux_tc", "num_nextn_predict_layers": 0}
    cfg.update(c)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    # The reference: reloaded from the files just written, float32 over the bf16 weights, eager attention.
    ref = DeepseekV3ForCausalLM.from_pretrained(d, dtype=torch.float32, attn_implementation="eager").eval()
    g = torch.Generator().manual_seed(seed)
    tensors, meta = {}, {"prompts": []}
    for i, L in enumerate(PROMPT_LENS):
        ids = torch.randint(2, c["vocab_size"], (1, L), generator=g)
        with torch.no_grad():
            logits = ref(input_ids=ids).logits[0].float()
            gen = ids
            for _ in range(GREEDY_TOKENS):  # greedy without a cache: the plain reference path
                gen = torch.cat([gen, ref(input_ids=gen).logits[0, -1].argmax().view(1, 1)], dim=1)
            top2 = ref(input_ids=gen).logits[0, L - 1:-1].float().topk(2, dim=-1).values
        tensors[f"p{i}.input_ids"] = ids[0].to(torch.int64).contiguous()
        tensors[f"p{i}.logits"] = logits.contiguous()
        tensors[f"p{i}.greedy"] = gen[0, L:].to(torch.int64).contiguous()
        meta["prompts"].append({"len": L, "greedy_min_margin": float((top2[:, 0] - top2[:, 1]).min())})
    save_file(tensors, os.path.join(d, "reference.safetensors"))
    with open(os.path.join(d, "reference.json"), "w") as f:
        json.dump(meta, f, indent=1)


def describe(c):
    return (f"H={c['num_attention_heads']} nope={c['qk_nope_head_dim']} rope={c['qk_rope_head_dim']} "
            f"v={c['v_head_dim']} kv_lora={c['kv_lora_rank']} q_lora={c['q_lora_rank']} "
            f"rope_scaling={'yarn' if 'rope_scaling' in c else 'none'} "
            f"experts={c['n_routed_experts'] if c['first_k_dense_replace'] < c['num_hidden_layers'] else 'dense'}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--count", type=int, default=6)
    ap.add_argument("--seed", type=int, default=16)
    ap.add_argument("--heads-multiple-of", type=int, default=1, help="head counts divisible by this (multi-rank checks)")
    a = ap.parse_args()
    rng = random.Random(a.seed)
    for k in range(a.count):
        c = random_config(rng, a.heads_multiple_of)
        name = f"random-{a.seed}-{k}"
        make(os.path.join(a.out, name), c, a.seed * 1000 + k)
        print(name, describe(c), flush=True)


if __name__ == "__main__":
    main()
