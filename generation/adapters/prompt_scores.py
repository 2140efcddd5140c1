"""A ``/inference/v1/generate`` request's prompt logprobs (vLLM 0.34's ``prompt_logprobs``,
``prompt_logprob_start`` and ``prompt_logprob_token_ids``; ``vllm/sampling_params.py``
``_validate_logprobs``, ``vllm/v1/engine/input_processor.py``, the response's
``prompt_token_id_logprobs`` from ``token_in_token_out/serving.py``).

Shapes: ``prompt_logprobs`` is one entry per prompt position: ``None`` for position 0 and for
the positions up to ``prompt_logprob_start`` (their rows are not scored), else
``{str(token_id): {"logprob", "rank", "decoded_token"}}`` (the synthetic values of
:func:`generation.content.logprobs.prompt_logprobs`).  ``prompt_logprob_token_ids`` is
``[num_rows][num_ids]`` token ids, ``-1`` padding (rows shorter than the longest are padded
too); row ``i`` scores its ids as predictions of prompt token ``start + i + 1``, so there must
be exactly ``prompt_len - 1 - start`` rows.  ``prompt_token_id_logprobs`` is those scores as a
base64 ``.npy`` float32 array of shape ``[num_rows, num_ids]``: the prompt's own token scores
what ``prompt_logprobs`` gives it, another id a lower synthetic logprob, padding ``-inf``.
"""
from __future__ import annotations

import base64
import io

from generation.content import logprobs as lp
from generation.errors import InvalidParam, Rejected

FIELD = "prompt_logprob_token_ids"


def check_prompt_scores(sp, prompt_len: int, stream: bool, max_len: int, max_logprobs: int, vocab: int) -> None:
    """vLLM 0.34's checks, in its order (``SamplingParams._validate_logprobs``,
    ``InputProcessor.process_inputs``), each with its ``parameter`` and ``value``."""
    rows = sp.prompt_logprob_token_ids
    if stream and rows is not None:
        raise InvalidParam("prompt_logprob_token_ids are not available when stream=true.", FIELD)
    if rows is not None:
        if (not isinstance(rows, list) or not rows or not all(isinstance(r, list) for r in rows)
                or max(map(len, rows)) == 0):
            raise Rejected("prompt_logprob_token_ids must be a non-empty integer array of shape "
                           "[num_rows, num_ids].", FIELD, type(rows).__name__)   # a list has no .shape
        if len(rows) > max_len - 1:
            raise Rejected(f"prompt_logprob_token_ids has {len(rows)} rows, but a prompt has at most "
                           f"{max_len - 1} scored rows (max_model_len - 1).", FIELD, len(rows))
        width = max(map(len, rows))
        if max_logprobs != -1 and width > max_logprobs:
            raise Rejected(f"Requested {width} token ids per row in prompt_logprob_token_ids, which is greater "
                               f"than max allowed: {max_logprobs}. Set max_logprobs (--max-logprobs) to at least "
                           f"{width}.", FIELD, width)
        flat = [t for r in rows for t in r]
        if not all(isinstance(t, int) and not isinstance(t, bool) for t in flat):
            raise Rejected("prompt_logprob_token_ids must contain integer token ids.", FIELD)
        lo = -1 if any(len(r) < width for r in rows) else min(flat)     # vLLM pads short rows with -1
        lo, hi = min(lo, min(flat)), max(flat)
        if lo < -1 or hi >= vocab:
            raise Rejected(f"prompt_logprob_token_ids contain out-of-vocab token ids (-1 pads a row). "
                           f"Vocabulary size: {vocab}", FIELD, [lo, hi])
    start = sp.prompt_logprob_start
    if start is not None:
        if rows is None and sp.prompt_logprobs is None:
            raise Rejected("prompt_logprob_start requires prompt_logprobs or prompt_logprob_token_ids.",
                           "prompt_logprob_start", start)
        if start < 0:
            raise Rejected("prompt_logprob_start must be non-negative.", "prompt_logprob_start", start)
    start = start or 0
    if start and start >= prompt_len - 1:
        raise Rejected(f"prompt_logprob_start must be less than prompt_len - 1 ({prompt_len - 1}) so at least "
                       f"one prompt row is scored.", "prompt_logprob_start", start)
    if rows is not None:
        want = max(prompt_len - 1 - start, 0)
        if len(rows) != want:
            raise Rejected(f"prompt_logprob_token_ids has {len(rows)} rows, but the prompt has {want} scored "
                           f"rows (prompt_len - 1 - prompt_logprob_start).", FIELD, len(rows))


def prompt_fields(tokenizer, sp, ids: list) -> dict:
    """The body's ``prompt_logprobs`` (when asked) and ``prompt_token_id_logprobs`` (when rows
    were given), see the module docstring."""
    out = {}
    start = sp.prompt_logprob_start or 0
    if sp.prompt_logprobs is not None:
        entries = lp.prompt_logprobs(tokenizer, ids, sp.prompt_logprobs)
        out["prompt_logprobs"] = [None if k <= start else e for k, e in enumerate(entries)]
    rows = sp.prompt_logprob_token_ids
    if rows is not None:
        import numpy as np          # here: numpy costs the server's start-up ~45 ms
        width = max(map(len, rows))
        scores = np.full((len(rows), width), -np.inf, dtype=np.float32)
        for i, row in enumerate(rows):
            pos = start + i + 1
            for k, t in enumerate(row):
                if t != -1:
                    scores[i, k] = lp.logprob(pos) if t == ids[pos] else lp.logprob(pos, k + 1)
        buf = io.BytesIO()
        np.save(buf, scores, allow_pickle=False)
        out["prompt_token_id_logprobs"] = base64.b64encode(buf.getvalue()).decode("ascii")
    return out
