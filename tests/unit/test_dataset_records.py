"""The SQLite dataset itself (the seeds' "Dataset Responses (Optional)", engine.md 9.2-9.4): the
prompt hash, the reference's table schema, how a response is picked and trimmed, and the
dataset flags.  The recorded dataset: ``support.recorded_dataset``."""
from __future__ import annotations

import random
import sqlite3

import pytest

from data.dataset import SQLiteDataset, build_dataset, prompt_hash
from generation.config.cli import load_config
from generation.config.values import ConfigError
from generation.content.sources import SentenceSource
from support.recorded_dataset import (ACCENTS_ANSWER, ANSWERS, FILLERS, FRANCE_ANSWER, GREETING, GREETING_ANSWER,
                                      IDS_ANSWER, STORY, STORY_LONG, STORY_SHORT, TOK, pieces)


# ---- units -------------------------------------------------------------------------------------
def test_prompt_hash_vector():
    assert prompt_hash([1, 2, 3]).hex() == "4636993d3e1da4e9d6b8f87b79e8f7c6d018580d52661950eabc3845c5897a4d"
    assert prompt_hash([1 + 2 ** 32, 2, 3]) == prompt_hash([1, 2, 3])      # Go's uint32 conversion
    assert len(prompt_hash([])) == 32


def test_fixture_lengths_are_as_documented():
    assert [len(pieces(t)) for t in (GREETING_ANSWER, FRANCE_ANSWER, ACCENTS_ANSWER, IDS_ANSWER,
                                      STORY_SHORT, STORY_LONG, *FILLERS)] == [13, 7, 8, 8, 5, 15, 2, 4, 5]


def test_table_matches_the_reference_schema(db_path):
    con = sqlite3.connect(db_path)
    cols = [(r[1], r[2]) for r in con.execute("PRAGMA table_info(llmd)")]
    row = con.execute("SELECT prompt_hash, gen_tokens, n_gen_tokens FROM llmd WHERE id = 1").fetchone()
    con.close()
    assert cols == [("id", "INTEGER"), ("prompt_hash", "BLOB"), ("gen_tokens", "JSON"), ("n_gen_tokens", "INTEGER")]
    assert row[0] == prompt_hash(TOK.encode(GREETING)[0])
    assert row[2] == 13
    assert '"Strings": ["Hello", "! ", "I ",' in row[1] and row[1].startswith('{"Tokens": [')


@pytest.mark.parametrize("in_memory", [False, True])
def test_pick_prefers_a_match_long_enough_and_trims_it(db_path, in_memory):
    ds = SQLiteDataset(db_path, in_memory=in_memory, sentences=SentenceSource(TOK))
    ids = TOK.encode(STORY)[0]
    for seed in range(20):
        got_pieces, _, reason = ds.pick(random.Random(seed), ids, 8, False)
        assert (got_pieces, reason) == (pieces(STORY_LONG)[:8], "length")
    whole = {"".join(ds.pick(random.Random(seed), ids, 100, False)[0]) for seed in range(40)}
    assert whole == {STORY_SHORT, STORY_LONG}        # none long enough: a random match, whole
    assert ds.pick(random.Random(0), ids, 15, False)[2] == "length"  # exactly the cap
    padded, padded_ids, reason = ds.pick(random.Random(3), ids, 40, True)
    assert len(padded) == len(padded_ids) == 40 and reason == "length"
    assert "".join(padded).startswith((STORY_SHORT, STORY_LONG))
    ds.close()


def test_pick_falls_back_to_a_random_row_within_the_cap(db_path):
    ds = SQLiteDataset(db_path, sentences=SentenceSource(TOK))
    unknown = TOK.encode("nobody recorded this")[0]
    short = {a for a in ANSWERS if len(pieces(a)) <= 5}
    seen = set()
    for seed in range(60):
        p, ids, reason = ds.pick(random.Random(seed), unknown, 5, False)
        text = "".join(p)
        assert text in short and len(ids) == len(p)
        assert reason == ("length" if len(p) == 5 else "stop")
        seen.add(text)
    assert seen == short                                  # every fitting row can be chosen
    firsts = {pieces(a)[0] for a in ANSWERS}
    p, _, reason = ds.pick(random.Random(1), unknown, 1, False)  # nothing fits: any row, trimmed
    assert p[0] in firsts and len(p) == 1 and reason == "length"
    ds.close()


def test_empty_dataset_returns_none(tmp_path):
    path = tmp_path / "empty.sqlite3"
    build_dataset(path, [], TOK)
    ds = SQLiteDataset(str(path), sentences=SentenceSource(TOK))
    assert ds.size == 0 and ds.pick(random.Random(0), [1, 2], 10, False) is None
    ds.close()


def test_dataset_flags_from_yaml(tmp_path, db_path):
    cfg_file = tmp_path / "sim.yaml"
    cfg_file.write_text(f"dataset-path: {db_path}\ndataset-in-memory: true\n")
    cfg = load_config(["--config", str(cfg_file)], env={})
    assert (cfg.dataset_path, cfg.dataset_in_memory, cfg.dataset_table_name) == (db_path, True, "llmd")
    with pytest.raises(ConfigError, match="dataset cannot be defined in echo mode"):
        load_config(["--config", str(cfg_file), "--mode", "echo"], env={})
    url = "http://example.invalid/x.sqlite3"          # downloaded at start-up, not while parsing
    cfg = load_config(["--dataset-url", url, "--dataset-path", str(tmp_path / "dl.sqlite3")], env={})
    assert cfg.dataset_url == url
    with pytest.raises(ConfigError, match="dataset-path is required when dataset-url is set"):
        load_config(["--dataset-url", url], env={})
