"""Flag sets that several test modules start their simulators with (one flag set, one
in-process app per module)."""
from __future__ import annotations

# tests/app/test_embeddings.py and tests/app/test_render_tokenize.py: a context window, request
# id headers, a LoRA adapter and the pod's identity
EXTRA_FLAGS = ("--max-model-len", "2048", "--enable-request-id-headers",
               "--lora-modules", '{"name":"lora1","path":"/path/to/lora1"}')
EXTRA_ENV = {"POD_NAME": "sim-pod-0", "POD_NAMESPACE": "ns1"}
