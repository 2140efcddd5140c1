"""A small real tokenizer in a Hugging Face cache layout, built offline (tests of issue 9).

``make_hub(root)`` trains a byte-level BPE with the ``tokenizers`` library and saves it as the
snapshot of model ``org/tiny`` under ``root/hub`` (``models--org--tiny/snapshots/<rev>/``,
``refs/main``), with a ``tokenizer_config.json`` carrying a chat template (ChatML style, tools
listed), a ``config.json``, a BOS post-processor, and padding + truncation to 128 switched on
in ``tokenizer.json`` (the padded-tokenizer case: a prompt must still count its own tokens).
Point ``HF_HOME`` at ``root`` (with ``HF_HUB_OFFLINE=1``) or ``--tokenizers-cache-dir`` at
``root/hub``.
"""
from __future__ import annotations

import json
import os

MODEL = "org/tiny"
REV = "0123456789abcdef0123456789abcdef01234567"
TEMPLATE = ("{% if tools %}<|im_start|>system\nTools: {% for t in tools %}{{ t['function']['name'] }} "
            "{% endfor %}<|im_end|>\n{% endif %}"
            "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
            "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
CORPUS = ["Hello there, how are you today?", "The quick brown fox jumps over the lazy dog.",
          "Tools: get_weather system user assistant", "déjà vu, 日本語 text"]


def make_hub(root: str) -> str:
    """Write the cache under ``root``; returns the snapshot directory."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=["<unk>", "<s>", "</s>", "<pad>", "<|im_start|>",
                                                                   "<|im_end|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS * 20, trainer)
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", tok.token_to_id("<s>"))])
    tok.enable_padding(pad_id=tok.token_to_id("<pad>"), pad_token="<pad>", length=128)
    tok.enable_truncation(max_length=128)
    repo = os.path.join(root, "hub", "models--org--tiny")
    snap = os.path.join(repo, "snapshots", REV)
    os.makedirs(snap, exist_ok=True)
    os.makedirs(os.path.join(repo, "refs"), exist_ok=True)
    with open(os.path.join(repo, "refs", "main"), "w") as fh:
        fh.write(REV)
    tok.save(os.path.join(snap, "tokenizer.json"))
    with open(os.path.join(snap, "tokenizer_config.json"), "w") as fh:
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>",
                   "unk_token": "<unk>", "pad_token": "<pad>", "chat_template": TEMPLATE,
                   "model_max_length": 4096}, fh)
    with open(os.path.join(snap, "config.json"), "w") as fh:
        json.dump({"model_type": "gpt2"}, fh)
    return snap


def template_ids(ref, messages, **kw):
    """The ids of ``messages`` under the chat template, as transformers' ``ref`` tokenizer
    renders and encodes them (no special tokens added)."""
    text = ref.apply_chat_template(messages, tokenize=False, add_generation_prompt=kw.pop("add_generation_prompt", True),
                                   **kw)
    return ref(text, add_special_tokens=False)["input_ids"]


def sentence_bpe(vocab_size: int = 400, repeat: int = 5, extra=()):
    """A byte-level BPE ``tokenizers.Tokenizer`` trained offline on the simulator's sentences
    (``repeat`` times, plus ``extra`` texts): a real tokenizer for ``--tokenizer FILE`` tests."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    from generation.content.sources import SENTENCES
    tok = Tokenizer(models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["[UNK]"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(list(SENTENCES) * repeat + list(extra), trainer)
    return tok


def save_sentence_bpe(tmp_path_factory, **kw) -> tuple[str, object]:
    """:func:`sentence_bpe` saved as ``tokenizer.json`` in a fresh temporary directory:
    ``(path, tokenizer)``."""
    tok = sentence_bpe(**kw)
    path = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    tok.save(str(path))
    return str(path), tok
