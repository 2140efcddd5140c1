"""Time whole engine steps of the sim-to-real models on a real GPU: every layer's kernels of one
forward pass, with random weights built from the model's config.json, as one CUDA graph.

The companion of ``bench/gpu_kernel_table.py`` (its per-kernel table); this one gives the
step model's fit (``python -m generation.engine.perf.fit_kernels``) what it predicts whole:
the GPU time of a step of ``B`` decoding sequences at context ``C`` each plus one prefill
chunk of ``n`` new tokens.  Run on the GPU to be profiled (torch with CUDA only)::

    python bench/gpu_step_table.py --compile --out steps.jsonl [--budget 300]
    python -m generation.engine.perf.fit_kernels --gpu NAME --steps steps.jsonl --out my.json
    python app.py MODEL --latency-calculator step --gpu NAME --step-time-profile my.json

Per layer, in vLLM's order: residual add + RMSNorm, the QKV GEMM, the KV cache write, decode
attention (``B`` one-token queries over ``C`` cached tokens, GQA as the model's) and causal
prefill attention (``n`` tokens) through cuDNN's fused attention (what the earlier kernel table
found fastest on Hopper, as vLLM's FlashAttention 3), the O GEMM, RMSNorm, and the MLP: gate/up
GEMM, SiLU-and-mul, down GEMM; or, for a MoE model, the router GEMM, top-k, a sort of the
tokens by expert and two grouped GEMMs (``torch._grouped_mm``) with the weighted sum back.  Then
the final norm, the lm_head over the ``B + (n > 0)`` sampled rows, and a softmax + argmax.
Per-GPU shapes at the model's tensor-parallel size; the all-reduces are left out (one GPU).
``--compile`` fuses the residual add + RMSNorm and the SiLU-and-mul with Inductor, as vLLM V1
compiles the model (its own fused kernels are off by default there).
Not in it: vLLM's rotary embedding, input preparation and the CPU (the step model's ``t0``).

A ``kind: "model"`` row carries each model's config.json (``--models`` takes a model folder's
path too), so the fit needs nothing beside the table.  Each step row: ``model``, ``tp``, ``layers``, ``B``, ``C``, ``n``, ``P`` (the chunk's cached prefix,
tokens: its attention reads ``P + n`` keys under a lower-right causal mask), ``us`` (median of 3 samples of
the graph replayed for >= 2 ms, CUDA events).  Every layer reads its own weights; the KV
cache of all layers is one pool of at most ``--kv-gib`` GiB, shared round-robin where the
layers' caches do not fit (each slice stays far larger than the L2 cache).
``--dry-run``: the CPU, 1/16 of the sizes, 2 layers (a check of the script only).
"""
from __future__ import annotations

import argparse
import sys
import time

import torch
import torch.nn.functional as F

from gpu_kernel_table import Table, Timer, arch, env_row, load_config

MODELS = [("llama-2-7b-hf", 1), ("llama-3.1-8b-instruct", 1), ("qwen2.5-7b-instruct", 1),
          ("mistral-nemo-instruct-2407", 1), ("codellama-34b-instruct-hf", 2),
          ("llama-2-70b-hf", 4), ("mixtral-8x7b-v0.1", 2), ("qwen3-14b", 1), ("yi-34b", 2),
          ("llama-3.1-70b-instruct", 4)]
DECODE_B = [1, 2, 4, 8, 16, 32, 64, 128, 256]
DECODE_C = [256, 1024, 4096]
PREFILL_N = [64, 256, 512, 1024, 2048, 4096, 8192]
MIXED = [(16, 1024, 512), (64, 1024, 512), (128, 1024, 512), (16, 1024, 2048), (64, 1024, 2048),
         (128, 1024, 2048), (256, 512, 256)]
# prefill chunks (n) after a cached prefix (P tokens: a prefix-cache hit or an earlier chunk)
CONTEXT_PREFILL = [(512, 512), (512, 2048), (512, 8192), (2048, 2048), (2048, 6144), (256, 16384)]
DTYPE = torch.bfloat16


def sdpa_context(dev: str):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    if dev == "cpu":
        return sdpa_kernel([SDPBackend.MATH])
    order = [SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]
    try:
        return sdpa_kernel(order, set_priority=True)
    except TypeError:                                  # an older torch: no priority order
        return sdpa_kernel(order)


