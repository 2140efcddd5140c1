"""The GPUs step mode knows beyond the measured ones (datasheet peaks, the generic profile), the
NVLink domain a collective crosses the network past, and ``--gpu`` given a JSON description.

Unit tier: exact values where the arithmetic is exact."""
from __future__ import annotations

import json

import pytest

from generation.config.values import ConfigError
from generation.engine.perf.hardware import (GPUS, NETWORK_BANDWIDTH, batch_defaults, exchange_terms, gpu_by_name,
                                             mla_block_size, preset)
from generation.engine.step_config import load_step_config, resolve_step_settings

R1 = "deepseek-ai/DeepSeek-R1"


def settings(model, *extra):
    return resolve_step_settings(load_step_config(["--model", model, "--max-model-len", "8192", *extra]))


@pytest.mark.parametrize("name,flops,bw,fp8,fa,batch", [
    ("L4", 121e12, 0.3e12, True, 2, (2048, 256)), ("A10", 125e12, 0.6e12, False, 2, (2048, 256)),
    ("L40", 181e12, 0.864e12, True, 2, (2048, 256)), ("H100-PCIe", 756e12, 2.0e12, True, 3, (8192, 1024)),
    ("H100-NVL", 835.5e12, 3.9e12, True, 3, (8192, 1024)), ("H20", 148e12, 4.0e12, True, 3, (8192, 1024)),
    ("GB200", 2500e12, 8.0e12, True, 0, (16384, 1024)), ("MI325X", 1307.4e12, 6.0e12, True, 0, (16384, 1024)),
    ("MI355X", 2516.6e12, 8.0e12, True, 0, (16384, 1024)), ("H800", 989.4e12, 3.35e12, True, 3, (8192, 1024)),
    # vLLM's rule excludes A100s by name ("a100" in the device name): an A800 gets the 8,192 tokens
    ("A800-80GB", 312e12, 2.039e12, False, 2, (8192, 1024))])
def test_datasheet_gpus_have_their_peaks_kernels_and_vllms_batch_defaults(name, flops, bw, fp8, fa, batch):
    g = gpu_by_name(name.lower())
    assert (g.name, g.flops, g.bandwidth, g.fp8, g.flash_attn) == (name, flops, bw, fp8, fa)
    assert batch_defaults(g) == batch


@pytest.mark.parametrize("alias,name", [("h100_pcie_80gb", "H100-PCIe"), ("gb200-nvl72", "GB200"), ("L4-24GB", "L4"),
                                        ("mi355x-288gb", "MI355X"), ("h20-96gb", "H20")])
def test_datasheet_gpus_have_aliases(alias, name):
    assert gpu_by_name(alias).name == name


def test_a_datasheet_gpu_is_timed_by_the_generic_profile_and_sized_by_its_memory():
    l4 = settings("meta-llama/Llama-3.1-8B-Instruct", "--gpu", "L4")
    assert "generic.json (no profile of L4's own)" in l4.step_time.profile_source
    h100 = settings("meta-llama/Llama-3.1-8B-Instruct", "--gpu", "H100")
    assert 0 < l4.num_gpu_blocks < h100.num_gpu_blocks / 8       # 22 GiB less 16 GB of weights
    with pytest.raises(ConfigError):                             # 70B BF16 needs more than one 24 GB card
        settings("meta-llama/Llama-3.1-70B-Instruct", "--gpu", "A10")


def test_a_collective_crosses_the_network_past_the_gpus_nvlink_domain():
    assert GPUS["H100"].link_for(8) == 450e9 and GPUS["H100"].link_for(16) == NETWORK_BANDWIDTH
    assert GPUS["GB200"].link_for(72) == 900e9 and GPUS["GB200"].link_for(144) == NETWORK_BANDWIDTH
    assert GPUS["H100-NVL"].link_for(2) == 300e9 and GPUS["H100-NVL"].link_for(4) == NETWORK_BANDWIDTH
    assert GPUS["H800"].link_for(8) == GPUS["A800-80GB"].link_for(8) == 200e9        # their NVLink, cut
    arch = preset(R1)
    over_nvlink = exchange_terms(arch, 1, 900e9, dp=16, ep=True, backend="deepep_low_latency", domain=72)
    over_network = exchange_terms(arch, 1, 900e9, dp=16, ep=True, backend="deepep_low_latency")
    assert over_network[1] == pytest.approx(over_nvlink[1] * 900e9 / NETWORK_BANDWIDTH)
    # wide EP over 16 GB200s stays in the rack; over 16 B200s (two HGX nodes) it crosses the NICs
    flags = ("-dp", "16", "-dpl", "8", "-ep", "--all2all-backend", "deepep_low_latency")
    gb200, b200 = (settings(R1, "--gpu", g, *flags).step_time for g in ("GB200", "B200"))
    assert gb200.ar_per_token < b200.ar_per_token / 10
    # TP 16 over two H100 nodes all-reduces at the NIC's rate, not NVLink's
    tp16 = settings("meta-llama/Llama-3.1-405B-Instruct", "--gpu", "H100", "-tp", "16").step_time
    assert tp16.ar_per_token == pytest.approx(16384 * 4 * 15 / 16 / NETWORK_BANDWIDTH)


