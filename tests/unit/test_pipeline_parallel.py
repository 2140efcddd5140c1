"""``--pipeline-parallel-size`` (``-pp``) in step mode (generation/engine/perf/pipeline.py): a
GPU holds one stage's layers and KV cache; a step is a rotation in which every scheduled request
advances once, priced as the whole model over ``1 / min(P, requests)`` of the work (vLLM 0.34's
``P`` batches in flight, a decode joining one in ``P`` with async scheduling), never less than
the whole model over a prefill chunk, plus the hops between stages."""
from __future__ import annotations

import pytest

from generation.config.values import ConfigError
from generation.engine.perf.model_arch import preset
from generation.engine.perf.pipeline import pipelined_step_time, stage_arch
from generation.engine.step_config import load_step_config, resolve_step_settings

L70 = "meta-llama/Llama-3.1-70B-Instruct"


def settings(model, *extra):
    return resolve_step_settings(load_step_config(["--model", model, "--max-model-len", "8192", *extra]))


def test_a_gpu_holds_one_stage():
    arch = preset(L70)
    stage = stage_arch(arch, 3)
    assert (stage.num_layers, stage.tie_word_embeddings) == (27, True)       # ceil(80 / 3), one vocabulary matrix
    with pytest.raises(ConfigError, match="more than the model's 80 layers"):
        stage_arch(arch, 81)
    # Llama-3.1-405B fits 16 H100s as 2 stages of TP 8, not 8 alone
    with pytest.raises(ConfigError, match="does not fit on H100"):
        settings("meta-llama/Llama-3.1-405B-Instruct", "--gpu", "H100", "-tp", "8")
    pp2 = settings("meta-llama/Llama-3.1-405B-Instruct", "--gpu", "H100", "-tp", "8", "-pp", "2")
    assert pp2.num_gpu_blocks == 15460
    assert pp2.summary(8192)[3].endswith("; 2 pipeline stages of 63 layers")
    # the same 4 GPUs as TP 4 or TP 2 x PP 2: about the same cache (the stage keeps one vocabulary matrix)
    tp4, tp2pp2 = settings(L70, "--gpu", "H100", "-tp", "4"), settings(L70, "--gpu", "H100", "-tp", "2", "-pp", "2")
    assert (tp4.num_gpu_blocks, tp2pp2.num_gpu_blocks) == (9043, 8871)


def test_a_rotation_is_the_whole_model_over_a_pth_of_the_work():
    tp2 = settings(L70, "--gpu", "H100", "-tp", "2").step_time
    pp, sync = (settings(L70, "--gpu", "H100", "-tp", "2", "-pp", "2", *f).step_time
                for f in ((), ("--no-async-scheduling",)))
    c = pp.constants
    hop0 = c.t_ar
    hop = 2 * 8192 * 2 / 2 / pp.gpu.nvlink_bandwidth / c.eta_ar
    # 64 decodes in two micro-batches of 32; a lone decode and a lone prefill go whole
    assert pp.step_time(64, 64 * 4000, 0, 0, 0.0, 0) == pytest.approx(
        tp2.step_time(32, 32 * 4000, 0, 0, 0.0, 0) + hop0 + hop * 32)
    assert pp.step_time(1, 2000, 0, 0, 0.0, 0) == pytest.approx(tp2.step_time(1, 2000, 0, 0, 0.0, 0) + hop0 + hop)
    prefill = (0, 0, 1, 4096, 4096 * 2048.0, 0)
    assert pp.step_time(*prefill) == pytest.approx(tp2.step_time(*prefill) + hop0 + hop * 4096)
    # a chunk rides in one micro-batch: the rotation is at least the whole model over it
    mixed = (63, 63 * 4000, 1, 4096, 4096 * 2048.0, 0)
    assert pp.step_time(*mixed) >= tp2.step_time(*prefill)
    # without async scheduling every request is in the one batch in flight: the stages take turns
    tp2_sync = settings(L70, "--gpu", "H100", "-tp", "2", "--no-async-scheduling").step_time
    assert sync.step_time(64, 64 * 4000, 0, 0, 0.0, 0) == pytest.approx(
        tp2_sync.step_time(64, 64 * 4000, 0, 0, 0.0, 0) + hop0 + hop * 64)
    assert pipelined_step_time(tp2.step_time, 2, 0.0, 0.0, 0, 0, 0, 0, 0.0, 0) == 0.0


def test_a_replay_with_stages_runs():
    from generation.engine.replay import main
    assert main(["--model", L70, "--gpu", "H100", "-tp", "2", "-pp", "2", "--max-model-len", "8192",
                 "--num-requests", "20", "--rate", "4", "--no-progress", "--json"]) == 0
