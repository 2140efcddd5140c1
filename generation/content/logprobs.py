"""Synthetic, deterministic log-probabilities (reference api.md section 7).

For the token at position ``pos`` of a choice and alternative rank ``j`` (0 = the sampled
token): ``logprob = -1.0 - (pos % 3) * 0.1 - j * 0.5``; alternative ``j`` is the string
``"<token>_<j>"``.  Unlike the reference, streamed tokens use their real position (the
reference uses ``created % 1000`` for every streamed token), so a stream and a non-stream
answer carry the same values.  Shapes are OpenAI's.
"""
from __future__ import annotations


def logprob(pos: int, rank: int = 0) -> float:
    return round(-1.0 - (pos % 3) * 0.1 - rank * 0.5, 6)


def chat_entry(piece: str, pos: int, top: int) -> dict:
    """One ``choices[].logprobs.content[]`` entry: token, logprob, bytes, top_logprobs
    (``top`` entries, the sampled token first)."""
    lp = logprob(pos)
    return {"token": piece, "logprob": lp, "bytes": list(piece.encode("utf-8")),
            "top_logprobs": [
                {"token": t, "logprob": logprob(pos, j), "bytes": list(t.encode("utf-8"))}
                for j, t in ((j, piece if j == 0 else f"{piece}_{j}") for j in range(top))]}


def chat_logprobs(pieces, top: int, start: int = 0) -> dict:
    """``{"content": [...]}`` for a chat choice."""
    return {"content": [chat_entry(p, start + i, top) for i, p in enumerate(pieces)]}


def completion_logprobs(pieces, top: int, start: int = 0, offset: int = 0, ids=None) -> dict:
    """OpenAI completions logprobs: tokens, token_logprobs, top_logprobs (dicts with
    ``max(top, 1)`` entries), text_offset (UTF-8 character offsets from ``offset``).  With
    ``ids`` (one per piece; vLLM's ``return_tokens_as_token_ids``) tokens are named
    ``token_id:N`` and the alternatives are the following ids."""
    n = max(top, 1)
    tokens, lps, tops, offsets = [], [], [], []
    off = offset
    for i, p in enumerate(pieces):
        pos = start + i
        if ids is None:
            name, alt = p, (lambda j, p=p: f"{p}_{j}")
        else:
            tid = ids[i]
            name, alt = f"token_id:{tid}", (lambda j, tid=tid: f"token_id:{(tid + j) & 0xFFFFFFFF}")
        tokens.append(name)
        lps.append(logprob(pos))
        d = {name: logprob(pos)}
        for j in range(1, n):
            d[alt(j)] = logprob(pos, j)
        tops.append(d)
        offsets.append(off)
        off += len(p)
    return {"tokens": tokens, "token_logprobs": lps, "top_logprobs": tops, "text_offset": offsets}


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
    for pos in range(1, n):
        tid = ids[pos]
        entry = {str(tid): {"logprob": logprob(pos), "rank": 1, "decoded_token": dec(tid)}}
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
    alternatives are the following ids."""
    tok = f"token_id:{tid}"
    return {"token": tok, "logprob": logprob(pos), "bytes": list(tok.encode()),
            "top_logprobs": [
                {"token": t, "logprob": logprob(pos, j), "bytes": list(t.encode())}
                for j, t in ((j, tok if j == 0 else f"token_id:{(tid + j) & 0xFFFFFFFF}") for j in range(top))]}
