"""The simulated tokenizer written as a Hugging Face tokenizer folder, for load generators
(guidellm, aiperf, ``vllm bench serve``) that need a tokenizer and have none offline.

``python -m data.tokenizer_export DIR`` (or ``vllm-sim export-tokenizer DIR``) writes what
transformers' ``save_pretrained`` writes (``tokenizer.json``, ``tokenizer_config.json``, the
chat template), which ``AutoTokenizer.from_pretrained(DIR)`` loads (the tools'
``--tokenizer DIR``):

* the pre-tokenizer keeps exactly the simulated tokenizer's pieces (its regex: one punctuation
  character or a run of ASCII word characters, each with the whitespace after it; anything
  else is dropped), so any text counts as many tokens as the server counts, and the decoder
  joins pieces as they are;
* the vocabulary is the pieces of the random-mode sentences and of a list of common English
  words, each word with a trailing space, and every punctuation character with and without
  one, with dense ids ``0..N-1`` (``unk `` is ``N``): a sequence of random ids (``vllm bench
  serve --dataset-name random`` samples them) decodes to text the server splits into the same
  tokens.  The ids are not the server's (FNV-1a hashes, which no enumerable vocabulary can
  hold): counts agree, ids do not; a piece outside the vocabulary is :data:`UNK`, ``unk `` (id
  ``N``), a plain word and no special token: one token that decodes to one piece the server
  counts as one, so a load generator that builds a prompt of N tokens from a corpus and
  decodes it (guidellm's synthetic text, with ``skip_special_tokens``) sends N tokens; with
  ``<unk>``, a special token, its prompts lost every word outside the vocabulary;
* the chat template is the simulator's flattening (``### role: content`` lines), for string
  contents.
"""
from __future__ import annotations

import argparse
import os
import sys

from generation.content.sources import SENTENCES
from generation.tokenization.tokenizer import _PIECE

UNK = "unk "          # an unknown piece: a word, one token as the server counts it, not special
PUNCTUATION = "{}:,-.?!;@#$%^&*()+_~/\\><[]=\"'"
COMMON_WORDS = (
    "the of and to a in is it you that he was for on are with as his they be at one have this from "
    "or had by hot word but what some we can out other were all there when up use your how said an "
    "each she which do their time if will way about many then them write would like so these her long "
    "make thing see him two has look more day could go come did number sound no most people my over "
    "know water than call first who may down side been now find any new work part take get place made "
    "live where after back little only round man year came show every good me give our under name very "
    "through just form sentence great think say help low line differ turn cause much mean before move "
    "right boy old too same tell does set three want air well also play small end put home read hand "
    "port large spell add even land here must big high such follow act why ask men change went light "
    "kind off need house picture try us again animal point mother world near build self earth father "
    "model server token request answer question test data value simulator latency"
).split()
# The simulator's flattening (generation.tokenization.tokenizer.flatten_messages) for string contents.
CHAT_TEMPLATE = "{% for message in messages %}### {{ message['role'] }}: {{ message['content'] }}\n{% endfor %}"


def vocabulary(bare_words: bool = False) -> dict[str, int]:
    """Piece -> dense id: sentence and common-word pieces (words with a trailing space, so that
    any sequence of them splits back into the same pieces), punctuation with and without one.
    ``bare_words``: each word without the space too (after all the others, so the other ids do
    not move): the random-mode answers (``assistant,``) then encode and decode exactly, but a
    random sequence of ids may decode to text the server splits differently (``todaythe``)."""
    pieces: dict[str, None] = {}
    words = [p.strip() for s in SENTENCES for p in _PIECE.findall(s)] + list(COMMON_WORDS)
    for w in words:
        if w and w[0] not in PUNCTUATION:
            pieces[w + " "] = None
    for p in PUNCTUATION:
        pieces[p] = None
        pieces[p + " "] = None
    for d in range(10):
        pieces[f"{d} "] = None
    if bare_words:
        for w in words:
            if w and w[0] not in PUNCTUATION:
                pieces[w] = None
    return {p: i for i, p in enumerate(pieces)}


def build(max_model_len: int = 1024, bare_words: bool = False):
    """The ``transformers.PreTrainedTokenizerFast`` of the simulated tokenizer."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    vocab = vocabulary(bare_words)
    vocab.setdefault(UNK, len(vocab))
    tok = Tokenizer(models.WordLevel(vocab, unk_token=UNK))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(_PIECE.pattern), behavior="removed", invert=True)
    tok.decoder = decoders.Fuse()
    # no unk_token here: transformers would make it special, and decoding would drop it
    return PreTrainedTokenizerFast(tokenizer_object=tok, model_max_length=max_model_len,
                                   clean_up_tokenization_spaces=False, chat_template=CHAT_TEMPLATE)


def write_tokenizer(directory: str, max_model_len: int = 1024, bare_words: bool = False) -> list[str]:
    """Write the folder (created if needed); returns the files written."""
    os.makedirs(directory, exist_ok=True)
    return [os.path.basename(f) for f in build(max_model_len, bare_words).save_pretrained(directory)]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="vllm-sim export-tokenizer",
                                description="Write the simulated tokenizer as a Hugging Face tokenizer folder "
                                            "(for guidellm, aiperf, vllm bench serve --tokenizer DIR).")
    p.add_argument("directory")
    p.add_argument("--max-model-len", type=int, default=1024, help="model_max_length (default 1024)")
    p.add_argument("--bare-words", action="store_true",
                   help="also each word without its trailing space: the server's answers (\"assistant,\") decode "
                        "exactly, but random ids may decode to text it splits differently")
    args = p.parse_args(argv)
    files = write_tokenizer(args.directory, args.max_model_len, args.bare_words)
    print(f"wrote {', '.join(sorted(files))} to {args.directory}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
