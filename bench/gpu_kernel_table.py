"""Time the step model's pieces on a real GPU: a table of single kernels' times, which
``python -m generation.engine.perf.fit_kernels --kernels`` prints against the datasheet.

Run on the GPU to be profiled (it needs torch with CUDA; nothing of the project is imported, so
that it runs under any Python with torch)::

    python bench/gpu_kernel_table.py --out kernels.jsonl [--budget 420]

It writes one JSON object per line, flushed as it goes (a run cut short keeps what it timed):

* ``kind: "env"``: the GPU, torch and CUDA versions, clocks;
* ``kind: "peak"``: a device-to-device copy (bytes/s, read + write) and an 8192^3 BF16 GEMM
  (FLOP/s): what the card reaches, beside its datasheet;
* ``kind: "gemm"``: ``y = x W^T`` (``F.linear``, as vLLM's unquantized linear layers) for every
  linear layer shape of the sim-to-real models at their tensor-parallel sizes (``K`` in, ``N``
  out, per GPU), at ``M`` token rows from 1 to 8,192; ``us`` per GEMM;
* ``kind: "attn_decode"``: ``scaled_dot_product_attention`` of ``B`` one-token queries over
  ``C`` cached tokens each (GQA heads as the model's, per GPU), per backend;
* ``kind: "attn_prefill"``: causal attention of ``B`` sequences of ``n`` tokens;
* ``kind: "moe"``: a routed expert layer's two grouped GEMMs (``torch._grouped_mm``) for ``M``
  tokens, top-k routed uniformly at random (fixed seed);
* ``kind: "gemm_fp8"``: FP8 GEMMs (``torch._scaled_mm``) of a Llama-3.1-8B layer's shapes;
* ``kind: "elementwise"``: a layer's small kernels (residual add + RMSNorm, SiLU-and-mul, the
  KV cache write) at ``M`` tokens;
* ``kind: "sample"``: softmax and argmax over ``S`` rows of a ``V`` vocabulary (float32).

Each time is the median of 3 samples of a CUDA graph replayed enough times for 2 ms of GPU
time, read with CUDA events.  A graph holds as many copies of the operands as make its working
set >= 4x the L2 cache, so weights and KV come from HBM as in a real step.  Times in
microseconds.  ``--dry-run`` runs the same code on the CPU at 1/16 of the sizes (a check of
the script, not a measurement).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
CONFIGS = os.path.join(HERE, "sim_to_real", "model_configs")
# (config directory, tensor-parallel size): every pair of the sim-to-real data, dense and MoE
MODELS = [("llama-2-7b-hf", 1), ("llama-3.1-8b-instruct", 1), ("qwen2.5-7b-instruct", 1),
          ("qwen3-14b", 1), ("mistral-nemo-instruct-2407", 1), ("mistral-nemo-instruct-2407", 2),
          ("codellama-34b-instruct-hf", 2), ("yi-34b", 2), ("llama-2-70b-hf", 4),
          ("llama-3.1-70b-instruct", 4), ("mixtral-8x7b-v0.1", 2), ("mixtral-8x22b", 8)]
GEMM_M = [1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 160, 192, 256, 320, 384, 512, 768, 1024,
          1536, 2048, 3072, 4096, 6144, 8192]
HEAD_M = [1, 8, 32, 64, 128, 256, 512]
DECODE_B = [1, 4, 16, 32, 64, 128, 256]
DECODE_C = [128, 512, 1024, 2048, 4096, 8192]
PREFILL_N = [128, 256, 512, 1024, 2048, 4096, 8192]
MOE_M = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192]
SMALL_M = [1, 8, 32, 128, 256, 512, 1024, 2048, 4096, 8192]
SAMPLE_S = [1, 8, 32, 128, 256]
SAMPLE_V = [32000, 128256, 152064]
DTYPE = torch.bfloat16


def load_config(cfg: str) -> tuple[str, dict]:
    """(name, config.json dict) of ``cfg``: a folder of ``sim_to_real/model_configs`` by name, or
    a path to a model's folder or its config.json (the name: the folder's)."""
    path = cfg if os.path.exists(cfg) else os.path.join(CONFIGS, cfg)
    if os.path.isdir(path):
        path = os.path.join(path, "config.json")
    with open(path) as f:
        return os.path.basename(os.path.dirname(os.path.abspath(path))), json.load(f)


def arch(cfg: str) -> dict:
    """The fields of a config.json that the shapes need (hidden, heads, KV heads, head_dim,
    intermediate, vocab, experts); ``cfg`` as :func:`load_config` takes it."""
    d = load_config(cfg)[1]
    d = d.get("text_config", d)
    heads = d["num_attention_heads"]
    return {"hidden": d["hidden_size"], "heads": heads,
            "kv_heads": d.get("num_key_value_heads") or heads,
            "head_dim": d.get("head_dim") or d["hidden_size"] // heads,
            "inter": d.get("intermediate_size"), "vocab": d["vocab_size"],
            "experts": d.get("num_local_experts") or d.get("num_experts") or 0,
            "top_k": d.get("num_experts_per_tok") or 0,
            "moe_inter": d.get("moe_intermediate_size") or d.get("intermediate_size")}


class Timer:
    """Times ``fn`` (a closure over preallocated operands) on the device: median of 3 samples,
    microseconds per call of ``fn``."""

    def __init__(self, device: str, min_ms: float = 2.0):
        self.device, self.min_ms = device, min_ms

    def __call__(self, fn) -> float:
        if self.device == "cpu":
            fn()
            t = time.perf_counter(); fn(); one = time.perf_counter() - t
            reps = max(1, min(50, int(self.min_ms / 1e3 / max(one, 1e-9))))
            samples = []
            for _ in range(3):
                t = time.perf_counter()
                for _ in range(reps):
                    fn()
                samples.append((time.perf_counter() - t) / reps)
            return statistics.median(samples) * 1e6
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(2):
                fn()
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            fn()
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        g.replay()
        e0.record(); g.replay(); e1.record(); e1.synchronize()
        one = e0.elapsed_time(e1)
        reps = max(1, min(500, math.ceil(self.min_ms / max(one, 1e-4))))
        samples = []
        for _ in range(3):
            e0.record()
            for _ in range(reps):
                g.replay()
            e1.record(); e1.synchronize()
            samples.append(e0.elapsed_time(e1) / reps)
        del g
        return statistics.median(samples) * 1e3


class Table:
    def __init__(self, path: str):
        self.f = open(path, "w")
        self.n = 0

    def write(self, **row) -> None:
        self.f.write(json.dumps(row) + "\n")
        self.f.flush()
        self.n += 1

    def finish(self, dev: str, t0: float) -> None:
        """The closing row (the clocks after the run) and the summary line."""
        if dev == "cuda":
            self.write(kind="env_end", clocks=env_row(dev).get("clocks"), seconds=time.time() - t0)
        print(f"{self.n} rows in {time.time() - t0:.1f} s -> {self.f.name}")


def copies_for(nbytes: int, l2: int, cap: int = 64) -> int:
    """Operand copies that make a graph's working set >= 4 x the L2 cache."""
    return max(1, min(cap, math.ceil(4 * l2 / max(nbytes, 1))))


