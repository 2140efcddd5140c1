"""The published step measurements (docs/engine-model.md §4) the profiles of GPUs without
training runs are solved on, their replay, and the profile file's writer: shared by ``fit`` (real
runs) and ``fit_kernels`` (kernels timed on a GPU)."""
from __future__ import annotations

import json
import os

from .step_model import PerfConstants

# Published single-GPU measurements of GPUs without training runs (docs/engine-model.md §4):
# Llama-3.1-8B, BF16.  (gpu, batch, prompt, output, what, value in ms)
PUBLISHED_STEPS = [("A100-40GB", 1, 1024, 128, "tpot", 13.3),
                   ("H200", 8, 32, 128, "batch", 833.0)]


def published_value(row: tuple, constants: PerfConstants) -> float:
    """A published measurement (a :data:`PUBLISHED_STEPS` row: GPU, batch, prompt and output
    tokens, ``"tpot"`` or ``"batch"``) replayed in virtual time with ``constants``: TPOT in ms
    of the first request, or the batch's latency in ms (its last request's end)."""
    from generation.config.cli import load_config
    from ..replay import TraceRequest, replay, scheduler_for
    from ..step_config import resolve_step_settings
    from .step_model import StepModel
    gpu, batch, prompt, output, what, _ = row
    cfg = load_config(["meta-llama/Llama-3.1-8B-Instruct", "--latency-calculator", "step", "--gpu", gpu,
                       "--max-model-len", "4096"], env={})
    st = resolve_step_settings(cfg)
    res = replay(scheduler_for(st, cfg.max_model_len),
                 StepModel(st.gpu, st.arch, constants=constants, max_cudagraph_capture_size=st.step_time.max_graph),
                 [TraceRequest(0.0, prompt, output) for _ in range(batch)])
    if what == "tpot":
        r = res.requests[0]
        return 1000 * (r.finished_at - r.first_token) / (r.num_output - 1)
    return 1000 * max(res.times(r)[1] for r in res.requests)


def write_profile(path: str, gpu: str, constants: PerfConstants, **extra) -> None:
    """Write a profile JSON (``gpu``, the ``extra`` fields such as ``method`` and ``basis``, the
    constants to 6 significant digits) to ``path``, creating its folder."""
    doc = {"gpu": gpu, **extra, "constants": {k: float(f"{v:.6g}") for k, v in constants.to_dict().items()}}
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(doc, fh, indent=2)
        fh.write("\n")
    print(f"wrote {path}")
