"""Synthetic, deterministic log-probabilities (reference api.md section 7).

For the token at position ``pos`` of a choice and alternative rank ``j`` (0 = the sampled
token): ``logprob = -1.0 - (pos % 3) * 0.1 - j * 0.5``; alternative ``j`` is the string
``"<token>_<j>"``.  Unlike the reference, streamed tokens use their real position (the
reference uses ``created % 1000`` for every streamed token), so a stream and a non-stream
answer carry the same values.  Shapes are OpenAI's.

An entry depends only on the token, ``pos % 3`` and the number of alternatives, so entries are
memoised (:class:`_Memo`) and shared: a response's logprobs cost a lookup per token, not
5-10 us per alternative (a 1,000-token choice with 20 alternatives took 0.25 s to build).
Callers must not modify what these functions return.
"""
from __future__ import annotations


class _Memo(dict):
    """key -> entry, holding at most :data:`MAX_ALTERNATIVES` alternatives in all, about 10 MB
    (echoed prompts bring arbitrary tokens; past the bound entries are built each time)."""
    MAX_ALTERNATIVES = 65536

    def __init__(self):
        super().__init__()
        self.held = 0

    def keep(self, key, value, weight: int):
        if self.held + weight <= self.MAX_ALTERNATIVES:
            self.held += weight
            self[key] = value
        return value


_CHAT = _Memo()
_COMPLETION = _Memo()
_TOKEN_ID = _Memo()
MAX_MEMO_PIECE = 64          # characters: longer pieces are not memoised


def logprob(pos: int, rank: int = 0) -> float:
    return round(-1.0 - (pos % 3) * 0.1 - rank * 0.5, 6)


def chat_entry(piece: str, pos: int, top: int) -> dict:
    """One ``choices[].logprobs.content[]`` entry: token, logprob, bytes, top_logprobs
    (``top`` entries, the sampled token first).  Shared: do not modify."""
    key = (piece, pos % 3, top)
    e = _CHAT.get(key)
    if e is not None:
        return e
    e = {"token": piece, "logprob": logprob(pos), "bytes": list(piece.encode("utf-8")),
         "top_logprobs": [
             {"token": t, "logprob": logprob(pos, j), "bytes": list(t.encode("utf-8"))}
             for j, t in ((j, piece if j == 0 else f"{piece}_{j}") for j in range(top))]}
    return _CHAT.keep(key, e, top + 1) if len(piece) <= MAX_MEMO_PIECE else e


def chat_logprobs(pieces, top: int, start: int = 0) -> dict:
    """``{"content": [...]}`` for a chat choice."""
    return {"content": [chat_entry(p, start + i, top) for i, p in enumerate(pieces)]}


def completion_logprobs(pieces, top: int, start: int = 0, offset: int = 0, ids=None, listed=None) -> dict:
    """OpenAI completions logprobs: tokens, token_logprobs, top_logprobs (dicts with
    ``max(top, 1)`` entries), text_offset (character offsets from ``offset``, each advancing by
    the length of the token reported).  With ``ids`` (one per piece; vLLM's
    ``return_tokens_as_token_ids``) tokens are named ``token_id:N`` and the alternatives are the
    following ids; the offsets then advance by the ``token_id:N`` names, as vLLM 0.34's
    ``_create_completion_logprobs`` (``last_token_len = len(token)``) does.  ``listed`` (the names of a
    request's ``logprob_token_ids``): the alternatives are exactly those, after the sampled
    token (vLLM 0.34's ``completion_top_logprobs_limit`` returns them all)."""
    n = max(top, 1)
    tokens, lps, tops, offsets = [], [], [], []
    off = offset
    memo = _COMPLETION
    for i, p in enumerate(pieces):
        pos = start + i
        if ids is None:
            name, alt = p, (lambda j, p=p: f"{p}_{j}")
        else:
            tid = ids[i]
            name, alt = f"token_id:{tid}", (lambda j, tid=tid: f"token_id:{(tid + j) & 0xFFFFFFFF}")
        tokens.append(name)
        lps.append(logprob(pos))
        if listed is not None:
            d = {name: logprob(pos)}
            for j, other in enumerate(listed, 1):
                d.setdefault(other, logprob(pos, j))
            tops.append(d)
            offsets.append(off)
            off += len(name)
            continue
        key = (name, pos % 3, n)
        d = memo.get(key)
        if d is None:
            d = {name: logprob(pos)}
            for j in range(1, n):
                d[alt(j)] = logprob(pos, j)
            if len(name) <= MAX_MEMO_PIECE:
                memo.keep(key, d, n)
        tops.append(d)
        offsets.append(off)
        off += len(name)
    return {"tokens": tokens, "token_logprobs": lps, "top_logprobs": tops, "text_offset": offsets}


