"""A fused MoE layer for ``bench/gpu_step_table.py --moe triton``: tokens sorted by expert and
padded to the tile height, then one Triton kernel per expert GEMM in which every tile of rows
belongs to one expert (the structure of vLLM's fused MoE, written here from that description;
vLLM's tuned tile tables are not used).  Graph-capturable: the sort and padding are tensor ops
with no host synchronisation, sized by the token count alone.

    moe_triton(y, router_w, w13, w2, top_k) -> [T, hidden]

``w13``: [E, hidden, 2 x inter], ``w2``: [E, inter, hidden] (K-major, as ``torch._grouped_mm``
takes them).  ``TRITON_INTERPRET=1`` runs it on the CPU (float32), for its test only.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
import triton
import triton.language as tl


@triton.jit
def _moe_gemm(a_ptr, b_ptr, c_ptr, sorted_ids, expert_ids, num_rows, N, K,
              stride_am, stride_be, stride_bk, stride_cm,
              A_DIV: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    e = tl.load(expert_ids + pid_m)
    if e >= 0:
        offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        ids = tl.load(sorted_ids + offs_m)
        valid = ids < num_rows
        a_rows = ids // A_DIV
        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        offs_k = tl.arange(0, BLOCK_K)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k in range(0, K, BLOCK_K):
            kk = k + offs_k
            a = tl.load(a_ptr + a_rows[:, None] * stride_am + kk[None, :],
                        mask=valid[:, None] & (kk[None, :] < K), other=0.0)
            b = tl.load(b_ptr + e * stride_be + kk[:, None] * stride_bk + offs_n[None, :],
                        mask=(kk[:, None] < K) & (offs_n[None, :] < N), other=0.0)
            acc += tl.dot(a, b)
        tl.store(c_ptr + ids[:, None] * stride_cm + offs_n[None, :], acc.to(c_ptr.dtype.element_ty),
                 mask=valid[:, None] & (offs_n[None, :] < N))


def tiles(rows: int) -> tuple[int, int, int, int]:
    """(BLOCK_M, BLOCK_N, BLOCK_K, num_warps) for ``rows`` routed rows: short tiles for decode."""
    return (16, 64, 64, 4) if rows <= 256 else (64, 128, 64, 8)


def align(ids: torch.Tensor, experts: int, block_m: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``ids`` [T, top_k] expert ids -> (sorted_ids [EM], expert_ids [EM / block_m]): the routed
    rows (flat index t * top_k + j) grouped by expert, each group padded to ``block_m`` with the
    sentinel T x top_k; a tile past the last group has expert -1."""
    flat = ids.flatten()
    rows = flat.numel()
    order = torch.argsort(flat, stable=True)
    counts = torch.zeros(experts, device=ids.device, dtype=torch.int64).scatter_add_(0, flat, torch.ones_like(flat))
    padded = (counts + block_m - 1) // block_m * block_m
    pend = torch.cumsum(padded, 0)
    start = torch.cumsum(counts, 0) - counts
    sorted_e = flat[order]
    dest = (pend - padded)[sorted_e] + torch.arange(rows, device=ids.device) - start[sorted_e]
    em = (rows + experts * (block_m - 1) + block_m - 1) // block_m * block_m
    sorted_ids = torch.full((em,), rows, device=ids.device, dtype=torch.int64)
    sorted_ids[dest] = order
    block_start = torch.arange(em // block_m, device=ids.device) * block_m
    expert_ids = torch.searchsorted(pend, block_start, right=True)
    expert_ids = torch.where(expert_ids >= experts, -1, expert_ids)
    return sorted_ids, expert_ids


def moe_gemm(a, w, sorted_ids, expert_ids, rows: int, a_div: int, cfg) -> torch.Tensor:
    """C [rows, N] with C[r] = a[r // a_div] @ w[expert of r], rows from ``sorted_ids``."""
    bm, bn, bk, warps = cfg
    e, k, n = w.shape
    c = torch.empty(rows, n, device=a.device, dtype=a.dtype)
    grid = (expert_ids.numel(), triton.cdiv(n, bn))
    _moe_gemm[grid](a, w, c, sorted_ids, expert_ids, rows, n, k, a.stride(0), w.stride(0), w.stride(1), c.stride(0),
                    A_DIV=a_div, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, num_warps=warps)
    return c


def moe_triton(y, router_w, w13, w2, top_k: int, act=None) -> torch.Tensor:
    """The routed experts' output for ``y`` [T, hidden] (softmax top-k routing, weights applied)."""
    t = y.shape[0]
    weights, ids = torch.topk(torch.softmax(F.linear(y, router_w).float(), -1), top_k)
    cfg = tiles(t * top_k)
    sorted_ids, expert_ids = align(ids, w13.shape[0], cfg[0])
    rows = t * top_k
    h1 = moe_gemm(y, w13, sorted_ids, expert_ids, rows, top_k, cfg)
    i = h1.shape[1] // 2
    h = act(h1) if act is not None else F.silu(h1[:, :i]) * h1[:, i:]
    h2 = moe_gemm(h, w2, sorted_ids, expert_ids, rows, 1, cfg)
    return (h2.view(t, top_k, -1) * weights.unsqueeze(-1).to(h2.dtype)).sum(1)


def reference(y, router_w, w13, w2, top_k: int) -> torch.Tensor:
    """The same layer, one expert at a time in plain torch (the check of :func:`moe_triton`)."""
    weights, ids = torch.topk(torch.softmax(F.linear(y, router_w).float(), -1), top_k)
    out = torch.zeros_like(y)
    i = w13.shape[2] // 2
    for t in range(y.shape[0]):
        for j in range(top_k):
            e = int(ids[t, j])
            h1 = y[t] @ w13[e]
            out[t] += (F.silu(h1[:i]) * h1[i:]) @ w2[e] * weights[t, j].to(y.dtype)
    return out


if __name__ == "__main__":                  # TRITON_INTERPRET=1 python bench/gpu_moe.py
    torch.manual_seed(0)
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    dt = torch.bfloat16 if dev == "cuda" else torch.float32
    for t in (1, 3, 40, 300):
        e, h, i, k = 8, 64, 96, 2
        y = torch.randn(t, h, device=dev, dtype=dt)
        r = torch.randn(e, h, device=dev, dtype=dt)
        w13 = torch.randn(e, h, 2 * i, device=dev, dtype=dt) * 0.1
        w2 = torch.randn(e, i, h, device=dev, dtype=dt) * 0.1
        got, want = moe_triton(y, r, w13, w2, k), reference(y, r, w13, w2, k)
        err = (got - want).abs().max().item() / max(want.abs().max().item(), 1e-6)
        print(f"T={t}: max relative error {err:.2e}")
        assert err < (2e-2 if dt == torch.bfloat16 else 1e-4), err
    print("ok")
