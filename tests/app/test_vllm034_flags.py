"""vLLM 0.34's serve flags that take effect here, in-process: several ``--api-key``\\ s.  The
parser: tests/unit/test_vllm_serve_flags.py."""
from __future__ import annotations


# ---- --api-key K1 K2 -------------------------------------------------------------------------------
def test_any_of_several_api_keys(app_client):
    c = app_client("--api-key", "k1", "k2")
    for key, status in (("k1", 200), ("k2", 200), ("k3", 401)):
        assert c.get("/v1/models", headers={"Authorization": f"Bearer {key}"}).status_code == status
