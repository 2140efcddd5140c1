"""Tokenizers: the reference's simulated regex tokenizer, and an optional real Hugging Face one.

The simulated tokenizer reproduces llm-d-inference-sim exactly (api.md 3.2): token pieces are
the leftmost-first matches of one punctuation character or a run of ASCII word characters,
each followed by the whitespace after it; anything else is dropped.  A piece's id is the
32-bit FNV-1a hash of its UTF-8 bytes.  Chat messages are flattened to one string first
(api.md 3.3): ``"### " + role[(tool_call_id)] + ": " + content + [name(args)]... + "\\n"``.
"""
from __future__ import annotations

import re
from typing import Iterable, Sequence

_PIECE = re.compile(
    r'(\{|\}|:|,|-|\.|\?|\!|;|@|#|\$|%|\^|&|\*|\(|\)|\+|\-|_|~|/|\\|>|<|\[|\]|=|"|\'|[0-9A-Za-z_]+)'
    r'[\t\n\f\r ]*')

FNV32_OFFSET = 2166136261
FNV32_PRIME = 16777619


def fnv1a_32(data: bytes) -> int:
    """32-bit FNV-1a hash of ``data`` (offset basis 2166136261, prime 16777619)."""
    h = FNV32_OFFSET
    for b in data:
        h = ((h ^ b) * FNV32_PRIME) & 0xFFFFFFFF
    return h


class SimulatedTokenizer:
    """The reference simulator's regex tokenizer (api.md 3.2).

    ``encode(text)`` returns ``(ids, pieces)``: two lists of equal length; ``"".join(pieces)``
    is the text minus the characters the pattern drops.
    """
    name = "simulated"

    def __init__(self) -> None:
        self._ids: dict[str, int] = {}
        self._pieces: dict[int, str] = {}     # reverse of _ids, for decode_ids

    def piece_id(self, piece: str) -> int:
        i = self._ids.get(piece)
        if i is None:
            i = fnv1a_32(piece.encode("utf-8"))
            if len(self._ids) < 200_000:
                self._ids[piece] = i
                self._pieces.setdefault(i, piece)
        return i

    def pieces(self, text: str) -> list[str]:
        return [m.group(0) for m in _PIECE.finditer(text)]

    def encode(self, text: str) -> tuple[list[int], list[str]]:
        pcs = self.pieces(text)
        pid = self.piece_id
        return [pid(p) for p in pcs], pcs

    def encode_lossless(self, text: str) -> tuple[list[int], list[str]]:
        """Like :meth:`encode`, but characters the pattern drops stay attached to the piece
        before them (or the first piece), so ``"".join(pieces) == text``.  Echo mode uses
        this to return the prompt unmodified, as the seeds require."""
        starts = [m.start() for m in _PIECE.finditer(text)]
        if not starts:
            return ([], []) if not text else ([self.piece_id(text)], [text])
        starts[0] = 0
        starts.append(len(text))
        pieces = [text[starts[k]:starts[k + 1]] for k in range(len(starts) - 1)]
        return [self.piece_id(p) for p in pieces], pieces

    def id_pieces(self, ids: Sequence[int]) -> list[str]:
        """Pieces standing for pre-tokenized ids: ``[1,2,3]`` -> ``["1,", "2,", "3"]``."""
        n = len(ids)
        return [f"{t}," if k < n - 1 else str(t) for k, t in enumerate(ids)]

    def decode_ids(self, ids: Sequence[int]) -> str:
        """Best-effort text of ``ids`` (vLLM ``/detokenize``): an id this tokenizer has produced
        (any text encoded since start, incl. the random-mode sentences) becomes its piece; a run
        of unknown ids is rendered as their decimals joined by commas, as echo mode shows a
        token-id prompt (FNV ids cannot be inverted)."""
        known = self._pieces
        out: list[str] = []
        unknown: list[str] = []
        for t in ids:
            piece = known.get(t)
            if piece is None:
                unknown.append(str(t))
                continue
            if unknown:
                out.append(",".join(unknown))
                unknown = []
            out.append(piece)
        if unknown:
            out.append(",".join(unknown))
        return "".join(out)


