"""Tokens: counting and rendering prompts as the served model would.

    tokenizer          ``SimulatedTokenizer`` (the reference's regex tokenizer, FNV-1a ids),
                       ``HFTokenizer``, chat flattening and ``tokenize_chat``
    tokenizer_loading  ``load_tokenizer``: the Hugging Face cache or hub, offline fallbacks
    chat_template      Jinja chat templates in a sandbox, ``--chat-template``
    render_client      ``RenderTokenizer``: tokenization by a vLLM render service (``--render-url``)
"""
