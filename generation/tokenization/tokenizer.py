"""Tokenizers: the reference's simulated regex tokenizer, and a real Hugging Face one.

Every tokenizer offers the same calls (how one is chosen and loaded:
:func:`generation.tokenization.tokenizer_loading.load_tokenizer`; the render-service one:
:mod:`generation.tokenization.render_client`):

- ``encode(text) -> (ids, pieces)``: text without special tokens (generated text, echo);
- ``encode_prompt(text, add_special_tokens=True)``: a completions / ``/tokenize`` text prompt;
- ``tokenize_chat(messages, tools=None, chat_template=None, chat_template_kwargs=None,
  add_generation_prompt=True, continue_final_message=False, add_special_tokens=False)``: a chat
  conversation, through the chat template when there is one (vLLM's request fields), else the
  seeds' flattening;
- ``chat_text(messages, ...)`` (same options, no ``add_special_tokens``): the text
  ``tokenize_chat`` tokenizes (None on the render service's tokenizer, which renders remotely);
- ``decode_ids(ids)`` (``/detokenize``), ``id_pieces(ids)`` (text per id), ``token_strs(ids)``
  (``/tokenize`` ``token_strs``).

The simulated tokenizer reproduces llm-d-inference-sim (api.md 3.2): token pieces are the
leftmost-first matches of one punctuation character or a run of ASCII word characters, each
followed by the whitespace after it; anything else is dropped.  Unlike the reference, a run
is at most :data:`MAX_RUN` characters (a longer one is a piece per 64) and so is the whitespace
after it (more is dropped): a token is a few bytes in any real tokenizer, and an unbounded one
let one request's `max_tokens` carry megabytes per token (a 1 MB ``const`` in a JSON schema,
an echoed 2 MB word, times ``n``) and a 3 MB prompt count as one token.  A piece's id is the
32-bit FNV-1a hash of its UTF-8 bytes.  Chat messages are flattened to one string first
(api.md 3.3): ``"### " + role[(tool_call_id)] + ": " + content + [name(args)]... + "\\n"``.
"""
from __future__ import annotations

import re
from typing import Iterable, Sequence

from generation.config.reasoning_effort import map_effort
from generation.lanes import paced

from .chat_template import effort_kwargs, merge_kwargs
from .worker_thread import WORKER, in_worker

MAX_RUN = 64                 # characters of a word run, and of the whitespace after it, in one piece
_PIECE = re.compile(
    r'(?:\{|\}|:|,|-|\.|\?|\!|;|@|#|\$|%|\^|&|\*|\(|\)|\+|\-|_|~|/|\\|>|<|\[|\]|=|"|\'|[0-9A-Za-z_]{1,' + str(MAX_RUN) + '})'
    r'[\t\n\f\r ]{0,' + str(MAX_RUN) + '}')

_SLICE_CUT = re.compile(r"[\t\n\f\r ](?=[^\t\n\f\r ])")   # a place no piece spans

FNV32_OFFSET = 2166136261
FNV32_PRIME = 16777619


def fnv1a_32(data: bytes) -> int:
    """32-bit FNV-1a hash of ``data`` (offset basis 2166136261, prime 16777619)."""
    h = FNV32_OFFSET
    for b in data:
        h = ((h ^ b) * FNV32_PRIME) & 0xFFFFFFFF
    return h


MAX_CACHED_PIECES = 100_000     # piece -> id memo entries
MAX_CACHED_PIECE = 128          # characters (2 x MAX_RUN: every simulated piece); a longer one (a
                                # real tokenizer's text) is hashed each time, and /detokenize
                                # shows its id, as for any id it has not seen


OFFLOAD_CHARS = 8192         # texts longer than this are tokenized in a worker thread
PER_TOKEN_OFFSETS = 65536    # off the hub, longer encodings give their offsets token by token
TOKENIZE_SECONDS = 10.0      # the longest one tokenization (or chat-template rendering) may take
_POOL = None


