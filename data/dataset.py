"""SQLite dataset of recorded responses: the optional response source of random mode.

Mimics llm-d-inference-sim's custom dataset (engine.md 9.2-9.5) with the user's seeds
("Dataset Responses (Optional)") taking precedence where they differ.

Table (default ``llmd``; extra columns allowed)::

    id INTEGER, prompt_hash BLOB, gen_tokens JSON, n_gen_tokens INTEGER

``prompt_hash`` is SHA-256 of the prompt token ids packed as little-endian uint32 (the ids the
simulator itself computes: completions = the prompt text or ids, chat = the flattened
conversation); ``gen_tokens`` is ``{"Tokens": [ids], "Strings": [pieces]}`` (keys matched
case-insensitively, as Go's JSON decoder does); ``n_gen_tokens`` is the response length.

The file is opened read-only (``file:<path>?mode=ro``) or, with ``--dataset-in-memory``, its
table is copied into a private in-memory database.  One pass at start-up builds two sorted
numpy indexes (24 bytes a row): by the first 8 bytes of ``prompt_hash`` and by
``n_gen_tokens``.  A request then costs two binary searches and one rowid lookup whatever
indexes the file has, so the single gevent thread is never held by a table scan.  Choices
among candidate rows use the simulator's seeded RNG (``--seed`` reproduces them), never
SQLite's ``RANDOM()``.

``build_dataset`` writes such a file from (prompt, response) pairs; ``python -m data.dataset``
converts a ShareGPT-style conversation file as the reference's dataset tool does.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import sqlite3
import struct
import sys
from array import array
from pathlib import Path
from typing import Iterable

import numpy as np
import orjson

log = logging.getLogger("vllm_sim")

DEFAULT_TABLE = "llmd"
# Required columns and declared types, in the reference's order (engine.md 9.2).
EXPECTED_COLUMNS = (("id", "INTEGER"), ("prompt_hash", "BLOB"), ("gen_tokens", "JSON"),
                    ("n_gen_tokens", "INTEGER"))


class DatasetError(Exception):
    """The dataset cannot be used; the message is the reference's start-up error
    (``database file does not exist: <path>``, ``failed to verify database: ...``)."""


# ---------------------------------------------------------------------------------------------
def prompt_hash(ids: Iterable[int]) -> bytes:
    """SHA-256 (32 raw bytes) of the token ids packed as little-endian uint32 (engine.md 9.3).

    ``prompt_hash([1, 2, 3]).hex()`` ->
    ``4636993d3e1da4e9d6b8f87b79e8f7c6d018580d52661950eabc3845c5897a4d``.  Ids outside
    uint32 wrap modulo 2**32, as Go's ``uint32(id)`` conversion does."""
    ids = list(ids)
    try:
        data = struct.pack(f"<{len(ids)}I", *ids)
    except struct.error:
        data = struct.pack(f"<{len(ids)}I", *(int(i) & 0xFFFFFFFF for i in ids))
    return hashlib.sha256(data).digest()


def _hash_key(h: bytes) -> int:
    """Index key of a prompt hash: its first 8 bytes as an unsigned integer (a collision of
    64 bits of SHA-256 among a dataset's prompts is practically impossible)."""
    return int.from_bytes(h[:8].ljust(8, b"\0"), "big")


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _readonly_uri(path: str) -> str:
    return Path(path).resolve().as_uri() + "?mode=ro"


def open_readonly(path: str) -> sqlite3.Connection:
    """Open ``path`` read-only.  Raises DatasetError ``database file does not exist: <path>``."""
    if not os.path.exists(path):
        raise DatasetError(f"database file does not exist: {path}")
    try:
        return sqlite3.connect(_readonly_uri(path), uri=True, check_same_thread=False)
    except sqlite3.Error as e:
        raise DatasetError(f"failed to open database: {e}") from None


