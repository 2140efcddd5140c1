"""vLLM's ``--enable-mfu-metrics`` step estimate (:mod:`generation.engine.perf.mfu`): per-GPU FLOPs,
bytes read and bytes written of one step, derived by hand from ``vllm/v1/metrics/perf.py``'s
formulas (AttentionMetrics, FfnMetrics, UnembedMetrics; A = activation bytes, W = weight bytes,
K = KV-cache bytes, all 2 unless said), and checked against vLLM's own code where the sdist is at
hand."""
from __future__ import annotations

import os

import pytest

from generation.engine.perf.mfu import StepPerf
from support import vllm_perf

# tiny config.json dicts
DENSE = {"num_hidden_layers": 2, "hidden_size": 8, "num_attention_heads": 2, "intermediate_size": 16,
         "vocab_size": 10}
GQA = {"num_hidden_layers": 1, "hidden_size": 16, "num_attention_heads": 4, "num_key_value_heads": 2,
       "head_dim": 8, "intermediate_size": 32, "vocab_size": 20}
MOE = {"num_hidden_layers": 1, "hidden_size": 8, "num_attention_heads": 2, "num_key_value_heads": 1,
       "intermediate_size": 16, "vocab_size": 10, "num_local_experts": 4, "num_experts_per_tok": 2}


def step(perf: StepPerf, requests) -> tuple[int, int, int]:
    """:meth:`StepPerf.figures` of ``[(new tokens, context, is prefill)]`` (vLLM's ExecutionContext)."""
    pre = [r for r in requests if r[2]]
    dec = [r for r in requests if not r[2]]
    return perf.figures(len(pre), sum(n for n, _, _ in pre), sum(c for _, c, _ in pre),
                        sum(n * c for n, c, _ in pre), len(dec), sum(c for _, c, _ in dec))


def test_dense_mha_prefill_and_decode():
    """L=2, D=8, 2 heads of d=4 (kv=2), DI=16, V=10; a 3-token prefill at context 3 and a decode at
    context 5: T=4, sum T*C = 9 + 5 = 14, logits N = 1 + 1 = 2.

    FLOPs: qkv 2*T*D*(q+2kv)*d*L = 3072, out 2*T*D*q*d*L = 1024, QK and AV 2*q*TC*d*L = 448 each;
    MLP 2*D*3*DI*T*L = 6144; unembed 2*N*D*V = 320: 11,456.
    Read: qkv input T*D*A*L = 128, weights D*6*d*W*L = 768, attention input (prefill
    (3q + 2*3kv)*d*A*L = 288, decode 1*q*d*A*L + 2*5*kv*d*K*L = 352), out input 128, weights 256;
    MLP input 128, up/gate weights 2*D*DI*W*L = 1024, SiLU input 2*T*DI*A*L = 512, down input 256,
    weights 512; unembed N*D*A + D*V*W = 32 + 160: 4,544.
    Write: qkv 384, KV cache 2*T*kv*d*K*L = 256, out 128; MLP 512 + 256 + 128; logits N*V*A = 40: 1,704."""
    perf = StepPerf(DENSE)
    assert perf.components == ["attn", "ffn", "unembed"]
    assert step(perf, [(3, 3, True), (1, 5, False)]) == (11456, 4544, 1704)


def test_gqa_under_tensor_parallelism_with_an_fp8_kv_cache():
    """L=1, D=16, 4 query heads and 2 KV heads of d=8 (head_dim given, not D/heads), DI=32, V=20,
    TP 2 (per GPU: q=2, kv=1, DI=16, V=10), --kv-cache-dtype fp8 (K=1); two decodes at contexts
    10 and 30: T=2, sum C = sum T*C = 40, N=2.

    FLOPs: qkv 2*2*16*4*8 = 2048, out 1024, QK and AV 2*2*40*8 = 1280 each; MLP 2*16*3*16*2 = 3072;
    unembed 2*2*16*10 = 640: 9,344.
    Read: attention 64 + 1024 + (2*2*8*2 + 2*40*1*8*1 = 704) + 64 + 512 = 2,368; MLP 64 + 1024 + 128 +
    64 + 512 = 1,792; unembed 64 + 320: 4,544.
    Write: qkv 128, KV cache 2*2*1*8*1 = 32, out 64; MLP 128 + 64 + 64; logits 40: 520."""
    assert step(StepPerf(GQA, tp=2, kv_cache_dtype="fp8"), [(1, 10, False), (1, 30, False)]) == (9344, 4544, 520)