def off_hub(fn, *args):
    """``fn(*args)`` in the tokenizer's worker thread (one: large inputs take turns), waited
    for at most :data:`TOKENIZE_SECONDS` (queueing included).  Raises InvalidParam past it (the
    thread finishes on its own; its inputs are bounded by the body size).  Called from the
    worker thread itself (a long text within a batch already there), ``fn`` runs at once."""
    global _POOL
    if in_worker():
        return fn(*args)
    import gevent
    if _POOL is None:
        from gevent.threadpool import ThreadPool
        _POOL = ThreadPool(1)
    waiting = [True]                 # cleared when nobody will read the result any more
    job = _POOL.spawn(_then_trim, fn, args, waiting)
    try:
        ok, out = job.get(timeout=TOKENIZE_SECONDS)
    except gevent.Timeout:
        waiting[0] = False
        from generation.errors import InvalidParam
        raise InvalidParam(f"The prompt could not be tokenized within {TOKENIZE_SECONDS:g} s.", "prompt") from None
    if not ok:
        raise out
    return out


def each_text(fn, texts: Sequence[str]) -> list:
    """``[fn(t) for t in texts]``, in the tokenizer's worker thread (:func:`off_hub`, one job)
    when the texts add up to more than :data:`OFFLOAD_CHARS` characters: each of 500 texts of
    8,000 characters is under the per-text threshold, but together they are 4 MB tokenized on
    the hub (issue 31, outage 2: ``/health`` waited 4.6 s)."""
    if sum(map(len, texts)) <= OFFLOAD_CHARS:
        return [fn(t) for t in texts]
    return off_hub(_each, fn, texts)


def _each(fn, texts) -> list:
    return [fn(t) for t in texts]


def _then_trim(fn, args, waiting=(True,)):
    """``(True, fn(*args))`` or ``(False, exception)``, then glibc's free memory given back
    (``malloc_trim``): the tokenizer's buffers for a megabyte-long text (~400 bytes a token)
    otherwise stay in the thread's arena (RSS +700 MB after one 3.9 MB ``/tokenize``, for
    good).  When nobody waits for the result any more (``waiting[0]`` false: :func:`off_hub`
    timed out), it is dropped before the trim, not freed after it: a timed-out 4 MB
    ``/tokenize`` kept ~850 MB until a later request's trim (issue 31 item 6)."""
    WORKER.busy = True
    out = None
    try:
        out = True, fn(*args)
        if not waiting[0]:
            out = True, None
        return out
    except Exception as e:      # noqa: BLE001 - returned, raised by off_hub on the hub (raised
        return False, e         # here, gevent's pool would print a traceback per request)
    finally:
        WORKER.busy = False
        trim = _malloc_trim()
        if trim is not None:
            trim(0)


def _malloc_trim():
    global _TRIM
    if _TRIM is None:
        try:
            import ctypes
            _TRIM = ctypes.CDLL("libc.so.6").malloc_trim
        except (OSError, AttributeError):
            _TRIM = False
    return _TRIM or None


_TRIM = None