def check_schema(con: sqlite3.Connection, table: str) -> None:
    """Verify ``table``'s columns with ``PRAGMA table_info`` (engine.md 9.2).

    Raises DatasetError ``failed to verify database: column <c> has incorrect type: expected
    <T>, got <U>`` (checked first, in table order) or ``... missing expected column in <table>
    table: <col>`` (a missing table lacks every column), or wrapping SQLite's own error (e.g.
    ``file is not a database``).  Declared types compare case-insensitively."""
    try:
        info = con.execute(f"PRAGMA table_info({_quote(table)})").fetchall()
    except sqlite3.Error as e:
        raise DatasetError(f"failed to verify database: {e}") from None
    expected = dict(EXPECTED_COLUMNS)
    declared = {}
    for _cid, name, ctype, *_ in info:
        ctype = ctype or ""
        declared[name] = ctype
        want = expected.get(name)
        if want is not None and ctype.upper() != want:
            raise DatasetError(f"failed to verify database: column {name} has incorrect type: "
                               f"expected {want}, got {ctype}")
    for name, _ in EXPECTED_COLUMNS:
        if name not in declared:
            raise DatasetError(f"failed to verify database: missing expected column in {table} table: {name}")


def verify_dataset(path: str, table: str = DEFAULT_TABLE) -> None:
    """Start-up check of a dataset file (existence and schema); raises DatasetError."""
    con = open_readonly(path)
    try:
        check_schema(con, table or DEFAULT_TABLE)
    finally:
        con.close()