class HFTokenizer:
    """A real Hugging Face tokenizer loaded from a local path, never from a hub.

    ``path`` is a ``tokenizer.json`` file or a model directory holding one (loaded with the
    ``tokenizers`` library); a directory without it (e.g. sentencepiece only) is loaded with
    ``transformers.AutoTokenizer(local_files_only=True)``.  Pieces are cut from the text at the
    tokens' offsets, so they join back to the exact text."""
    name = "hf"

    def __init__(self, path: str) -> None:
        import os
        file = path if os.path.isfile(path) else os.path.join(path, "tokenizer.json")
        if os.path.isfile(file):
            from tokenizers import Tokenizer
            self._fast = Tokenizer.from_file(file)
            self._tok = None
        else:
            from transformers import AutoTokenizer   # heavy; see app.serve (imported before gevent)
            self._tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
            self._fast = getattr(self._tok, "_tokenizer", None)

    def encode(self, text: str) -> tuple[list[int], list[str]]:
        if self._fast is None:
            ids = self._tok.encode(text, add_special_tokens=False)
            return ids, self.id_pieces(ids)
        enc = self._fast.encode(text, add_special_tokens=False)
        ids = list(enc.ids)
        if not ids:
            return [], []
        starts = [o[0] for o in enc.offsets]
        starts[0] = 0
        for k in range(1, len(starts)):              # offsets may repeat for byte-level pieces
            starts[k] = max(starts[k], starts[k - 1])
        starts.append(len(text))
        return ids, [text[starts[k]:starts[k + 1]] for k in range(len(ids))]

    def pieces(self, text: str) -> list[str]:
        return self.encode(text)[1]

    def encode_lossless(self, text: str) -> tuple[list[int], list[str]]:
        return self.encode(text)

    def piece_id(self, piece: str) -> int:
        ids = self.encode(piece)[0]
        return ids[0] if ids else 0

    def decode(self, ids: Sequence[int]) -> str:
        return (self._fast or self._tok).decode(list(ids))

    def decode_ids(self, ids: Sequence[int]) -> str:
        """Text of ``ids`` (vLLM ``/detokenize``)."""
        return self.decode(ids)

    def id_pieces(self, ids: Sequence[int]) -> list[str]:
        return [self.decode([i]) for i in ids]


# ---------------------------------------------------------------------------------------------
# Chat flattening (api.md 3.3)

def content_text(content, with_media: bool = True) -> str:
    """Text of a message ``content`` (string or list of blocks): text blocks give their text,
    ``image_url`` blocks give ``image: <url>``; parts are joined with newlines.  Audio and
    video blocks contribute nothing (reference behaviour)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    parts: list[str] = []
    for block in content:
        if not isinstance(block, dict):
            continue
        t = block.get("type")
        if t == "text" or (t is None and "text" in block):
            parts.append(str(block.get("text") or ""))
        elif t == "image_url" and with_media:
            iu = block.get("image_url")
            url = iu.get("url") if isinstance(iu, dict) else iu
            parts.append(f"image: {url or ''}")
    return "\n".join(parts)


def plain_message(msg: dict, with_role: bool) -> str:
    """``PLAIN(message)`` of api.md 3.3: optional role prefix, content, then tool calls."""
    out = []
    if with_role:
        out.append(str(msg.get("role") or ""))
        tcid = msg.get("tool_call_id")
        if tcid:
            out.append(f"({tcid})")
        out.append(": ")
    out.append(content_text(msg.get("content")))
    for tc in msg.get("tool_calls") or ():
        fn = (tc or {}).get("function") or {}
        name = fn.get("name")
        if name:
            out.append(f"[{name}({fn.get('arguments') or ''})]")
    return "".join(out)


def flatten_messages(messages: Iterable[dict]) -> str:
    """The one string a chat conversation is tokenized as (simulated tokenizer)."""
    return "".join("### " + plain_message(m, True) + "\n" for m in messages)
