"""Random-mode response length and text (the user's seeds, "Response Generation Logic").

Length: with a max-tokens cap ``M`` the length comes from a six-bucket histogram
(probabilities 20/30/20/5/10/15 %); buckets are equal over ``1..M`` when ``M <= 120``,
otherwise buckets 1, 2, 3, 5, 6 are 20 tokens wide and bucket 4 takes the rest.  Without a
cap the length is Normal(40, 20) clipped by rejection into ``1..L`` (``L`` = room left in the
context window), or uniform in ``1..L`` when ``L < 20``.

Text: whole predefined sentences picked at random, the last one cut at token granularity.
"""
from __future__ import annotations

import random

SENTENCES = (
    "Testing@, #testing 1$ ,2%,3^, [4&*5], 6~, 7-_ + (8 : 9) / \\ < > . ",
    "Testing, testing 1,2,3. ",
    "I am fine, how are you today? ",
    "I am your AI assistant, how can I help you today? ",
    "Today is a nice sunny day. ",
    "The temperature here is twenty-five degrees centigrade. ",
    "Today it is partially cloudy and raining. ",
    "To be or not to be that is the question. ",
    "Alas, poor Yorick! I knew him, Horatio: A fellow of infinite jest ",
    "The rest is silence. ",
    "Give a man a fish and you feed him for a day; teach a man to fish and you feed him for a lifetime ",
)

BUCKET_PROBABILITIES = (0.20, 0.30, 0.20, 0.05, 0.10, 0.15)
_CUMULATIVE = tuple(sum(BUCKET_PROBABILITIES[:i + 1]) for i in range(6))
SMALL_REQUEST_LIMIT = 120
FIXED_BUCKET_WIDTH = 20


