"""The simulated tokenizer's multimodal features (api.md 5.8): which media blocks a chat
conversation carries, and their synthetic hashes, placeholders and kwargs.  Used by chat render
and by ``--mm-encoder-only``'s ``ec_transfer_params`` (api.md 5.1.10)."""
from __future__ import annotations

import base64

from generation.lanes import paced

from .tokenizer import fnv1a_32

# block type -> (modality, hash prefix, where the identifier lives)
_MEDIA = {"image_url": ("image", "img", "url"), "audio_url": ("audio", "audio", "url"),
          "input_audio": ("audio", "audio", "data"), "video_url": ("video", "video", "url")}


def media_items(messages) -> list[tuple[str, str, str]]:
    """``(modality, prefix, identifier)`` of every media block with a non-empty url / data, in
    message and block order.  ``image_url`` / ``audio_url`` / ``video_url`` are identified by
    their url (an object ``{"url"}`` or a bare string), ``input_audio`` by its ``data``."""
    items = []
    for m in messages:
        content = m.get("content")
        if not isinstance(content, list):
            continue
        for block in paced(content):
            if not isinstance(block, dict):
                continue
            spec = _MEDIA.get(block.get("type"))
            if spec is None:
                continue
            modality, prefix, key = spec
            v = block.get(block["type"])
            ident = v.get(key) if isinstance(v, dict) else (v if key == "url" else None)
            if isinstance(ident, str) and ident:
                items.append((modality, prefix, ident))
    return items


def mm_features(items, n_tokens: int) -> dict | None:
    """The simulated tokenizer's multimodal ``features`` (api.md 5.8), or None without media.

    ``mm_hashes[modality]``: ``sim_<prefix>_<k>_<hex FNV-1a-32 of the identifier>`` (``k``
    counts that modality's items); ``kwargs_data[modality]``: base64 of that hash string;
    ``mm_placeholders[modality]``: ``{"offset", "length"}`` - the ``n_tokens`` prompt tokens
    split into equal spans, one per item in overall order, each at least 1 token long.
    Modality keys are sorted (the reference's Go maps are)."""
    if not items:
        return None
    span = max(n_tokens // len(items), 1)
    hashes: dict[str, list] = {}
    places: dict[str, list] = {}
    kwargs: dict[str, list] = {}
    for j, (modality, prefix, ident) in enumerate(paced(items)):      # ~3 us an item (FNV-1a in Python)
        h = f"sim_{prefix}_{len(hashes.get(modality, ()))}_{fnv1a_32(ident.encode('utf-8')):x}"
        hashes.setdefault(modality, []).append(h)
        kwargs.setdefault(modality, []).append(base64.b64encode(h.encode("ascii")).decode("ascii"))
        offset = max(min(j * span, n_tokens - 1), 0)
        length = max(min(span, n_tokens - offset), 1)
        places.setdefault(modality, []).append({"offset": offset, "length": length})
    order = sorted(hashes)
    return {"mm_hashes": {k: hashes[k] for k in order},
            "mm_placeholders": {k: places[k] for k in order},
            "kwargs_data": {k: kwargs[k] for k in order}}


def mm_token_counts(messages, n_tokens: int) -> dict | None:
    """Prompt tokens per modality (``{"image": 12}``): the lengths of :func:`mm_features`'
    placeholders summed by modality, the spans chat render reports for the same conversation
    of ``n_tokens`` prompt tokens; None without media.  vLLM 0.34's ``multimodal_tokens``
    (``chat_completion/serving.py`` ``_get_mm_token_counts``: the placeholder lengths of
    ``mm_placeholders`` by modality)."""
    features = mm_features(media_items(messages), n_tokens)
    if features is None:
        return None
    return {k: sum(p["length"] for p in places) for k, places in features["mm_placeholders"].items()}