def rnd(*shape, device, dtype=DTYPE):
    return torch.randn(*shape, device=device, dtype=dtype)


def section_peak(t: Table, timer: Timer, dev: str, scale: int) -> None:
    n = (1 << 30) // scale                       # 1 GiB of bf16 elements / 2 = 2 GiB buffers
    a, b = torch.empty(n, device=dev, dtype=DTYPE), torch.empty(n, device=dev, dtype=DTYPE)
    us = timer(lambda: b.copy_(a))
    t.write(kind="peak", what="copy", bytes=4 * n, us=us, bytes_per_s=4 * n / us * 1e6)
    del a, b
    m = 8192 // scale
    x, w = rnd(m, m, device=dev), rnd(m, m, device=dev)
    us = timer(lambda: torch.mm(x, w))
    t.write(kind="peak", what="gemm_bf16", m=m, us=us, flops_per_s=2 * m ** 3 / us * 1e6)


def gemm_shapes(scale: int) -> dict:
    """(K, N) -> the (model, tp, layer) names that run it, per GPU."""
    shapes: dict = {}
    for cfg, tp in MODELS:
        a = arch(cfg)
        h, hd = a["hidden"], a["head_dim"]
        q, kv = a["heads"] * hd // tp, a["kv_heads"] * hd // tp
        layers = [("qkv", h, q + 2 * kv), ("o", q, h), ("lm_head", h, a["vocab"] // tp)]
        if not a["experts"]:
            i = a["inter"] // tp
            layers += [("gate_up", h, 2 * i), ("down", i, h)]
        for name, k, n in layers:
            key = (max(16, k // scale), max(16, n // scale))
            shapes.setdefault(key, []).append(f"{cfg}/tp{tp}/{name}")
    return shapes


def section_gemm(t: Table, timer: Timer, dev: str, scale: int, l2: int, deadline: float) -> None:
    for (k, n), users in gemm_shapes(scale).items():
        head = all(u.endswith("lm_head") for u in users)
        c = copies_for(k * n * 2, l2)
        ws = [rnd(n, k, device=dev) for _ in range(c)]
        for m in (HEAD_M if head else GEMM_M):
            if time.time() > deadline:
                return
            x = rnd(m, k, device=dev)
            us = timer(lambda: [F.linear(x, w) for w in ws]) / c
            t.write(kind="gemm", K=k, N=n, M=m, us=us, copies=c, users=users)
        del ws


def attn_configs(scale: int) -> dict:
    """(heads, kv_heads, head_dim) per GPU -> users."""
    out: dict = {}
    for cfg, tp in MODELS:
        a = arch(cfg)
        key = (max(1, a["heads"] // tp), max(1, a["kv_heads"] // tp), a["head_dim"])
        out.setdefault(key, []).append(f"{cfg}/tp{tp}")
    return out


BACKENDS = ["FLASH_ATTENTION", "CUDNN_ATTENTION", "EFFICIENT_ATTENTION"]


def sdpa_backends(dev: str):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    if dev == "cpu":
        return [("MATH", sdpa_kernel(SDPBackend.MATH))]
    return [(b, sdpa_kernel(getattr(SDPBackend, b))) for b in BACKENDS]


def section_attn_decode(t: Table, timer: Timer, dev: str, scale: int, l2: int, deadline: float) -> None:
    from torch.nn.attention import SDPBackend, sdpa_kernel
    failed = set()
    for (nh, nkv, hd), users in attn_configs(scale).items():
        for b in DECODE_B:
            for ctx in DECODE_C:
                ctx //= scale
                if b * ctx * nkv * hd * 4 > (8 << 30) // scale or time.time() > deadline:
                    continue
                c = copies_for(b * ctx * nkv * hd * 4, l2, cap=32)
                q = rnd(b, nh, 1, hd, device=dev)
                kvs = [(rnd(b, nkv, ctx, hd, device=dev), rnd(b, nkv, ctx, hd, device=dev))
                       for _ in range(c)]
                for name in (["MATH"] if dev == "cpu" else BACKENDS):
                    if name in failed:
                        continue
                    try:
                        with sdpa_kernel(getattr(SDPBackend, name)):
                            us = timer(lambda: [F.scaled_dot_product_attention(
                                q, k, v, enable_gqa=nh != nkv) for k, v in kvs]) / c
                    except Exception as e:          # a backend that refuses the shape or GQA
                        failed.add(name)
                        t.write(kind="error", what=f"attn_decode {name}", error=str(e)[:300])
                        continue
                    t.write(kind="attn_decode", backend=name, heads=nh, kv_heads=nkv, head_dim=hd,
                            B=b, C=ctx, us=us, copies=c, users=users)
                del kvs, q


def section_attn_prefill(t: Table, timer: Timer, dev: str, scale: int, deadline: float) -> None:
    from torch.nn.attention import SDPBackend, sdpa_kernel
    failed = set()
    for (nh, nkv, hd), users in attn_configs(scale).items():
        for n in PREFILL_N:
            n //= scale
            if time.time() > deadline:
                return
            b = max(1, (8192 // scale) // n)
            q = rnd(b, nh, n, hd, device=dev)
            k, v = rnd(b, nkv, n, hd, device=dev), rnd(b, nkv, n, hd, device=dev)
            for name in (["MATH"] if dev == "cpu" else BACKENDS):
                if name in failed:
                    continue
                try:
                    with sdpa_kernel(getattr(SDPBackend, name)):
                        us = timer(lambda: F.scaled_dot_product_attention(
                            q, k, v, is_causal=True, enable_gqa=nh != nkv))
                except Exception as e:
                    failed.add(name)
                    t.write(kind="error", what=f"attn_prefill {name}", error=str(e)[:300])
                    continue
                t.write(kind="attn_prefill", backend=name, heads=nh, kv_heads=nkv, head_dim=hd,
                        B=b, n=n, us=us, users=users)


def section_moe(t: Table, timer: Timer, dev: str, scale: int, l2: int, deadline: float) -> None:
    gen = torch.Generator(device="cpu").manual_seed(0)
    for cfg, tp in MODELS:
        a = arch(cfg)
        if not a["experts"]:
            continue
        e, top, h = a["experts"], a["top_k"], a["hidden"] // scale
        i = a["moe_inter"] // tp // scale
        w13 = rnd(e, h, 2 * i, device=dev)
        w2 = rnd(e, i, h, device=dev)
        for m in MOE_M:
            if time.time() > deadline:
                return
            # each token's top-k distinct experts, uniformly at random
            choice = torch.stack([torch.randperm(e, generator=gen)[:top] for _ in range(m)])
            counts = torch.bincount(choice.flatten(), minlength=e)
            offs = torch.cumsum(counts, 0).to(torch.int32).to(dev)
            rows = int(counts.sum())
            x = rnd(rows, h, device=dev)
            y = rnd(rows, i, device=dev)
            experts_hit = int((counts > 0).sum())
            try:
                us = timer(lambda: (torch._grouped_mm(x, w13, offs=offs), torch._grouped_mm(y, w2, offs=offs)))
                how = "grouped_mm"
            except Exception as err:
                t.write(kind="error", what="moe grouped_mm", error=str(err)[:300])
                bounds = [0] + torch.cumsum(counts, 0).tolist()
                us = timer(lambda: [(x[bounds[j]:bounds[j + 1]] @ w13[j], y[bounds[j]:bounds[j + 1]] @ w2[j])
                                    for j in range(e) if bounds[j + 1] > bounds[j]])
                how = "per_expert_mm"
            t.write(kind="moe", model=cfg, tp=tp, experts=e, top_k=top, hidden=h, inter=i, M=m,
                    rows=rows, experts_hit=experts_hit, us=us, how=how)
        del w13, w2


def section_fp8(t: Table, timer: Timer, dev: str, scale: int, l2: int, deadline: float) -> None:
    """FP8 (e4m3) GEMMs with per-tensor scales (``torch._scaled_mm``) and the per-token dynamic
    quantization of the activations before each, for a Llama-3.1-8B layer's shapes."""
    a = arch("llama-3.1-8b-instruct")
    h, i = a["hidden"] // scale, a["inter"] // scale
    kvw = a["kv_heads"] * a["head_dim"] // scale
    one = torch.ones((), device=dev, dtype=torch.float32)
    for name, k, n in (("qkv", h, h + 2 * kvw), ("gate_up", h, 2 * i), ("down", i, h)):
        c = copies_for(k * n, l2)
        ws = [rnd(n, k, device=dev).to(torch.float8_e4m3fn) for _ in range(c)]
        for m in [16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192]:
            if time.time() > deadline:
                return
            x = rnd(m, k, device=dev).to(torch.float8_e4m3fn)
            us = timer(lambda: [torch._scaled_mm(x, w.t(), one, one, out_dtype=DTYPE) for w in ws]) / c
            t.write(kind="gemm_fp8", layer=name, K=k, N=n, M=m, us=us, copies=c)
        del ws
    for m in SMALL_M:
        if time.time() > deadline:
            return
        x = rnd(m, h, device=dev)

        def quant():
            s = x.abs().amax(dim=-1, keepdim=True).float() / 448.0
            return (x / s).to(torch.float8_e4m3fn), s
        t.write(kind="elementwise", what="fp8_dynamic_quant", M=m, hidden=h, us=timer(quant))


def section_elementwise(t: Table, timer: Timer, dev: str, scale: int, deadline: float) -> None:
    h, i, kvw = 4096 // scale, 14336 // scale, 1024 // scale     # a Llama-3-8B layer
    slots = 65536
    cache = torch.zeros(slots, 2 * kvw, device=dev, dtype=DTYPE)
    wn = torch.ones(h, device=dev, dtype=DTYPE)
    for m in SMALL_M:
        if time.time() > deadline:
            return
        x, r = rnd(m, h, device=dev), rnd(m, h, device=dev)
        gu = rnd(m, 2 * i, device=dev)
        kv = rnd(m, 2 * kvw, device=dev)
        idx = torch.randperm(slots, device=dev)[:m]
        rows = {"add_rms_norm": lambda: F.rms_norm(x + r, (h,), wn, 1e-5),
                "silu_and_mul": lambda: F.silu(gu[:, :i]) * gu[:, i:],
                "kv_cache_write": lambda: cache.index_copy_(0, idx, kv)}
        for what, fn in rows.items():
            t.write(kind="elementwise", what=what, M=m, hidden=h, us=timer(fn))


def section_sample(t: Table, timer: Timer, dev: str, scale: int, deadline: float) -> None:
    for v in SAMPLE_V:
        v //= scale
        for s in SAMPLE_S:
            if time.time() > deadline:
                return
            logits = rnd(s, v, device=dev)
            t.write(kind="sample", V=v, S=s, us=timer(
                lambda: torch.argmax(torch.softmax(logits.float() / 0.7, dim=-1), dim=-1)))


def env_row(dev: str) -> dict:
    """The table's first row: versions, and the GPU with its clocks (``dry_run`` on the CPU)."""
    row = {"kind": "env", "torch": torch.__version__, "python": sys.version.split()[0]}
    if dev == "cpu":
        row["dry_run"] = True
    if dev == "cuda":
        p = torch.cuda.get_device_properties(0)
        row.update(gpu=p.name, sms=p.multi_processor_count, memory=p.total_memory,
                   l2=getattr(p, "L2_cache_size", 0), cuda=torch.version.cuda,
                   cudnn=torch.backends.cudnn.version())
        try:
            row["clocks"] = subprocess.run(
                ["nvidia-smi", "--query-gpu=clocks.sm,clocks.max.sm,clocks.mem,power.draw,temperature.gpu",
                 "--format=csv,noheader"], capture_output=True, text=True, timeout=10).stdout.strip()
        except Exception as e:                       # no nvidia-smi: the table stands without it
            row["clocks"] = str(e)
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].replace("\n", " "),
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--out", default="kernels.jsonl", help="the table to write (JSON lines)")
    ap.add_argument("--budget", type=float, default=420.0, help="seconds in all; later sections are cut")
    ap.add_argument("--dry-run", action="store_true", help="on the CPU, 1/16 of the sizes")
    ap.add_argument("--sections", default="peak,gemm,attn_decode,attn_prefill,moe,fp8,elementwise,sample",
                    help="comma-separated sections to time, in this order")
    a = ap.parse_args(argv)
    dev = "cpu" if a.dry_run else "cuda"
    scale = 16 if a.dry_run else 1
    t0 = time.time()
    deadline = t0 + a.budget
    torch.manual_seed(0)
    t = Table(a.out)
    env = env_row(dev)
    t.write(**env)
    l2 = env.get("l2") or (50 << 20)
    l2 //= scale
    timer = Timer(dev, 2.0 / (50 if a.dry_run else 1))
    # budget shares: what is left when a section starts, by its worth to the fit
    plan = {"peak": 0.02, "gemm": 0.4, "attn_decode": 0.2, "attn_prefill": 0.08, "moe": 0.1,
            "fp8": 0.05, "elementwise": 0.05, "sample": 0.03}
    for name in a.sections.split(","):
        start = time.time()
        end = min(deadline, start + plan[name] * a.budget * 1.5)
        n0 = t.n
        sections = {
            "peak": lambda: section_peak(t, timer, dev, scale),
            "gemm": lambda: section_gemm(t, timer, dev, scale, l2, end),
            "attn_decode": lambda: section_attn_decode(t, timer, dev, scale, l2, end),
            "attn_prefill": lambda: section_attn_prefill(t, timer, dev, scale, end),
            "moe": lambda: section_moe(t, timer, dev, scale, l2, end),
            "fp8": lambda: section_fp8(t, timer, dev, scale, l2, end),
            "elementwise": lambda: section_elementwise(t, timer, dev, scale, end),
            "sample": lambda: section_sample(t, timer, dev, scale, end)}
        try:
            sections[name]()
        except Exception as e:                        # one section's failure keeps the others
            t.write(kind="error", what=name, error=repr(e)[:500])
        if dev == "cuda":
            torch.cuda.empty_cache()
        print(f"{name}: {t.n - n0} rows in {time.time() - start:.1f} s", flush=True)
    t.finish(dev, t0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