class SimulatedTokenizer:
    """The reference simulator's regex tokenizer (api.md 3.2).

    ``encode(text)`` returns ``(ids, pieces)``: two lists of equal length; ``"".join(pieces)``
    is the text minus the characters the pattern drops.
    """
    name = "simulated"
    vocab_size = 2 ** 32        # ids are 32-bit FNV-1a hashes of the pieces

    def __init__(self) -> None:
        self._ids: dict[str, int] = {}
        self._pieces: dict[int, str] = {}     # reverse of _ids, for decode_ids

    def info(self, max_model_len: int) -> dict:
        """``GET /tokenizer_info``: what describes this tokenizer."""
        return {"tokenizer_class": "SimulatedTokenizer", "model_max_length": max_model_len,
                "vocab_size": self.vocab_size, "chat_template": None}

    def piece_id(self, piece: str) -> int:
        i = self._ids.get(piece)
        if i is None:
            i = fnv1a_32(piece.encode("utf-8"))
            # bounded in entries and bytes (at most ~20 MB): hostile 1 MiB "words" are not kept
            if len(piece) <= MAX_CACHED_PIECE and len(self._ids) < MAX_CACHED_PIECES:
                self._ids[piece] = i
                self._pieces.setdefault(i, piece)
        return i

    def pieces(self, text: str) -> list[str]:
        if len(text) <= OFFLOAD_CHARS:
            return _PIECE.findall(text)      # no group in the pattern: whole matches, in C
        # One findall over megabytes holds the GIL for a third of a second: in slices that
        # start where a piece must start (after whitespace, at a non-space), the same pieces.
        out: list[str] = []
        start, n = 0, len(text)
        while start < n:
            cut = start + OFFLOAD_CHARS
            if cut < n:
                m = _SLICE_CUT.search(text, cut)
                cut = m.end() if m else n
            out += _PIECE.findall(text, start, cut)
            start = cut
        return out

    def encode(self, text: str) -> tuple[list[int], list[str]]:
        """Ids and pieces; a text over :data:`OFFLOAD_CHARS` characters in the tokenizer's
        worker thread (4 MB took 0.9 s of pure Python; from a thread the hub keeps its turns)."""
        if len(text) > OFFLOAD_CHARS:
            return off_hub(self._encode_here, text)
        return self._encode_here(text)

    def _encode_here(self, text: str) -> tuple[list[int], list[str]]:
        pcs = self.pieces(text)
        ids = list(map(self._ids.get, pcs))      # known pieces in C; the rest as piece_id, in order
        if None in ids:
            pid = self.piece_id
            ids = [pid(p) if i is None else i for i, p in zip(ids, pcs)]
        return ids, pcs

    def encode_lossless(self, text: str) -> tuple[list[int], list[str]]:
        """Like :meth:`encode`, but characters the pattern drops stay attached to the piece
        before them (or the first piece), so ``"".join(pieces) == text``.  Echo mode uses
        this to return the prompt unmodified, as the seeds require."""
        if len(text) > OFFLOAD_CHARS:
            return off_hub(self._lossless_here, text)
        return self._lossless_here(text)

    def _lossless_here(self, text: str) -> tuple[list[int], list[str]]:
        starts = [m.start() for m in _PIECE.finditer(text)]
        if not starts:
            return ([], []) if not text else ([self.piece_id(text)], [text])
        starts[0] = 0
        starts.append(len(text))
        pieces = [text[starts[k]:starts[k + 1]] for k in range(len(starts) - 1)]
        return [self.piece_id(p) for p in pieces], pieces

    def encode_prompt(self, text: str, add_special_tokens: bool = True) -> tuple[list[int], list[str]]:
        """A text prompt (no special tokens exist in this vocabulary)."""
        return self.encode(text)

    def tokenize_chat(self, messages, tools=None, chat_template=None, chat_template_kwargs=None,
                      add_generation_prompt=True, continue_final_message=False,
                      add_special_tokens=False) -> tuple[list[int], list[str]]:
        """The ids and pieces of :meth:`chat_text`."""
        return self.encode(self.chat_text(messages, tools, chat_template, chat_template_kwargs,
                                          add_generation_prompt, continue_final_message))

    def chat_text(self, messages, tools=None, chat_template=None, chat_template_kwargs=None,
                  add_generation_prompt=True, continue_final_message=False) -> str:
        """The text a conversation is tokenized as: the seeds' flattening (api.md 3.3), unless
        the request sent a ``chat_template`` (allowed by ``--trust-request-chat-template``): the
        simulated tokenizer ships no template of its own, so the request's is rendered (with its
        bounds)."""
        if chat_template is None:
            return flatten_messages(messages)
        from .chat_template import render_chat
        return render_chat(None, messages, tools, chat_template, chat_template_kwargs,
                           add_generation_prompt, continue_final_message, from_request=True)

    def token_strs(self, ids: Sequence[int]) -> list[str]:
        return [self._pieces.get(i, str(i)) for i in ids]

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
    """A real Hugging Face tokenizer (built by :func:`generation.tokenization.tokenizer_loading.load_tokenizer`).

    ``backend`` is a ``tokenizers.Tokenizer`` (fast path: ids, offsets); ``hf`` the transformers
    tokenizer wrapping it (chat templates, slow tokenizers) or None for a bare tokenizer.json.
    Padding and truncation configured in the file are switched off: a prompt counts its own
    tokens (a tokenizer.json with ``padding`` would count every prompt as its pad length).
    Pieces are cut from the text at the tokens' offsets, so they join back to the exact text
    (a multi-byte character split over byte-level tokens sits whole in the last one)."""
    name = "hf"

    def info(self, max_model_len: int) -> dict:
        """``GET /tokenizer_info`` as vLLM's ``TokenizerInfo``: the transformers tokenizer's
        ``init_kwargs`` (values that are not JSON become strings), ``tokenizer_class`` and the
        chat template in use."""
        import json as _json
        raw = dict(getattr(self._tok, "init_kwargs", None) or {})
        raw.pop("tokenizer_object", None)
        out = _json.loads(_json.dumps(raw, default=str))
        out["tokenizer_class"] = type(self._tok).__name__ if self._tok is not None else "PreTrainedTokenizerFast"
        out["vocab_size"] = self.vocab_size
        template = self.chat_template or getattr(self._tok, "chat_template", None)
        if template is not None:
            out["chat_template"] = template
        return out

    def __init__(self, backend, hf=None, chat_template: str | None = None) -> None:
        self._fast = backend
        self._tok = hf
        self.chat_template = chat_template      # --chat-template (overrides the tokenizer's)
        if backend is not None:
            backend.no_padding()
            backend.no_truncation()

    @property
    def vocab_size(self) -> int:
        """Tokens in the vocabulary, added tokens included (what ``logprobs: -1`` asks for)."""
        if self._fast is not None:
            return self._fast.get_vocab_size(with_added_tokens=True)
        return len(self._tok)

    @property
    def max_token_chars(self) -> int:
        """An upper bound on the characters one token stands for: the longest vocabulary
        string (byte-level vocabularies spell a byte per character, so this is at least the
        decoded length).  Computed once."""
        got = self.__dict__.get("_max_token_chars")
        if got is None:
            vocab = self._fast.get_vocab(with_added_tokens=True) if self._fast is not None else self._tok.get_vocab()
            got = self.__dict__["_max_token_chars"] = max((len(t) for t in vocab), default=1) or 1
        return got

    def _encode(self, text: str, add_special_tokens: bool) -> tuple[list[int], list[str]]:
        """Ids and pieces of ``text``; a text over :data:`OFFLOAD_CHARS` characters is
        tokenized in a worker thread (``encode_batch`` releases the GIL; a 4 MB prompt held the
        hub 5-6 s), within :data:`TOKENIZE_SECONDS` (InvalidParam past it)."""
        if len(text) <= OFFLOAD_CHARS:
            return self._encode_here(text, add_special_tokens)
        return off_hub(self._encode_here, text, add_special_tokens, True)

    def _encode_here(self, text: str, add_special_tokens: bool, batch: bool = False) -> tuple[list[int], list[str]]:
        if self._fast is None:
            ids = self._tok.encode(text, add_special_tokens=add_special_tokens)
            return ids, self.id_pieces(ids)
        if batch:       # the batch call releases the GIL (the single one does not)
            enc = self._fast.encode_batch([text], add_special_tokens=add_special_tokens)[0]
        else:
            enc = self._fast.encode(text, add_special_tokens=add_special_tokens)
        ids = list(enc.ids)
        if not ids:
            return [], []
        if batch and len(ids) > PER_TOKEN_OFFSETS:
            # enc.offsets builds every tuple in one call that holds the GIL (0.65 s for 1.7 M
            # tokens, the hub stopped meanwhile); token by token, the GIL changes hands
            to_chars = enc.token_to_chars
            starts = [(c[0] if c else 0) for c in map(to_chars, range(len(ids)))]
        else:
            starts = [o[0] for o in enc.offsets]
        starts[0] = 0
        for k in range(1, len(starts)):              # offsets may repeat for byte-level pieces
            starts[k] = max(starts[k], starts[k - 1])
        starts.append(len(text))
        return ids, [text[starts[k]:starts[k + 1]] for k in range(len(ids))]

    def encode(self, text: str) -> tuple[list[int], list[str]]:
        """Ids and pieces of ``text`` without special tokens (generated text, echo)."""
        return self._encode(text, False)

    def encode_prompt(self, text: str, add_special_tokens: bool = True) -> tuple[list[int], list[str]]:
        """A text prompt as vLLM tokenizes it (completions, ``/tokenize``: special tokens such
        as BOS added by default)."""
        return self._encode(text, add_special_tokens)

    def tokenize_chat(self, messages, tools=None, chat_template=None, chat_template_kwargs=None,
                      add_generation_prompt=True, continue_final_message=False,
                      add_special_tokens=False, max_chars=None, max_model_len=0) -> tuple[list[int], list[str]]:
        """See :func:`tokenize_chat`: :meth:`chat_text` tokenized."""
        return self._encode(self.chat_text(messages, tools, chat_template, chat_template_kwargs, add_generation_prompt,
                                           continue_final_message, max_chars, max_model_len), add_special_tokens)

    def chat_text(self, messages, tools=None, chat_template=None, chat_template_kwargs=None,
                  add_generation_prompt=True, continue_final_message=False, max_chars=None,
                  max_model_len=0) -> str:
        """The text a conversation is tokenized as: rendered through the chat template (the
        request's, else ``--chat-template``, else the tokenizer's own), or without any the seeds'
        flattening.  ``max_chars`` / ``max_model_len``: the rendered text's bound (see
        :func:`generation.tokenization.chat_template.render_chat`)."""
        template = chat_template or self.chat_template
        if not (template or getattr(self._tok, "chat_template", None)):
            return flatten_messages(messages)
        from .chat_template import render_chat
        return render_chat(self._tok, messages, tools, template, chat_template_kwargs,
                           add_generation_prompt, continue_final_message, from_request=chat_template is not None,
                           max_chars=max_chars, max_model_len=max_model_len)

    def pieces(self, text: str) -> list[str]:
        return self.encode(text)[1]

    def encode_lossless(self, text: str) -> tuple[list[int], list[str]]:
        return self.encode(text)

    def piece_id(self, piece: str) -> int:
        ids = self.encode(piece)[0]
        return ids[0] if ids else 0

    def decode(self, ids: Sequence[int]) -> str:
        if self._fast is not None:
            return self._fast.decode(list(ids), skip_special_tokens=False)
        return self._tok.decode(list(ids), skip_special_tokens=False)

    def decode_ids(self, ids: Sequence[int]) -> str:
        """Text of ``ids`` (vLLM ``/detokenize``: special tokens kept)."""
        return self.decode(ids)

    def token_strs(self, ids: Sequence[int]) -> list[str]:
        """vLLM ``/tokenize`` ``token_strs``: the vocabulary strings (``convert_ids_to_tokens``)."""
        if self._fast is not None:
            return [self._fast.id_to_token(i) or "" for i in ids]
        return list(self._tok.convert_ids_to_tokens(list(ids)))

    def id_pieces(self, ids: Sequence[int]) -> list[str]:
        """Text of each id, incrementally decoded as vLLM's detokenizer does: a token that ends
        inside a multi-byte character gives "" and the character comes with the token that
        completes it, so the pieces join to ``decode(ids)``."""
        out: list[str] = []
        ids = list(ids)
        prefix = read = 0
        for k in range(len(ids)):
            before = self.decode(ids[prefix:read]) if read > prefix else ""
            now = self.decode(ids[prefix:k + 1])
            if len(now) > len(before) and not now.endswith("\ufffd"):
                out.append(now[len(before):])
                prefix, read = read, k + 1
            else:
                out.append("")
        if out and len(ids):
            tail = self.decode(ids[prefix:])[len(self.decode(ids[prefix:read])) if read > prefix else 0:]
            if tail and not out[-1]:
                out[-1] = tail                         # undecodable tail: keep the replacement char
        return out


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
    for block in paced(content):      # a message's parts: 115,000 in 3 MB
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
    return "".join("### " + plain_message(m, True) + "\n" for m in paced(messages))