def test_mixtral_like_moe_reads_the_weights_of_the_experts_used():
    """L=1 MoE layer, D=8, 2 heads and 1 KV head of d=4, 4 experts of intermediate 16, top-2, V=10;
    a 3-token prefill at context 3: T=3, sum T*C = 9, N=1; routed tokens T*2 = 6, experts read
    min(6, 4) = 4.

    FLOPs: qkv 2*3*8*4*4 = 768, out 384, QK and AV 144 each; experts 2*D*3*MI*6 = 4608; unembed
    160: 6,208.
    Read: attention 48 + 256 + (3*2 + 2*3*1)*4*2 + 48 + 128 = 576; experts: input 6*8*2 = 96,
    up/gate weights 2*8*16*4*2 = 2048, SiLU input 384, down input 192, down weights 1024; unembed
    16 + 160: 4,496.
    Write: attention 96 + 48 + 48; experts 384 + 192 + 96; logits 20: 884."""
    perf = StepPerf(MOE)
    assert step(perf, [(3, 3, True)]) == (6208, 4496, 884)


def test_unknown_quantization_keeps_only_the_unembedding():
    """vLLM's parsers raise InvalidComponent for a method they do not size: attention and MLPs
    drop out; 0.17 knew only fp8 / fbgemm_fp8 / mxfp4, 0.19 on also AWQ and GPTQ (0.5 bytes)."""
    assert StepPerf(GQA, quantization="awq", version=(0, 17, 0)).components == ["unembed"]
    awq = StepPerf(GQA, quantization="awq")
    assert awq.components == ["attn", "ffn", "unembed"]
    # 4-bit weights: the attention and MLP weight reads are half fp8's (the lm_head's, D*V*2 = 640
    # bytes, stay unquantized, as vLLM's UnembedMetrics has no quantization parser); FLOPs unchanged
    fp8 = StepPerf(GQA, quantization="fp8")
    assert fp8.r0 - 640 == 2 * (awq.r0 - 640) > 0
    assert step(awq, [(1, 5, False)])[0] == step(fp8, [(1, 5, False)])[0]


CASES = [
    ("dense", DENSE, {}, {}),
    ("gqa tp2 fp8 kv", GQA, dict(tp=2, kv_cache_dtype="fp8"), dict(tp=2, cache="fp8")),
    ("gqa awq", GQA, dict(quantization="awq"), dict(quant="awq")),
    ("moe", MOE, {}, {}),
    ("moe dp2 tp2", MOE, dict(tp=2, dp=2), dict(tp=2, dp=2)),
    ("moe ep dp4", MOE, dict(dp=4, enable_ep=True), dict(dp=4, ep=True)),
    ("deepseek mla", {"model_type": "deepseek_v3", "num_hidden_layers": 4, "hidden_size": 256,
                      "num_attention_heads": 8, "num_key_value_heads": 8, "intermediate_size": 512,
                      "moe_intermediate_size": 64, "vocab_size": 800, "n_routed_experts": 16,
                      "num_experts_per_tok": 4, "n_shared_experts": 1, "first_k_dense_replace": 1,
                      "moe_layer_freq": 1, "kv_lora_rank": 64, "qk_rope_head_dim": 16, "qk_nope_head_dim": 32,
                      "v_head_dim": 32, "q_lora_rank": 96}, dict(tp=4, quantization="fp8"),
     dict(tp=4, quant="fp8", mla=True)),
    ("sliding window", {"model_type": "mistral", "num_hidden_layers": 4, "hidden_size": 256,
                        "num_attention_heads": 8, "num_key_value_heads": 2, "intermediate_size": 512,
                        "vocab_size": 1000, "sliding_window": 100}, {}, {}),
]


@pytest.mark.skipif(not os.path.isfile(vllm_perf.perf_py()), reason="no vLLM sdist at VLLM_SRC")
@pytest.mark.parametrize("name, cfg, ours, theirs", CASES, ids=[c[0] for c in CASES])
def test_same_integers_as_vllm_perf_py(name, cfg, ours, theirs):
    """vLLM 0.34's ModelMetrics (its own perf.py) on the same config and batch."""
    requests = [(100, 100, True), (30, 80, True), (1, 57, False), (1, 300, False), (1, 9, False)]
    perf = StepPerf(cfg, **ours)
    w = perf.window or 1 << 60
    windowed = (sum(n * min(c, w) for n, c, _ in requests), sum(min(c, w) for _, c, p in requests if p),
                sum(min(c, w) for _, c, p in requests if not p))
    pre = [r for r in requests if r[2]]
    dec = [r for r in requests if not r[2]]
    mine = perf.figures(len(pre), sum(n for n, _, _ in pre), sum(c for _, c, _ in pre),
                        sum(n * c for n, c, _ in pre), len(dec), sum(c for _, c, _ in dec), windowed)
    theirs_figures, components = vllm_perf.figures(vllm_perf.load(), vllm_perf.vllm_config(cfg, **theirs), requests)
    assert (mine, sorted(perf.components)) == (theirs_figures, components)
