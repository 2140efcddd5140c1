"""The simulated prefix KV cache and vLLM's KV-cache events over ZMQ (engine.md section 4).

    cache       ``KVCache``: blocks held by running sequences, the LRU prefix cache, hits
    block_hash  chained block hashes (FNV-1a 64 over CBOR, or vLLM's ``sha256_cbor``)
    events      ``BlockStored`` / ``BlockRemoved`` / ``AllBlocksCleared``, ``EventPublisher``
    replay      ``--kv-events-replay-endpoint``: published batches again from a sequence number
"""
