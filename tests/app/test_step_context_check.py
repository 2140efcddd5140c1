"""``python app.py`` in step mode sizes and checks the KV cache at the served model's own context
length (``--max-model-len``'s default from its config.json), as vLLM and ``gunicorn wsgi:app``
do.  In-process tier: ``app.main`` refuses to start, exit status 2, vLLM's message on stderr."""
from __future__ import annotations

LLAMA8 = "meta-llama/Llama-3.1-8B-Instruct"


def test_app_checks_the_kv_cache_at_the_models_context_length(capsys, monkeypatch, tmp_path):
    """``python app.py`` resolves the step engine before the model's config.json sets
    ``--max-model-len``'s default; it resolves it again at that length, so that a cache shorter
    than one full-length request is refused as vLLM refuses it (Llama-3.1-8B on an A100-40GB at
    0.8 of its memory: 122,800 tokens for a context of 131,072), and a hybrid model's cache is
    sized at it."""
    from app import main
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    code = main(["--latency-calculator", "step", LLAMA8, "--gpu", "A100-40GB", "--vllm-version", "0.15.1",
                 "--gpu-memory-utilization", "0.8", "--port", "1", "--host", "127.0.0.1"])
    assert code == 2
    err = capsys.readouterr().err
    assert "error: --max-model-len: To serve at least one request with the model's max seq len (131072)" in err, err
    assert "the estimated maximum model length is 122800" in err
