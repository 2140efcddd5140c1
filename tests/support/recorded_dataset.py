"""The recorded dataset both dataset tiers use: prompts and the answers stored for them
(token counts with the simulated tokenizer, the server's default), written with
``data.dataset.build_dataset``.  The ``db_path`` fixture (tests/conftest.py) builds it once per
test module."""
from __future__ import annotations

from data.dataset import build_dataset
from generation.tokenization.tokenizer import SimulatedTokenizer

MODEL = "test-model"

GREETING = "Hello world!"
GREETING_ANSWER = "Hello! I am a recorded answer, replayed from the dataset."       # 13 tokens
FRANCE = [{"role": "user", "content": "What is the capital of France?"}]
FRANCE_ANSWER = "The capital of France is Paris."                                  # 7 tokens
ACCENTS = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say something accented"}]
ACCENTS_ANSWER = "Héllo wörld — ünïcode survives."                                  # 8 tokens
IDS_PROMPT = [1, 2, 3]
IDS_ANSWER = "Token ids in, recorded text out."                                    # 8 tokens
STORY = "Tell me a story"
STORY_SHORT = "Once upon a time."                                                  # 5 tokens
STORY_LONG = "Once upon a time there was a simulator that answered every request on time."  # 15
FILLERS = ["No.", "Yes, indeed.", "Maybe later, friend."]                          # 2, 4, 5 tokens

PAIRS = [(GREETING, GREETING_ANSWER), (FRANCE, FRANCE_ANSWER), (ACCENTS, ACCENTS_ANSWER),
         (IDS_PROMPT, IDS_ANSWER), (STORY, STORY_SHORT), (STORY, STORY_LONG)] + \
        [(f"filler prompt {i}", text) for i, text in enumerate(FILLERS)]
ANSWERS = sorted({a for _, a in PAIRS})

TOK = SimulatedTokenizer()


def pieces(text: str) -> list:
    return TOK.encode_lossless(text)[1]


def build(path) -> str:
    """Write :data:`PAIRS` as a dataset at ``path``; returns the path as a string."""
    assert build_dataset(path, PAIRS, SimulatedTokenizer()) == len(PAIRS)
    return str(path)