def check_generation_prompt(continue_final_message, add_generation_prompt) -> None:
    """vLLM's ``check_generation_prompt`` (a request validator of every chat-shaped request):
    not both options true.  Raises InvalidParam naming ``continue_final_message``."""
    if continue_final_message and add_generation_prompt:
        from generation.errors import InvalidParam
        raise InvalidParam("Cannot set both `continue_final_message` and `add_generation_prompt` to True.",
                           "continue_final_message")


def tokenize_chat(tokenizer, messages, tools=None, chat_template=None, chat_template_kwargs=None,
                  add_generation_prompt=True, continue_final_message=False,
                  add_special_tokens=False, max_chars=None, max_model_len=0) -> tuple[list[int], list[str]]:
    """The prompt ids and pieces of a chat conversation: the one call the serving layer makes
    for chat, Anthropic Messages and Responses prompts, ``/tokenize`` with ``messages`` and the
    chat render endpoint, so usage, KV block hashes and render output agree.

    With a chat template (request ``chat_template``, else ``--chat-template``, else the
    tokenizer's own) the conversation is rendered with transformers' ``apply_chat_template``
    (``tools`` passed, ``chat_template_kwargs`` merged) and the text tokenized with
    ``add_special_tokens`` (vLLM's defaults: False for chat).  Without one, the seeds' flattening
    (api.md 3.3).  Raises a 400 for options vLLM rejects
    (``add_generation_prompt`` with ``continue_final_message``, a template that fails to
    render: :class:`generation.errors.InvalidParam`; a rendered text past ``max_chars``, only
    given with a real tokenizer: ContextLengthError), 5xx when the render service fails
    (``--render-url``: :class:`generation.errors.APIError` 502 / 504)."""
    check_generation_prompt(continue_final_message, add_generation_prompt)
    bound = {"max_chars": max_chars, "max_model_len": max_model_len} if max_chars is not None else {}
    return tokenizer.tokenize_chat(messages, tools=tools, chat_template=chat_template,
                                   chat_template_kwargs=chat_template_kwargs,
                                   add_generation_prompt=add_generation_prompt,
                                   continue_final_message=continue_final_message,
                                   add_special_tokens=add_special_tokens, **bound)