# ---------------------------------------------------------------------------------------------
class SQLiteDataset:
    """Recorded responses looked up by prompt hash.

    ``path``: SQLite file (opened read-only); ``table``: table name; ``in_memory``: copy the
    table into memory first; ``sentences``: a :class:`generation.content.sources.SentenceSource` that pads
    ``ignore_eos`` responses and supplies ids for rows that lack them.
    Raises DatasetError as :func:`verify_dataset` does."""

    def __init__(self, path: str, table: str = DEFAULT_TABLE, in_memory: bool = False, sentences=None):
        self.path = path
        self.table = table or DEFAULT_TABLE
        self.sentences = sentences
        self.con = None
        src = open_readonly(path)
        try:
            check_schema(src, self.table)
            self.con = self._copy_to_memory(path, self.table) if in_memory else src
        finally:
            if self.con is not src:
                src.close()
        self._warned = False
        self._load_index()
        log.info("dataset %s (table %s%s): %d responses", path, self.table,
                 ", in memory" if in_memory else "", self.size)
        if not self.size:
            log.warning("dataset %s is empty: responses come from the predefined sentences", path)

    @staticmethod
    def _copy_to_memory(path: str, table: str) -> sqlite3.Connection:
        """The reference's ``--dataset-in-memory``: ATTACH the file, copy the four columns of
        the table into a private in-memory database, DETACH."""
        q = _quote(table)
        mem = sqlite3.connect("file::memory:", uri=True, check_same_thread=False)
        try:
            mem.execute("ATTACH DATABASE ? AS src", (_readonly_uri(path),))
            mem.execute(f"CREATE TABLE {q} (id INTEGER, prompt_hash BLOB, gen_tokens JSON, n_gen_tokens INTEGER)")
            mem.execute(f"INSERT INTO main.{q} (id, prompt_hash, gen_tokens, n_gen_tokens) "
                        f"SELECT id, prompt_hash, gen_tokens, n_gen_tokens FROM src.{q}")
            mem.commit()
            mem.execute("DETACH DATABASE src")
        except sqlite3.Error as e:
            mem.close()
            raise DatasetError(f"failed to load database into memory: {e}") from None
        return mem

    def _load_index(self) -> None:
        q = _quote(self.table)
        self._key = "rowid"
        try:
            cur = self.con.execute(f"SELECT rowid, prompt_hash, n_gen_tokens FROM {q} ORDER BY rowid")
        except sqlite3.OperationalError:          # a WITHOUT ROWID table: address rows by id
            self._key = "id"
            cur = self.con.execute(f"SELECT id, prompt_hash, n_gen_tokens FROM {q} ORDER BY id")
        ids, lens, keys, hashed = array("q"), array("q"), array("Q"), array("q")
        for rid, h, n in cur:
            if rid is None:
                continue
            try:
                n = int(n)
            except (TypeError, ValueError):
                n = 0
            if isinstance(h, bytes) and h:
                keys.append(_hash_key(h))
                hashed.append(len(ids))
            ids.append(int(rid))
            lens.append(n)
        ids_np = np.array(ids, dtype=np.int64)
        lens_np = np.array(lens, dtype=np.int64)
        order = np.argsort(lens_np, kind="stable")       # ties keep rowid order: reproducible
        self._len_sorted = lens_np[order]
        self._len_ids = ids_np[order]
        keys_np = np.array(keys, dtype=np.uint64)
        hashed_np = np.array(hashed, dtype=np.int64)
        order = np.argsort(keys_np, kind="stable")
        self._hash_keys = keys_np[order]
        self._hash_ids = ids_np[hashed_np[order]]
        self._hash_lens = lens_np[hashed_np[order]]
        self._fetch_sql = f"SELECT gen_tokens FROM {q} WHERE {self._key} = ?"

    @property
    def size(self) -> int:
        """Number of responses in the dataset."""
        return len(self._len_ids)

    def pick(self, rng, prompt_ids, max_len: int, ignore_eos: bool):
        """Choose the response for one sequence.

        ``rng``: the simulator's ``random.Random``; ``prompt_ids``: the prompt token ids;
        ``max_len`` (>= 1): the request's max tokens capped to the room left in the context
        window, or that room when the request has no cap.

        Exact-hash rows (seeds): a random row at least ``max_len`` long, trimmed to it; if none,
        a random matching row whole.  No exact row: a random row with ``n_gen_tokens <=
        max_len``, else any row, trimmed (engine.md 9.4).  ``ignore_eos`` pads with predefined
        sentences to exactly ``max_len``.  Returns ``(pieces, ids, finish_reason)`` with
        ``finish_reason`` ``length`` iff the length is ``max_len``, else ``stop``; or None when
        the dataset is empty or the row is unreadable (the caller then uses the predefined
        sentences)."""
        n_rows = len(self._len_ids)
        if not n_rows:
            return None
        key = np.uint64(_hash_key(prompt_hash(prompt_ids)))
        keys = self._hash_keys
        lo = int(keys.searchsorted(key, "left"))
        hi = int(keys.searchsorted(key, "right"))
        if lo < hi:
            rows = self._hash_ids[lo:hi].tolist()
            pool = [r for r, n in zip(rows, self._hash_lens[lo:hi].tolist()) if n >= max_len] or rows
            rowid = pool[rng.randrange(len(pool))]
        else:
            fit = int(self._len_sorted.searchsorted(max_len, "right"))
            rowid = int(self._len_ids[rng.randrange(fit or n_rows)])
        got = self._fetch(rowid)
        if got is None:
            return None
        pieces, ids = got
        if len(pieces) > max_len:
            del pieces[max_len:]
            del ids[max_len:]
        elif ignore_eos and len(pieces) < max_len and self.sentences is not None:
            more_pieces, more_ids = self.sentences.generate(rng, max_len - len(pieces))
            pieces += more_pieces
            ids += more_ids
        return pieces, ids, ("length" if len(pieces) >= max_len else "stop")

    def _fetch(self, rowid: int):
        """``(pieces, ids)`` of one row (fresh lists), or None (warned once) when unreadable."""
        try:
            row = self.con.execute(self._fetch_sql, (rowid,)).fetchone()
            doc = orjson.loads(row[0]) if row is not None and row[0] is not None else None
        except (sqlite3.Error, orjson.JSONDecodeError, TypeError) as e:
            return self._bad_row(rowid, str(e))
        if not isinstance(doc, dict):
            return self._bad_row(rowid, "gen_tokens is not a JSON object")
        doc = {str(k).lower(): v for k, v in doc.items()}
        pieces = doc.get("strings")
        if not isinstance(pieces, list) or not all(isinstance(p, str) for p in pieces):
            return self._bad_row(rowid, "gen_tokens has no Strings list")
        ids = doc.get("tokens")
        if not isinstance(ids, list) or len(ids) != len(pieces):
            tok = getattr(self.sentences, "tokenizer", None)
            ids = [tok.piece_id(p) for p in pieces] if tok is not None else [0] * len(pieces)
        return pieces, ids

    def _bad_row(self, rowid: int, why: str):
        if not self._warned:
            self._warned = True
            log.warning("dataset row %s=%s is unreadable (%s): using the predefined sentences",
                        self._key, rowid, why)
        return None

    def close(self) -> None:
        self.con.close()