def add_rms_norm(res, x, w):
    """Residual add then RMSNorm: (new residual, normed)."""
    res = res + x
    return res, F.rms_norm(res, (w.shape[0],), w, 1e-5)


def silu_and_mul(gu):
    i = gu.shape[-1] // 2
    return F.silu(gu[:, :i]) * gu[:, i:]


FUSED = {"add_rms_norm": add_rms_norm, "silu_and_mul": silu_and_mul}
MOE_IMPL = {"name": "torch", "fn": None}     # --moe triton: bench/gpu_moe.py's fused kernels


def compile_fused(dev: str) -> None:
    """Fuse the layer's elementwise ops with Inductor, as vLLM V1's torch.compile of the model
    does (its custom ops are off by default there); one dynamic-shape compile per function,
    done here (at 1, 2 and 64 rows) so that no step's timing waits for it."""
    for name, fn in list(FUSED.items()):
        FUSED[name] = torch.compile(fn, dynamic=True, fullgraph=True)
    for m in (1, 2, 64):
        a = torch.randn(m, 256, device=dev, dtype=DTYPE)
        FUSED["add_rms_norm"](a, a, torch.ones(256, device=dev, dtype=DTYPE))
        FUSED["silu_and_mul"](a)


class Model:
    """Random per-GPU weights of one model at tensor-parallel size ``tp``."""

    def __init__(self, cfg: str, tp: int, dev: str, scale: int, max_layers: int | None):
        a = arch(cfg)
        self.name, self.config = load_config(cfg)
        d = self.config.get("text_config", self.config)
        self.tp, self.dev = tp, dev
        self.layers = d["num_hidden_layers"] if max_layers is None else min(max_layers, d["num_hidden_layers"])
        s = scale
        r = 1 if s == 1 else 4                         # a dry run shrinks heads and head_dim by 4
        self.h = a["hidden"] // s
        self.hd = a["head_dim"] // r
        self.nq = max(1, a["heads"] // tp // r)
        self.nkv = max(1, a["kv_heads"] // tp // r)
        if self.nq % self.nkv:
            self.nkv = 1
        self.q, self.kv = self.nq * self.hd, self.nkv * self.hd
        self.experts, self.top_k = a["experts"], a["top_k"]
        self.i = (a["moe_inter"] if self.experts else a["inter"]) // tp // s
        self.vocab = a["vocab"] // tp // s

        def w(*shape):
            return torch.empty(*shape, device=dev, dtype=DTYPE).normal_(0, 0.02)
        self.norm = torch.ones(self.h, device=dev, dtype=DTYPE)
        self.L = []
        for _ in range(self.layers):
            layer = {"qkv": w(self.q + 2 * self.kv, self.h), "o": w(self.h, self.q)}
            if self.experts:
                layer.update(router=w(self.experts, self.h), w13=w(self.experts, self.h, 2 * self.i),
                             w2=w(self.experts, self.i, self.h))
            else:
                layer.update(gate_up=w(2 * self.i, self.h), down=w(self.h, self.i))
            self.L.append(layer)
        self.lm_head = w(self.vocab, self.h)

    def weight_bytes(self) -> int:
        n = sum(t.numel() for layer in self.L for t in layer.values()) + self.lm_head.numel()
        return 2 * n


class Step:
    """Operands and the forward of one step shape (``B`` decodes at context ``C``, a prefill
    chunk of ``n``), over ``model``; ``kv_pool`` a flat bf16 buffer for the KV caches."""

    def __init__(self, m: Model, b: int, c: int, n: int, kv_pool: torch.Tensor, p: int = 0):
        self.m, self.b, self.n, self.p = m, b, n, p
        dev = m.dev
        t = b + n
        self.x = torch.randn(t, m.h, device=dev, dtype=DTYPE)
        self.rows = torch.arange(b, device=dev) if not n else torch.cat(
            [torch.arange(b, device=dev), torch.tensor([t - 1], device=dev)])
        per_layer = 2 * b * m.nkv * c * m.hd
        self.caches = []
        if b:
            slots = max(1, kv_pool.numel() // per_layer)
            for l in range(m.layers):
                off = (l % slots) * per_layer
                flat = kv_pool[off:off + per_layer]
                kc, vc = flat.view(2, b, m.nkv, c, m.hd).unbind(0)
                self.caches.append((kc, vc))
        self.prefix = []                 # with p: each layer's cache of the chunk's p + n tokens
        if p and n and not b:
            from torch.nn.attention.bias import causal_lower_right
            self.mask = causal_lower_right(n, p + n)
            per_layer = 2 * m.nkv * (p + n) * m.hd
            slots = max(1, kv_pool.numel() // per_layer)
            for l in range(m.layers):
                off = (l % slots) * per_layer
                kc, vc = kv_pool[off:off + per_layer].view(2, 1, m.nkv, p + n, m.hd).unbind(0)
                self.prefix.append((kc, vc))
        # the KV cache write: this step's new K and V rows into slots of a layer's cache
        self.slot_pool = kv_pool[: max(1, t) * 2 * m.kv * 64].view(-1, 2 * m.kv)
        self.slots = torch.randperm(self.slot_pool.shape[0], device=dev)[:t]

    def forward(self):
        m, b, n = self.m, self.b, self.n
        x = self.x
        res = torch.zeros_like(x)
        add_norm, act = FUSED["add_rms_norm"], FUSED["silu_and_mul"]
        for l, layer in enumerate(m.L):
            res, y = add_norm(res, x, m.norm)
            qkv = F.linear(y, layer["qkv"])
            q, k, v = qkv.split([m.q, m.kv, m.kv], dim=-1)
            self.slot_pool.index_copy_(0, self.slots, qkv[:, m.q:])
            parts = []
            if b:
                kc, vc = self.caches[l]
                qd = q[:b].view(b, m.nq, 1, m.hd)
                parts.append(F.scaled_dot_product_attention(
                    qd, kc, vc, enable_gqa=m.nq != m.nkv).reshape(b, m.q))
            if n:
                qp = q[b:].view(n, m.nq, m.hd).transpose(0, 1).unsqueeze(0)
                kp = k[b:].view(n, m.nkv, m.hd).transpose(0, 1).unsqueeze(0)
                vp = v[b:].view(n, m.nkv, m.hd).transpose(0, 1).unsqueeze(0)
                if self.prefix:         # the chunk's rows written behind the prefix, then read whole
                    kc, vc = self.prefix[l]
                    kc[:, :, self.p:].copy_(kp)
                    vc[:, :, self.p:].copy_(vp)
                    o = F.scaled_dot_product_attention(qp, kc, vc, attn_mask=self.mask, enable_gqa=m.nq != m.nkv)
                else:
                    o = F.scaled_dot_product_attention(qp, kp, vp, is_causal=True, enable_gqa=m.nq != m.nkv)
                parts.append(o.squeeze(0).transpose(0, 1).reshape(n, m.q))
            att = parts[0] if len(parts) == 1 else torch.cat(parts)
            x = F.linear(att, layer["o"])
            res, y = add_norm(res, x, m.norm)
            if m.experts:
                x = self.moe(y, layer)
            else:
                x = F.linear(act(F.linear(y, layer["gate_up"])), layer["down"])
        y = add_norm(res, x, m.norm)[1][self.rows]
        logits = F.linear(y, m.lm_head)
        return torch.argmax(torch.softmax(logits.float(), dim=-1), dim=-1)

    def moe(self, y, layer):
        m = self.m
        if MOE_IMPL["name"] == "triton":
            return MOE_IMPL["fn"](y, layer["router"], layer["w13"], layer["w2"], m.top_k, FUSED["silu_and_mul"])
        t = y.shape[0]
        weights, ids = torch.topk(torch.softmax(F.linear(y, layer["router"]).float(), -1), m.top_k)
        flat = ids.flatten()
        order = torch.argsort(flat)
        # tokens per expert without a host sync (bincount would read the max on the host)
        counts = torch.zeros(m.experts, device=y.device, dtype=torch.int64).scatter_add_(
            0, flat, torch.ones_like(flat))
        offs = torch.cumsum(counts, 0).to(torch.int32)
        xs = y[order // m.top_k]
        h1 = torch._grouped_mm(xs, layer["w13"], offs=offs)
        h2 = torch._grouped_mm(FUSED["silu_and_mul"](h1), layer["w2"], offs=offs)
        h2 = h2 * weights.flatten()[order].unsqueeze(1).to(h2.dtype)
        out = torch.zeros_like(y)
        return out.index_add_(0, order // m.top_k, h2)


def points(dry: bool):
    div = 16 if dry else 1
    out = [(b, c // div, 0) for c in DECODE_C for b in DECODE_B]
    out += [(0, 0, n // div) for n in PREFILL_N]
    out += [(b, c // div, n // div) for b, c, n in MIXED]
    out += [(0, 0, n // div, p // div) for n, p in CONTEXT_PREFILL]
    return [pt if len(pt) == 4 else (*pt, 0) for pt in out]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].replace("\n", " "),
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--out", default="steps.jsonl", help="the table to write (JSON lines)")
    ap.add_argument("--budget", type=float, default=300.0,
                    help="seconds in all, shared among the models; a model's later shapes are cut")
    ap.add_argument("--kv-gib", type=float, default=48.0,
                    help="GiB of GPU memory for the KV caches, allocated first; leave room for the largest "
                         "model's weights (Mixtral-8x7B at TP2: 47 GB; 16 on a 48 GB card, 8 with --models of 7-8B)")
    ap.add_argument("--dry-run", action="store_true", help="the CPU at 1/16 of the sizes: checks the script only")
    ap.add_argument("--compile", action="store_true",
                    help="fuse the elementwise ops with torch.compile (as vLLM V1's compiled model)")
    ap.add_argument("--moe", default="torch", choices=("torch", "triton"),
                    help="a MoE layer's experts: torch._grouped_mm with the routing in plain ops, or "
                         "bench/gpu_moe.py's fused Triton kernels (tokens sorted by expert, as vLLM's)")
    ap.add_argument("--models", default=",".join(f"{c}:{tp}" for c, tp in MODELS),
                    help="comma-separated config:tp pairs: a bench/sim_to_real/model_configs/ folder's name, "
                         "or the path of a model's folder or config.json (its config is written into the table)")
    a = ap.parse_args(argv)
    dev = "cpu" if a.dry_run else "cuda"
    scale = 16 if a.dry_run else 1
    t0 = time.time()
    torch.manual_seed(0)
    t = Table(a.out)
    t.write(**env_row(dev))
    timer = Timer(dev, 2.0 / (50 if a.dry_run else 1))
    try:
        kv_pool = torch.empty(int(a.kv_gib * (1 << 30) / 2 / (scale ** 2)), device=dev, dtype=DTYPE)
    except torch.OutOfMemoryError:
        free = torch.cuda.mem_get_info()[0] / (1 << 30)
        print(f"error: --kv-gib {a.kv_gib:g} does not fit: {free:.1f} GiB of the GPU is free, and the "
              f"largest model's weights need room beside it", file=sys.stderr)
        return 2
    if a.dry_run:
        kv_pool.normal_()
    if a.moe == "triton":
        from gpu_moe import moe_triton
        MOE_IMPL.update(name="triton", fn=moe_triton)
    if a.compile:
        c0 = time.time()
        compile_fused(dev)
        print(f"compiled in {time.time() - c0:.1f} s", flush=True)
    models = [(s.rsplit(":", 1)[0], int(s.rsplit(":", 1)[1])) for s in a.models.split(",")]
    for k, (cfg, tp) in enumerate(models):
        share = (t0 + a.budget - time.time()) / (len(models) - k)
        end = time.time() + share
        start, n0 = time.time(), t.n
        try:
            m = Model(cfg, tp, dev, scale, 2 if a.dry_run else None)
        except Exception as e:
            t.write(kind="error", what=f"build {cfg}", error=repr(e)[:400])
            continue
        t.write(kind="model", model=m.name, tp=tp, config=m.config)   # the table carries its models
        cfg = m.name
        with torch.no_grad(), sdpa_context(dev):
            for b, c, n, pre in points(a.dry_run):
                if time.time() > end:
                    break
                try:
                    st = Step(m, b, c, n, kv_pool, pre)
                    us = timer(st.forward)
                except Exception as e:                  # one shape's failure keeps the rest
                    t.write(kind="error", what=f"{cfg} B={b} C={c} n={n} P={pre}", error=repr(e)[:400])
                    continue
                t.write(kind="step", model=cfg, tp=tp, layers=m.layers, B=b, C=c, n=n, P=pre, us=us,
                        fused="inductor" if a.compile else "eager", moe=MOE_IMPL["name"],
                        weight_bytes=m.weight_bytes())
                del st
        del m
        if dev == "cuda":
            torch.cuda.empty_cache()
        print(f"{cfg} tp{tp}: {t.n - n0} rows in {time.time() - start:.1f} s", flush=True)
    t.finish(dev, t0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
