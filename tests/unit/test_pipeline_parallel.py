"""``--pipeline-parallel-size`` (``-pp``) in step mode (generation/engine/perf/pipeline.py): a
GPU holds the fullest stage's layers and KV cache; a step is a rotation of ``P`` micro-batches
(vLLM 0.34's batches in flight, each with the full token budget), priced as the whole model over
each micro-batch, summed and shared by the ``P`` stages, at least one micro-batch's crossing
when the pipeline is not full, plus the hops between stages."""
from __future__ import annotations

import pytest

from generation.config.values import ConfigError
from generation.engine.perf.model_arch import preset
from generation.engine.perf.pipeline import rotation_time, stage_arch
from generation.engine.replay import scheduler_for
from generation.engine.step_config import load_step_config, resolve_step_settings

L70 = "meta-llama/Llama-3.1-70B-Instruct"


def settings(model, *extra):
    return resolve_step_settings(load_step_config(["--model", model, "--max-model-len", "8192", *extra]))


def test_a_gpu_holds_the_fullest_stage():
    arch = preset(L70)
    stage = stage_arch(arch, 3)
    assert (stage.num_layers, stage.tie_word_embeddings) == (27, True)       # ceil(80 / 3), one vocabulary matrix
    with pytest.raises(ConfigError, match="more than the model's 80 layers"):
        stage_arch(arch, 81)
    # DeepSeek's 3 leading dense layers go to the first stage: the fullest holds MoE layers only
    r1 = preset("deepseek-ai/DeepSeek-R1")
    assert (stage_arch(r1, 2).num_layers, stage_arch(r1, 2).dense_layers) == (31, 0)
    assert stage_arch(r1, 1).dense_layers == 3
    # Llama-3.1-405B fits 16 H100s as 2 stages of TP 8, not 8 alone
    with pytest.raises(ConfigError, match="does not fit on H100"):
        settings("meta-llama/Llama-3.1-405B-Instruct", "--gpu", "H100", "-tp", "8")
    pp2 = settings("meta-llama/Llama-3.1-405B-Instruct", "--gpu", "H100", "-tp", "8", "-pp", "2")
    assert pp2.num_gpu_blocks == 15460
    assert pp2.summary(8192)[3].endswith("; 2 pipeline stages of 63 layers")
    # the same 4 GPUs as TP 4 or TP 2 x PP 2: about the same cache
    tp4, tp2pp2 = settings(L70, "--gpu", "H100", "-tp", "4"), settings(L70, "--gpu", "H100", "-tp", "2", "-pp", "2")
    assert (tp4.num_gpu_blocks, tp2pp2.num_gpu_blocks) == (9043, 8871)
    # a rotation's token budget: each micro-batch has --max-num-batched-tokens
    assert scheduler_for(tp2pp2, 8192).max_num_batched_tokens == 2 * scheduler_for(tp4, 8192).max_num_batched_tokens