def approximate_pieces(text: str, n: int) -> list[str]:
    """``n`` strings standing for ``n`` ids whose text is ``text`` when only the ids are known
    (render service): the simulated regex split, padded with "" or with its tail merged into
    the last piece (api.md 3.1)."""
    pieces = _PIECE.findall(text)
    if len(pieces) <= n:
        return pieces + [""] * (n - len(pieces))
    if n == 0:
        return []
    return pieces[:n - 1] + ["".join(pieces[n - 1:])]


# transformers' render_jinja_template, which vLLM's chat renderer answers as a 400 in its words
CONTINUE_WITH_GENERATION_PROMPT = (
    "continue_final_message and add_generation_prompt are not compatible. Use continue_final_message when you "
    "want the model to continue the final message, and add_generation_prompt when you want to add a header that "
    "will prompt it to start a new assistant message instead.")


def chat_options(body, default_kwargs: dict | None = None, effort: bool = False, effort_map=None) -> dict:
    """The :func:`tokenize_chat` keyword arguments carried by a request object (chat, chat
    render, ``/tokenize``): ``tools``, ``chat_template``, ``chat_template_kwargs`` (the
    request's over ``default_kwargs``, --default-chat-template-kwargs where vLLM applies it, as
    :func:`~generation.tokenization.chat_template.merge_kwargs`; with ``effort``, the body's
    ``reasoning_effort`` laid over them first, :func:`~generation.tokenization.chat_template.
    effort_kwargs`, as vLLM's chat ``build_chat_params``, rewritten by ``effort_map``
    (``--reasoning-effort-map``, its ``map_reasoning_effort``); ``/tokenize``'s has none),
    ``add_generation_prompt`` (default True), ``continue_final_message`` and
    ``add_special_tokens`` (default False), as vLLM's ChatCompletionRequest.  Absent
    attributes take the defaults.  ``continue_final_message`` with the default
    ``add_generation_prompt`` raises InvalidParam with transformers' message (vLLM 0.34 leaves
    the pair to the chat template; both given true is its own message, :func:`tokenize_chat`)."""
    def get(name, default=None):
        v = getattr(body, name, None)
        return default if v is None else v
    if get("continue_final_message") and getattr(body, "add_generation_prompt", None) is None:
        # vLLM's request check sees only an add_generation_prompt the body gives; its default
        # (True) reaches the chat template, where transformers refuses the pair in its words
        from generation.errors import InvalidParam
        raise InvalidParam(CONTINUE_WITH_GENERATION_PROMPT, "continue_final_message")
    return {"tools": get("tools"), "chat_template": get("chat_template"),
            "chat_template_kwargs": merge_kwargs(default_kwargs, effort_kwargs(get("chat_template_kwargs"),
                                                                            map_effort(get("reasoning_effort"), effort_map))
                                                 if effort else get("chat_template_kwargs")),
            "add_generation_prompt": get("add_generation_prompt", True),
            "continue_final_message": get("continue_final_message", False),
            "add_special_tokens": get("add_special_tokens", False)}
