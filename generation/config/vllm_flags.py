"""vLLM's ``vllm serve`` flags as the simulator knows them: the 0.34 table written from vLLM's
source (``vllm_serve_flags.json``), older releases' removed flags, and vLLM's short forms.
:mod:`.options` declares the flags that take effect; the rest are accepted and ignored
(:func:`ignored_flags`)."""
from __future__ import annotations

import json
import os


def _vllm_serve_flags() -> tuple[str, dict[str, dict]]:
    """vLLM's ``vllm serve`` flags (``generation/config/vllm_serve_flags.json``, written from
    vLLM's source by ``bench/vllm_cli_flags.py``): ``(release, {name: entry})``, the name
    without its dashes; an entry's ``arity`` is ``bool`` (``--x`` / ``--no-x``), ``flag`` (no
    value), ``value``, ``optional`` (zero or one), ``list`` (one or more), ``append`` (one,
    repeatable) or a count; with its ``choices``, ``aliases`` and ``negatives`` where vLLM has
    them."""
    with open(os.path.join(os.path.dirname(__file__), "vllm_serve_flags.json"), encoding="utf-8") as fh:
        doc = json.load(fh)
    return doc["vllm"], {f["flag"][2:]: f for f in doc["flags"]}


VLLM_FLAGS_RELEASE, VLLM_FLAGS = _vllm_serve_flags()

# Flags of older vLLM releases (and the reference's) that vLLM 0.34 removed, accepted and
# ignored: name -> arity, as in VLLM_FLAGS
_OLDER_IGNORED: dict[str, str] = {
    "max-seq-len-to-capture": "value", "swap-space": "value", "num-scheduler-steps": "value",
    "calculate-kv-scales": "bool", "enable-lora-bias": "bool", "long-lora-scaling-factors": "value",
    "guided-decoding-backend": "value", "disable-frontend-multiprocessing": "bool",
    "logits-processor-pattern": "value", "quantization-param-path": "value", "num-lookahead-slots": "value",
    "preemption-mode": "value", "scheduler-delay-factor": "value", "max-long-partial-prefills": "value",
    "tokenizer-pool-size": "value", "max-context-len-to-capture": "value", "use-v2-block-manager": "bool",
    "worker-use-ray": "bool", "lora-extra-vocab-size": "value", "speculative-model": "value",
    "num-speculative-tokens": "value", "disable-mm-preprocessor-cache": "bool", "override-pooler-config": "value",
    # in 0.17 to 0.27 (bench/vllm_cli_flags.py on their sources), gone from 0.34
    "override-attention-dtype": "value", "use-gpu-for-pooling-score": "bool", "enable-bf16x3-router-gemm": "bool",
}
# vLLM's short forms of the simulator's options, beyond VLLM_FLAGS' aliases (the `-O` of releases
# before 0.34 is --compilation-config's: see cli._dialects)
_OPTION_ALIASES = {"-dp": "data-parallel-size", "-tp": "tensor-parallel-size", "-q": "quantization"}
_OLDER_ALIASES = {"-O": "compilation-config"}


def ignored_flags(options: dict) -> dict[str, str]:
    """The vLLM flags accepted and ignored: name -> arity.  Every ``vllm serve`` flag of
    VLLM_FLAGS that none of ``options`` (the simulator's, by name) declares (by its name or an
    alias), then the older releases'."""
    taken = set(options) | {a[2:] for o in options.values() for a in o.aliases if a.startswith("--")} | {"config"}
    out = {name: f["arity"] for name, f in VLLM_FLAGS.items() if name not in taken}
    out.update((name, arity) for name, arity in _OLDER_IGNORED.items() if name not in out)
    return out