def test_blackwell_mla_blocks_are_cutlass_mlas_128():
    arch = preset(R1)
    assert [mla_block_size(gpu_by_name(g), arch, 16) for g in ("GB200", "B200", "H20", "A100-80GB")] == [128, 128, 64, 16]


RTX = {"name": "RTX-5090", "flops": 209.5e12, "bandwidth": 1.792e12, "memory_gib": 31.5}


def test_gpu_described_in_json_or_a_file(tmp_path):
    g = gpu_by_name(json.dumps(RTX))
    assert (g.name, g.flops, g.bandwidth, g.memory, g.nvlink_bandwidth) == ("RTX-5090", 209.5e12, 1.792e12,
                                                                              int(31.5 * 2 ** 30), 32e9)
    assert (g.fp8, g.fp4, g.flash_attn, g.nvlink_domain, g.sm) == (False, False, 2, 8, 80)
    path = tmp_path / "rtx.json"
    path.write_text(json.dumps({**RTX, "fp8": True, "nvlink_domain": 4}))
    assert gpu_by_name(str(path)) == gpu_by_name(json.dumps({**RTX, "fp8": True, "nvlink_domain": 4}))
    st = settings("meta-llama/Llama-3.1-8B-Instruct", "--gpu", str(path))
    assert st.gpu.name == "RTX-5090" and st.num_gpu_blocks > 0
    assert "no profile of RTX-5090's own" in st.step_time.profile_source


@pytest.mark.parametrize("value,words", [
    ('{"name": "x", "flops": 1e12, "bandwidth": 1e12}', "--gpu: 'memory_gib' is a required property"),
    ('{"name": "x", "flops": 209.5, "bandwidth": 1e12, "memory_gib": 8}',
     "--gpu.flops: 209.5 is less than the minimum of 1000000000000.0 (FLOP/s: 209.5 TFLOP/s is 209.5e12)"),
    ('{"name": "x", "flops": 1e14, "bandwidth": 1e-300, "memory_gib": 8}', "(bytes/s: 1.8 TB/s is 1.8e12)"),
    ('{"name": "../x", "flops": 1e14, "bandwidth": 1e12, "memory_gib": 8}', "--gpu.name: '../x' does not match"),
    ('{"name": "x", "flops": 1, "bandwidth": 1, "memory_gib": 8, "hbm": 3}', "('hbm' was unexpected)"),
    ('{"name": "x", "flops": 1e14, "bandwidth": 1e12, "memory_gib": 8, "flash_attn": 1}', "--gpu.flash_attn: 1 is not one of"),
    ('{"name": ' + "[" * 5000 + "]" * 5000 + "}", "--gpu: not a GPU's description (nested too deeply)"),
    ("{name: x}", "--gpu: not a JSON object"),
    ('{"name": "x", "flops": NaN, "bandwidth": 1e12, "memory_gib": 8}', "--gpu: NaN is not a number a GPU can have"),
    ('{"name": "x", "flops": 1e12, "bandwidth": -Infinity, "memory_gib": 8}', "-Infinity is not a number"),
    ("/no/such/gpu.json", "--gpu /no/such/gpu.json: cannot read"),
    ("RTX-9090", "or describe it in JSON"),
])
def test_a_bad_gpu_description_names_the_field(value, words):
    with pytest.raises(ConfigError) as e:
        gpu_by_name(value)
    assert words in str(e.value) and e.value.param == "gpu"


def test_a_yaml_config_describes_a_gpu_as_a_mapping(tmp_path):
    from generation.config.cli import load_config
    path = tmp_path / "sim.yaml"
    path.write_text("gpu:\n  name: RTX-5090\n  flops: 209.5e12\n  bandwidth: 1.792e12\n  memory_gib: 31.5\n")
    cfg = load_config(["--config", str(path)], env={})
    assert gpu_by_name(cfg.gpu) == gpu_by_name(json.dumps(RTX))


def test_the_tp_hint_counts_the_experts_dp_shares_out():
    """Qwen3-30B-A3B at DP 2 on L4s: the experts are shared over TP x DP, so TP 2 fits (the hint
    said TP 4, from the whole model over TP alone)."""
    with pytest.raises(ConfigError) as e:
        settings("Qwen/Qwen3-30B-A3B", "--gpu", "L4", "-dp", "2")
    assert str(e.value).endswith("try --tensor-parallel-size 2")
    assert settings("Qwen/Qwen3-30B-A3B", "--gpu", "L4", "-dp", "2", "-tp", "2").num_gpu_blocks > 0


def test_a_description_file_must_be_a_small_regular_utf8_file(tmp_path):
    """A FIFO named x.json blocked the start-up; a 10 MB file was cut at 64 KiB and misread; a
    binary one raised UnicodeDecodeError."""
    import os
    fifo, big, binary = tmp_path / "fifo.json", tmp_path / "big.json", tmp_path / "bin.json"
    os.mkfifo(fifo)
    big.write_text(json.dumps({**RTX, "pad": " " * 100000}))
    binary.write_bytes(b"\xff\xfe{")
    for path, words in ((fifo, "not a regular file"), (big, "more than 65536 characters"), (binary, "not UTF-8 text")):
        with pytest.raises(ConfigError) as e:
            gpu_by_name(str(path))
        assert str(e.value) == f"--gpu {path}: {words}" + (", not a GPU's description" if path == big else "")