def test_a_rotation_shares_its_micro_batches_over_the_stages():
    tp2 = settings(L70, "--gpu", "H100", "-tp", "2").step_time
    pp = settings(L70, "--gpu", "H100", "-tp", "2", "-pp", "2").step_time
    whole = tp2.step_time
    c = pp.constants
    hop0 = c.t_ar
    hop = 2 * 8192 * 2 / 2 / pp.gpu.nvlink_bandwidth / c.eta_ar
    # 64 decodes in two micro-batches of 32, the pipeline full: the two share the stages
    assert pp.step_time(64, 64 * 4000, 0, 0, 0.0, 0) == pytest.approx(whole(32, 32 * 4000, 0, 0, 0.0, 0) + hop0 + hop * 32)
    # a lone decode or a lone prompt crosses every stage: the whole model's step
    assert pp.step_time(1, 2000, 0, 0, 0.0, 0) == pytest.approx(whole(1, 2000, 0, 0, 0.0, 0) + hop0 + hop)
    one = (0, 0, 1, 4096, 4096 * 2048.0, 0)
    assert pp.step_time(*one) == pytest.approx(whole(*one) + hop0 + hop * 4096)
    # a chunk and a small tail fit one micro-batch's budget: they ride together
    tail = (0, 0, 2, 8192, 8000 * 4000.0 + 192 * 96.0, 0)
    assert pp.step_time(*tail) == pytest.approx(whole(*tail) + hop0 + hop * 8192)
    # a long prompt fills both micro-batches of a rotation (16,384 tokens): they pipeline
    long = (0, 0, 1, 16384, 16384 * 8192.0, 0)
    half = whole(0, 0, 1, 8192, 16384 * 8192.0 / 2, 0)
    assert pp.step_time(*long) == pytest.approx(half + hop0 + hop * 8192)
    # decodes beside a chunk: micro-batch A holds 32 decodes and the chunk, B 32 decodes
    a, b = whole(32, 32 * 4000, 1, 4096, 4096 * 2048.0, 0), whole(32, 32 * 4000, 0, 0, 0.0, 0)
    assert pp.step_time(64, 64 * 4000, 1, 4096, 4096 * 2048.0, 0) == pytest.approx((a + b) / 2 + hop0 + hop * 4128)
    assert rotation_time(whole, 2, 8192, 0.0, 0.0, 0, 0, 0, 0, 0.0, 0) == 0.0


def test_stages_beyond_a_node_hop_over_the_network():
    """A micro-batch's hidden state and residual cross ``P - 1`` stage boundaries: over NVLink
    within a node, over the network (one 400 Gb/s NIC a GPU) once TP x PP passes 8 GPUs."""
    from generation.engine.perf.hardware import NETWORK_BANDWIDTH
    tp4 = settings(L70, "--gpu", "H100", "-tp", "4").step_time
    lone = (1, 2000, 0, 0, 0.0, 0)
    for pp, link in ((2, tp4.gpu.nvlink_bandwidth), (4, NETWORK_BANDWIDTH)):
        m = settings(L70, "--gpu", "H100", "-tp", "4", "-pp", str(pp)).step_time
        c = m.constants
        hops = (pp - 1) * (c.t_ar + 2 * 8192 * 2 / 4 / link / c.eta_ar)
        assert m.step_time(*lone) == pytest.approx(tp4.step_time(*lone) + hops)


def test_a_replay_with_stages_runs():
    from generation.engine.replay import main
    assert main(["--model", L70, "--gpu", "H100", "-tp", "2", "-pp", "2", "--max-model-len", "8192",
                 "--num-requests", "20", "--rate", "4", "--no-progress", "--json"]) == 0


def test_a_moe_rotation_compiles_the_micro_batches_kernels():
    """vLLM profiles and steps micro-batches of --max-num-batched-tokens: a rotation's larger
    total selects no larger fused-MoE kernel variant."""
    m = settings("Qwen/Qwen3-30B-A3B", "--gpu", "H100", "-pp", "2").step_time
    jit = m.moe_jit(2 * 8192)
    assert (jit.micro, jit.stall(16384), jit.stalls) == (8192, 0.0, 0)     # the profile run's variant: compiled


def test_the_capacity_bench_prints_each_deployment(capsys):
    """``python bench/parallel_capacity.py --quick`` (the README's capacity figures): a line per
    deployment, the refused one with the fix its error suggests."""
    import importlib.util
    import pathlib
    path = pathlib.Path(__file__).resolve().parents[2] / "bench" / "parallel_capacity.py"
    spec = importlib.util.spec_from_file_location("parallel_capacity", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    assert bench.main(["--quick"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len(bench.ROWS) + 1
    assert lines[1].endswith("7,208,960 tokens (14,080 x 512)")
    refused = [line for line in lines if "Llama-3.1-405B" in line and " -tp 8 " in line + " "][0]
    assert refused.endswith("refused: try --tensor-parallel-size 16, or --pipeline-parallel-size 2 at "
                            "--tensor-parallel-size 8")
