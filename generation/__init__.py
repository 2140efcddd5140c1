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

# The vLLM release whose API the simulator imitates by default (``--vllm-version``'s default, the
# newest release whose defaults are known), and the simulator's own version (``GET /server_info``,
# the ``pyproject.toml`` version).  What a server reports (``GET /version``, ``system_fingerprint``,
# gRPC ``GetLoads``) is :func:`vllm_version` of its configuration.
VLLM_VERSION = "0.34.0"           # generation.config.vllm_versions.NEWEST reads it (no import here: the
                                 # metrics module must import no configuration)
SIMULATOR_VERSION = "0.1.0"


def vllm_version(cfg) -> str:
    """The vLLM release a server with configuration ``cfg`` reports: ``--vllm-version`` as given
    (``"0.34.0"``, ``"0.15.1"``, ``"0.34.0rc1"``: the flag accepts only PEP 440 release strings,
    so clients' version gates parse it), :data:`VLLM_VERSION` where the configuration has none."""
    return getattr(cfg, "vllm_version", "") or VLLM_VERSION
