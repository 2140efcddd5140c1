"""The simulator core, free of Flask: one subpackage per subsystem.

    engine        the simulated engine: requests, sequences, scheduling, latency, LoRA slots
    tokenization  tokenizers (simulated, Hugging Face, render service), chat templates
    content       what an answer says: response sources (random / echo / dataset), logprobs
    structured    tool calls and structured output: validation, synthesis, schema / regex samplers
    kvcache       the prefix KV cache: block hashes, the cache, KV events over ZMQ, replay
    metrics       vLLM's Prometheus metrics, fake metrics, bucket boundaries
    config        every option declared once: the command line, YAML, environment, admin
    adapters      one adapter per API family, between the schemas and the engine
    errors        the errors every layer raises (vLLM's error types and status codes)

Blueprints call into :class:`generation.engine.simulator.Simulator`.
"""

# The vLLM release whose API the simulator imitates (``GET /version``, ``system_fingerprint``;
# PEP 440, so clients' version gates parse it), and the simulator's own version
# (``GET /server_info``, the ``pyproject.toml`` version).
VLLM_VERSION = "0.33.0"
SIMULATOR_VERSION = "0.1.0"