# ---------------------------------------------------------------------------------------------
def _prompt_ids(prompt, tokenizer) -> list:
    """The ids the server hashes: a text prompt as completions tokenize it, a conversation as
    chat does (chat template or the seeds' flattening), token ids as given."""
    from generation.tokenization.tokenizer import tokenize_chat
    if isinstance(prompt, str):
        return tokenizer.encode_prompt(prompt)[0]
    prompt = list(prompt)
    if all(isinstance(t, int) for t in prompt):
        return prompt
    return tokenize_chat(tokenizer, prompt)[0]


def build_dataset(path, pairs, tokenizer, table: str = DEFAULT_TABLE) -> int:
    """Write (or append to) a dataset file from ``(prompt, response_text)`` pairs.

    ``prompt`` is a completions prompt (text, or a list of token ids) or a chat conversation
    (list of ``{"role", "content"}`` messages, hashed as the simulator flattens it);
    ``tokenizer`` is the simulator's (``Simulator.tokenizer``), so the hashes match what the
    server computes.  Responses are tokenized losslessly (the pieces join to the exact text).
    Creates the canonical table (engine.md 9.2) and an index on ``prompt_hash``.
    Returns the number of rows written."""
    q = _quote(table)
    rows = []
    for prompt, response in pairs:
        ids = _prompt_ids(prompt, tokenizer)
        rids, rpieces = tokenizer.encode_lossless(response)
        rows.append((prompt_hash(ids), json.dumps({"Tokens": list(rids), "Strings": list(rpieces)}),
                     len(rids)))
    con = sqlite3.connect(str(path))
    try:
        with con:
            con.execute(f"CREATE TABLE IF NOT EXISTS {q} (id INTEGER PRIMARY KEY, prompt_hash BLOB NOT NULL, "
                        f"gen_tokens JSON NOT NULL, n_gen_tokens INTEGER NOT NULL)")
            con.execute(f"CREATE INDEX IF NOT EXISTS {_quote(table + '_prompt_hash')} ON {q} (prompt_hash)")
            con.executemany(f"INSERT INTO {q} (prompt_hash, gen_tokens, n_gen_tokens) VALUES (?, ?, ?)", rows)
    finally:
        con.close()
    return len(rows)


def conversation_pairs(conversations, progress=None) -> tuple[list, dict]:
    """ShareGPT-style records ``[{"conversations": [{"from": "human"|"gpt", "value"}, ...]}]``
    -> ``(pairs, why)``: the pairs as the reference's dataset tool records them (engine.md
    9.5), for each (human, gpt) turn one completions pair (the human text) and one chat pair
    (the conversation so far), a turn with other roles ending that conversation; and why
    records gave nothing or stopped early:
    ``{"not a conversation": n, "no human/gpt turn": n, "stopped at a turn with other roles": n}``.
    ``progress`` (a tqdm bar or None) is advanced once per record."""
    out = []
    why = {"not a conversation": 0, "no human/gpt turn": 0, "stopped at a turn with other roles": 0}
    for rec in conversations:
        if progress is not None:
            progress.update(1)
        turns = rec.get("conversations") if isinstance(rec, dict) else None
        if not isinstance(turns, list):
            why["not a conversation"] += 1
            continue
        history = []
        before = len(out)
        for k in range(0, len(turns) - 1, 2):
            human, gpt = turns[k], turns[k + 1]
            if not (isinstance(human, dict) and isinstance(gpt, dict)) or \
                    human.get("from") != "human" or gpt.get("from") != "gpt":
                if len(out) > before:
                    why["stopped at a turn with other roles"] += 1
                break
            history.append({"role": "user", "content": str(human.get("value", ""))})
            answer = str(gpt.get("value", ""))
            out.append((history[-1]["content"], answer))
            out.append((list(history), answer))
            history.append({"role": "assistant", "content": answer})
        if len(out) == before:
            why["no human/gpt turn"] += 1
    return out, why


