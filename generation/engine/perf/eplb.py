"""vLLM 0.34's expert-parallel load balancer (``--enable-eplb``, ``--eplb-config``) in step mode:
its checks, and the redundant experts it places beside the logical ones.

vLLM (``config/parallel.py``): EPLB needs ``--enable-expert-parallel`` and an EP group of more
than one GPU (TP x DP); ``num_redundant_experts`` set without EPLB is an error; unset, it is the
fewest that make the logical experts plus it divide over the EP group.  Each redundant expert is
a copy of a busy one, so a GPU holds ``(E + R) / (TP x DP)`` experts whole: more weight memory,
a smaller KV cache, and fused-MoE kernels over that many local experts.  The step model already
takes the tokens to spread evenly over the experts (every GPU its share), the balance EPLB works
towards, so the rebalancing itself changes no step time here, and the moves of expert weights
between GPUs it runs every ``step_interval`` steps are left out.
"""
from __future__ import annotations

from dataclasses import replace

from generation.config.values import ConfigError


def redundant_experts(cfg, arch, tp: int, dp: int, ep: bool) -> int:
    """The redundant experts vLLM places for ``cfg``'s ``--enable-eplb`` / ``--eplb-config`` on a
    model of ``arch`` at ``tp`` x ``dp`` with expert parallelism ``ep`` (0 without EPLB).  Raises
    ConfigError with vLLM's messages, naming the flag."""
    enabled = bool(getattr(cfg, "enable_eplb", False))
    conf = getattr(cfg, "eplb_config", None) or {}
    if not isinstance(conf, dict):
        raise ConfigError("--eplb-config must be a JSON object", "eplb-config")
    r = conf.get("num_redundant_experts")
    if r is not None and (isinstance(r, bool) or not isinstance(r, int) or r < 0):
        raise ConfigError(f"eplb_config.num_redundant_experts must be an integer >= 0, got {r!r}", "eplb-config")
    if not enabled:
        if r not in (None, 0):
            raise ConfigError(f"num_redundant_experts is set to {r} but EPLB is not enabled. Either enable EPLB or "
                              f"unset num_redundant_experts.", "eplb-config")
        return 0
    if not getattr(cfg, "enable_expert_parallel", False):
        raise ConfigError("enable_expert_parallel must be True to use EPLB.", "enable-eplb")
    if tp * dp <= 1:
        raise ConfigError(f"EPLB requires tensor, prefill-context, or data parallelism, but got TP={tp}, PCP=1, "
                          f"DP={dp}.", "enable-eplb")
    if not (ep and arch.is_moe):
        return 0
    size = tp * dp
    return r if r is not None else (size - arch.num_experts % size) % size


def with_redundant_experts(arch, redundant: int):
    """``arch`` with its routed experts counted as the physical ones (logical + ``redundant``):
    the weights and kernels one GPU holds (:func:`~.hardware.local_experts`)."""
    return replace(arch, num_experts=arch.num_experts + redundant) if redundant else arch