def bucket_ranges(max_tokens: int) -> list[tuple[int, int]]:
    """The six inclusive ``(start, end)`` token ranges for a cap of ``max_tokens`` (>= 1).

    ``bucket_ranges(60)`` -> 1-10, 11-20, ..., 51-60; ``bucket_ranges(200)`` -> 1-20, 21-40,
    41-60, 61-160, 161-180, 181-200.  A range with ``start > end`` is empty (tiny caps)."""
    m = max_tokens
    if m <= SMALL_REQUEST_LIMIT:
        return [(b * m // 6 + 1, (b + 1) * m // 6) for b in range(6)]
    w = FIXED_BUCKET_WIDTH
    return [(1, w), (w + 1, 2 * w), (2 * w + 1, 3 * w), (3 * w + 1, m - 2 * w),
            (m - 2 * w + 1, m - w), (m - w + 1, m)]


_RANGES: dict = {}          # max_tokens -> bucket_ranges(max_tokens): a request's cap is one of few values


def sample_capped_length(rng: random.Random, max_tokens: int) -> int:
    """Response length for a request with a cap of ``max_tokens`` tokens (>= 1)."""
    if max_tokens <= 1:
        return 1
    ranges = _RANGES.get(max_tokens)
    if ranges is None:
        if len(_RANGES) >= 4096:
            _RANGES.clear()
        ranges = _RANGES[max_tokens] = tuple(bucket_ranges(max_tokens))
    while True:
        r = rng.random()
        b = 0
        while b < 5 and r >= _CUMULATIVE[b]:
            b += 1
        start, end = ranges[b]
        if start <= end:   # empty buckets (caps below 6) are redrawn
            return rng.randint(start, end)


def sample_default_length(rng: random.Random, room: int) -> int:
    """Response length when the request gives no cap; ``room`` = max-model-len - prompt."""
    if room <= 1:
        return 1
    if room < 20:
        return rng.randint(1, room)
    while True:
        v = rng.gauss(40.0, 20.0)
        if 1 <= v <= room:
            n = int(v + 0.5)       # round half away from zero (v is positive)
            return min(max(n, 1), room)


class SentenceSource:
    """Builds random-mode text from the predefined sentences (or ``sentences``), token by token."""

    def __init__(self, tokenizer, sentences=SENTENCES) -> None:
        self.tokenizer = tokenizer
        self.sentences = []
        for s in sentences:
            ids, pieces = tokenizer.encode(s)
            self.sentences.append((pieces, ids))

    def generate(self, rng: random.Random, n_tokens: int) -> tuple[list[str], list[int]]:
        """Exactly ``n_tokens`` pieces (and their ids): whole sentences plus a prefix of one."""
        pieces: list[str] = []
        ids: list[int] = []
        sentences = self.sentences
        k = len(sentences)
        while len(pieces) < n_tokens:
            sp, si = sentences[int(rng.random() * k)]
            need = n_tokens - len(pieces)
            if len(sp) <= need:
                pieces.extend(sp)
                ids.extend(si)
            else:
                pieces.extend(sp[:need])
                ids.extend(si[:need])
        return pieces, ids


class EchoResponses:
    """``--mode echo`` (seeds): the answer is the prompt itself, untrimmed; finish_reason
    ``length`` when it fills max_tokens, else ``stop``."""

    def respond(self, rng: random.Random, prompt, max_tokens: int | None, room: int,
                ignore_eos: bool) -> tuple[list, list, str]:
        pieces, ids = list(prompt.echo_pieces or ()), list(prompt.echo_ids or ())
        return pieces, ids, "length" if (max_tokens is not None and len(pieces) >= max_tokens) else "stop"


class EncoderOnlyResponses:
    """``--mm-encoder-only`` (api.md 3.7): the single token for ``!`` repeated ``max_tokens``
    times (once without a cap), finish_reason ``length``: an encoder-only instance produces
    the multimodal embeddings, not text.  ``tokenizer``: anything with ``encode(text) -> (ids,
    pieces)``."""

    def __init__(self, tokenizer) -> None:
        ids, pieces = tokenizer.encode("!")
        self.token_id = ids[0] if ids else 0
        self.piece = "!"

    def respond(self, rng: random.Random, prompt, max_tokens: int | None, room: int,
                ignore_eos: bool) -> tuple[list, list, str]:
        n = 1 if max_tokens is None else max_tokens
        return [self.piece] * n, [self.token_id] * n, "length"


NATURAL_FLOOR = 20      # tokens: the shortest answer --response-length natural gives before a cap


def natural_length(rng: random.Random, room: int) -> int:
    """``--response-length natural``: the length an answer has on its own, as an uncapped
    answer's (Normal(40, 20) within ``room`` tokens, :func:`sample_default_length`) but at
    least :data:`NATURAL_FLOOR` tokens, as a small instruct model seldom ends sooner: a cap
    below it is always reached (``length``), a larger one usually not (``stop``)."""
    return max(sample_default_length(rng, room), min(NATURAL_FLOOR, room))


class RandomResponses:
    """``--mode random`` (seeds): predefined sentences, their length drawn from the seeds'
    histogram when the request caps it (``ignore_eos``: exactly the cap) or from Normal(40, 20)
    within ``room`` (tokens left in the context window) when it does not."""

    natural_length = staticmethod(natural_length)

    def __init__(self, sentences: SentenceSource) -> None:
        self.sentences = sentences

    def respond(self, rng: random.Random, prompt, max_tokens: int | None, room: int,
                ignore_eos: bool) -> tuple[list, list, str]:
        cap = room if max_tokens is None else min(max_tokens, room)
        if max_tokens is not None:
            n = cap if ignore_eos else sample_capped_length(rng, cap)
        else:
            n = sample_default_length(rng, room)
        pieces, ids = self.sentences.generate(rng, n)
        return pieces, ids, "length" if n >= cap else "stop"


class RecordedResponses:
    """Random mode with ``--dataset-path``: a recorded answer from ``dataset`` (an object with
    the :meth:`data.dataset.SQLiteDataset.pick` method), else ``fallback``'s (an empty or
    unreadable dataset)."""

    natural_length = staticmethod(natural_length)

    def __init__(self, dataset, fallback: RandomResponses) -> None:
        self.dataset = dataset
        self.fallback = fallback

    def respond(self, rng: random.Random, prompt, max_tokens: int | None, room: int,
                ignore_eos: bool) -> tuple[list, list, str]:
        cap = room if max_tokens is None else min(max_tokens, room)
        picked = self.dataset.pick(rng, prompt.ids, cap, ignore_eos)
        return picked if picked is not None else self.fallback.respond(rng, prompt, max_tokens, room, ignore_eos)