def listed_names(tokenizer, ids, as_ids: bool) -> list | None:
    """The top-logprob names of a request's ``logprob_token_ids`` (``token_id:N`` with
    ``as_ids``, else the decoded token), or None when it lists none."""
    if not ids:
        return None
    return [f"token_id:{t}" if as_ids else tokenizer.decode_ids([t]) for t in ids]


def with_listed(entry: dict, pos: int, listed: list) -> dict:
    """A chat logprob entry whose alternatives are the sampled token, then exactly the
    ``listed`` names (vLLM 0.34's chat ``return_all`` with ``logprob_token_ids``)."""
    tops = [entry["top_logprobs"][0] if entry["top_logprobs"] else
            {"token": entry["token"], "logprob": entry["logprob"], "bytes": entry["bytes"]}]
    seen = {tops[0]["token"]}
    for j, name in enumerate(listed, 1):
        if name not in seen:
            seen.add(name)
            tops.append({"token": name, "logprob": logprob(pos, j), "bytes": list(name.encode("utf-8"))})
    return {**entry, "top_logprobs": tops}


def responses_entry(piece: str, pos: int, top: int) -> dict:
    """Responses API ``output_text.logprobs[]`` entry (top_logprobs always present)."""
    return chat_entry(piece, pos, top)


def prompt_logprobs(tokenizer, ids, top: int) -> list:
    """vLLM's ``prompt_logprobs``: ``None`` for the first prompt token (nothing precedes it),
    then per token ``{token_id: {"logprob", "rank", "decoded_token"}}`` holding the prompt's own
    token (rank 1) and ``top - 1`` alternatives; vLLM returns the actual token plus the top
    ``top``, which is ``top`` entries when the actual token ranks first.  The alternatives are
    other tokens of the same prompt (always valid ids of the tokenizer); a prompt with fewer
    distinct tokens gives fewer.  Keys are strings, as in vLLM's JSON."""
    ids = list(ids)
    n = len(ids)
    if not n:
        return []
    decoded: dict = {}

    def dec(t):
        s = decoded.get(t)
        if s is None:
            s = decoded[t] = tokenizer.decode_ids([t])
        return s

    distinct = list(dict.fromkeys(ids))
    out: list = [None]
    seen: dict = {}          # (token, pos % 3) -> its entry: the same for every position
    for pos in range(1, n):
        tid = ids[pos]
        entry = seen.get((tid, pos % 3))
        if entry is not None:
            out.append(entry)
            continue
        entry = seen[(tid, pos % 3)] = {str(tid): {"logprob": logprob(pos), "rank": 1, "decoded_token": dec(tid)}}
        j = 1
        for alt in distinct:
            if j >= top:
                break
            if alt != tid:
                entry[str(alt)] = {"logprob": logprob(pos, j), "rank": j + 1, "decoded_token": dec(alt)}
                j += 1
        out.append(entry)
    return out


def token_id_entry(tid: int, pos: int, top: int) -> dict:
    """One ``ChatCompletionLogProbs.content`` entry with tokens named ``token_id:N`` (vLLM's
    token-in/token-out ``/inference/v1/generate``, ``return_tokens_as_token_ids``); the
    alternatives are the following ids.  Shared: do not modify."""
    key = (tid, pos % 3, top)
    e = _TOKEN_ID.get(key)
    if e is not None:
        return e
    tok = f"token_id:{tid}"
    return _TOKEN_ID.keep(key, {
        "token": tok, "logprob": logprob(pos), "bytes": list(tok.encode()),
        "top_logprobs": [
            {"token": t, "logprob": logprob(pos, j), "bytes": list(t.encode())}
            for j, t in ((j, tok if j == 0 else f"token_id:{(tid + j) & 0xFFFFFFFF}") for j in range(top))]},
        top + 1)