def main(argv=None) -> int:
    """``python -m data.dataset --input-file conv.json --output-path out.sqlite3 [--model M]``:
    writes the records with a progress bar, then says how many it kept and why it dropped the
    others."""
    p = argparse.ArgumentParser(prog="python -m data.dataset",
                                description="Build a simulator dataset from ShareGPT-style conversations")
    p.add_argument("--input-file", required=True, help="JSON array of {conversations: [{from, value}]}")
    p.add_argument("--output-path", required=True, help="SQLite file to write (must not exist)")
    p.add_argument("--table-name", default=DEFAULT_TABLE, help="table to write (default %(default)s)")
    p.add_argument("--max-records", type=int, default=10000,
                   help="conversations read at most; later ones are dropped (default %(default)s)")
    p.add_argument("--model", default="test-model",
                   help="model whose tokenizer hashes the prompts, as the server's --model (org/name: "
                        "Hugging Face tokenizer; default: the simulated tokenizer)")
    p.add_argument("--tokenizer", default="", help="tokenizer path or org/name, as the server's --tokenizer")
    p.add_argument("--tokenizers-cache-dir", default="", help="as the server's flag")
    p.add_argument("--chat-template", default="", help="as the server's flag")
    args = p.parse_args(argv)
    if os.path.exists(args.output_path):
        print(f"error: output file already exists: {args.output_path}", file=sys.stderr)
        return 1
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from types import SimpleNamespace

    from tqdm import tqdm

    from generation.tokenization.tokenizer_loading import TokenizerLoadError, load_tokenizer
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        tokenizer = load_tokenizer(SimpleNamespace(
            model=args.model, tokenizer=args.tokenizer, force_dummy_tokenizer=False, render_url="",
            tokenizers_cache_dir=args.tokenizers_cache_dir, chat_template=args.chat_template,
            served_names=[args.model]))
    except TokenizerLoadError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    try:
        with open(args.input_file, encoding="utf-8") as fh:
            records = json.load(fh)
    except (OSError, ValueError) as e:
        print(f"error: cannot read {args.input_file}: {e}", file=sys.stderr)
        return 1
    if not isinstance(records, list):
        print(f"error: {args.input_file} must hold a JSON array", file=sys.stderr)
        return 1
    over = max(len(records) - args.max_records, 0)
    records = records[: args.max_records]
    with tqdm(total=len(records), unit="conv", desc="conversations", file=sys.stderr) as bar:
        pairs, why = conversation_pairs(records, bar)
    with tqdm(total=len(pairs), unit="rec", desc="records", file=sys.stderr) as bar:
        n = 0
        for i in range(0, len(pairs), 1000):
            n += build_dataset(args.output_path, pairs[i:i + 1000], tokenizer, args.table_name)
            bar.update(len(pairs[i:i + 1000]))
    cut = why.pop("stopped at a turn with other roles")
    if over:
        why[f"beyond --max-records {args.max_records}"] = over
    dropped = ", ".join(f"{v} {k}" for k, v in why.items() if v) or "none"
    used = len(records) - why["not a conversation"] - why["no human/gpt turn"]
    print(f"kept {n} records from {used} of {len(records) + over} conversations in {args.output_path} "
          f"({cut} cut short at a turn with other roles); dropped conversations: {dropped}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
