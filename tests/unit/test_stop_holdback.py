"""A streamed answer with stop strings holds its text back as vLLM 0.34's detokenizer does
(Sequence.cut_at_stop / cut_at_token then Sequence.hold_back), checked against a port of
``BaseIncrementalDetokenizer.update`` / ``get_next_output_text`` and ``check_stop_strings``
(``vllm/v1/engine/detokenizer.py``) fed one token per step."""
from __future__ import annotations

import random
import sys

import pytest

from generation.engine.outputs import stop_buffer_length
from generation.engine.request import GenerationRequest, Prompt, Sequence


def check_stop_strings(output_text, new_char_count, stop, include_in_output):
    """detokenizer.py ``check_stop_strings``, as vLLM 0.34 has it."""
    if not new_char_count or not stop:
        return None
    best, best_index, best_end = None, 0, sys.maxsize
    for s in stop:
        i = output_text.find(s, 1 - new_char_count - len(s))
        if i == -1:
            continue
        if i + len(s) < best_end:
            best, best_index, best_end = s, i, i + len(s)
    if best is None:
        return None
    if include_in_output:
        return (best, -1) if best_end >= len(output_text) else (best, best_end)
    return best, best_index


def vllm_deltas(texts, stop, include=False, min_tokens=0, stop_ids=(), ids=None):
    """The delta text of each streamed output, one token a step: ``update`` then
    ``get_next_output_text(finished, delta=True)``; ends at a stop string or stop token."""
    buffer = max(len(s) for s in stop) - 1 if stop and not include else 0
    out, offset, text = [], 0, ""
    for k, piece in enumerate(texts):
        terminated = ids is not None and ids[k] in stop_ids and k + 1 >= min_tokens
        before = len(text)
        if not (terminated and not include):
            text += piece
        found = None
        if stop and k + 1 > min_tokens:
            check_from = before if k + 1 > min_tokens else len(text)
            found = check_stop_strings(text, len(text) - check_from, stop, include)
            if found is not None and found[1] != -1:
                text = text[:found[1]]
        finished = found is not None or terminated or k == len(texts) - 1
        length = len(text) - (0 if finished else buffer)
        if offset < length:
            out.append(text[offset:length])
            offset = length
        else:
            out.append("")
        if finished:
            return out, (found[0] if found else None)
    return out, None


def simulated(texts, stop, include=False, min_tokens=0, stop_ids=(), ids=None):
    req = GenerationRequest(request_id="r", model="m", stream=True, stop=stop)
    seq = Sequence(req, 0, 0, Prompt(ids=[1]))
    seq.pieces, seq.ids = list(texts), list(ids or range(len(texts)))
    if stop_ids:
        seq.cut_at_token(stop_ids, include, min_tokens)
    if stop:
        seq.cut_at_stop(stop, include, min_tokens)
    if stop and not include:
        seq.hold_back(stop_buffer_length(stop))
    return seq


WORDS = ["a", "b", "ab", "ba", "abc", " ", "c", "aa", "cab", "bca", "x"]


@pytest.mark.parametrize("seed", range(300))
def test_the_deltas_are_vllm_detokenizers(seed):
    rng = random.Random(seed)
    texts = [rng.choice(WORDS) for _ in range(rng.randint(1, 12))]
    stop = [rng.choice(["ab", "abc", "ca", "bb", "cc", "a", "xab", "b a", "cabca"]) for _ in range(rng.randint(1, 3))]
    include = rng.random() < 0.3
    min_tokens = rng.choice([0, 0, 1, 3])
    ids = [rng.randrange(5) for _ in texts]
    stop_ids = [rng.randrange(5)] if rng.random() < 0.3 else []
    want, reason = vllm_deltas(texts, stop, include, min_tokens, stop_ids, ids)
    seq = simulated(texts, stop, include, min_tokens, stop_ids, ids)
    assert seq.pieces == want, (texts, stop, include, min_tokens)
    assert len(seq.ids) == len(want)
    if reason is not None:
        assert seq.stop_reason == reason
    # each token keeps its own text in its logprobs entry
    assert seq.logprob_pieces() == texts[:len(want)]


def test_held_back_text_comes_out_at_the_end():
    seq = simulated(["one ", "two ", "three ", "four ", "five"], ["xx four"])
    assert seq.pieces == ["", "on", "e two ", "three", " four five"]
    assert seq.output_text() == "one two three four five"
    assert seq.logprob_pieces() == ["one ", "two ", "three ", "four ", "five"]


def test_no_stop_strings_or_include_keeps_the_pieces():
    assert simulated(["one ", "two"], None).pieces == ["one ", "two"]
    assert simulated(["one ", "two ", "three"], [" three"], include=True).pieces == ["one ", "two ", "three"]


def test_an_abort_flushes_what_was_held_back():
    """vLLM's abort output is a final one: get_next_output_text(finished=True) returns the text
    held back, and the answer is the tokens' own text (no stop string was completed)."""
    seq = simulated(["one ", "two ", "three ", "four ", "five"], ["xx four"])
    seq.end_with_abort(3)
    assert seq.flushed == "three "
    assert seq.pieces == ["", "on", "e two three "]
    assert seq.output_text() == "one two three " and seq.finish_reason == "abort"
    # cut before a stop string it had begun: the text is the tokens' own
    seq = simulated(["xa", "b", "c", "d"], ["abc"])
    assert seq.output_text() == "x" and seq.stop_reason == "abc"
    seq.end_with_abort(2)
    assert seq.output_text() == "xab" and seq.flushed == "ab"
