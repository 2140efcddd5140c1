"""vLLM 0.34's batch chat completions (``POST /v1/chat/completions/batch``:
``vllm/entrypoints/openai/chat_completion/batch_serving.py`` ``OpenAIServingChatBatch``,
``protocol.py`` ``BatchChatCompletionRequest``).

``messages`` is a list of conversations (each a non-empty list of chat messages); every other
field is chat's, shared by all of them.  vLLM builds one chat request per conversation
(``to_chat_completion_request``: the batch's fields, their defaults included, with that
conversation), checks it as chat does, renders it without tools (``tool_dicts=None``) and runs
it as an engine request of its own (``{id}_{i}``).  Here each conversation is a prompt of one
engine request with ``n = 1``, which the engine runs as one sequence each: N conversations are
N sequences in the queue, the KV cache, the step engine and the metrics (one
``request_success`` and one ``request_params_n`` observation each), as vLLM's N requests.

The answer is one ``chat.completion`` (``id`` ``chatcmpl-<id>``, the chat body's shape here):
choice ``i`` answers conversation ``i``; ``usage`` sums the conversations' prompt and completion
tokens (and ``prompt_tokens_details`` their cached, written and multimodal tokens).  Unlike
chat's body, vLLM's batch body has no top-level ``prompt_token_ids`` (``return_token_ids`` adds
each choice's ``token_ids`` only), no ``prompt_logprobs``, ``kv_transfer_params``,
``ec_transfer_params`` or per-request ``metrics``; a message's role is the server's response
role (``assistant``) unless ``add_generation_prompt`` is false, when it is the role of the
conversation's last message, and ``echo`` prepends that last message's content when its role is
the response's.

Refused before anything else, in vLLM's words (``check_batch_mode``): ``use_beam_search``, ``n``
other than 1, ``logprob_token_ids`` without ``logprobs``, ``kv_transfer_params.prompt_token_ids``;
``tool_choice`` other than ``"none"`` is pydantic's ``literal_error``.  vLLM 0.34 does not refuse
``stream: true`` (its docstring says streaming is unsupported; no validator checks it): it asks
the engine for deltas and answers each conversation's last one.  The simulator answers the whole
answer, in the same JSON body.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import replace

from generation.content import logprobs as lp
from generation.engine.outputs import check_prompt_fits
from generation.errors import Rejected
from generation.tokenization.multimodal import mm_token_counts
from generation.tokenization.tokenizer import OFFLOAD_CHARS, chat_options, content_text, off_hub
from .base import chat_prompt, system_fingerprint, usage_details
from .chat import ChatAdapter, echo_content, render_chat, response_role
from .fields import check_chat_part_types, tokens_as_ids
from .validation import error_input



def check_batch_mode(data: dict) -> None:
    """``BatchChatCompletionRequest.check_batch_mode`` on the raw body (a ``mode="before"``
    validator: before any field's type is read, values judged by Python's truthiness as there).
    Raises Rejected with vLLM's message and ``parameter``.  A rejected ``n`` is echoed as vLLM's
    handler echoes an input (:func:`generation.adapters.validation.error_input`: a container as
    ``<list of N items>``), not printed whole."""
    if data.get("use_beam_search"):
        raise Rejected("Batch chat completions do not support beam search. Please set `use_beam_search` to False.",
                       "use_beam_search")
    if data.get("logprob_token_ids") and not data.get("logprobs"):
        raise Rejected("when using `logprob_token_ids`, `logprobs` must be set to true.", "logprob_token_ids")
    kv = data.get("kv_transfer_params")
    if isinstance(kv, dict) and kv.get("prompt_token_ids") is not None:
        raise Rejected("Batch chat completions do not support `kv_transfer_params['prompt_token_ids']`: one "
                       "pre-tokenized prompt cannot serve several conversations.",
                       "kv_transfer_params.prompt_token_ids")
    n = data.get("n", 1)
    if n is not None and n != 1:
        raise Rejected("Batch chat completions do not support `n > 1`. Please set `n` to 1.", "n", error_input(n))


class BatchChatAdapter(ChatAdapter):
    """``POST /v1/chat/completions/batch`` on the serving pipeline (see the module docstring).
    ``self.body`` is the request each conversation gets (the batch's fields, ``messages`` left
    out); ``self.conversations`` the conversations."""
    image_output = False          # vLLM's batch answers text only (no --omni image)
    external_id_format = "chatcmpl-{rid}_{i}"     # batch_serving.py: one engine request per conversation
    sse_keep_alive = False        # its route returns JSON, never wrapped in vLLM's with_sse_keep_alive
    # vLLM's batch renders each conversation with preprocess_chat, not OnlineRenderer.render_chat
    # (no vllm:request_render_duration_seconds), and parses no tool calls
    render_type = None
    parser_request_type = None

    def __init__(self, sim, body):
        super().__init__(sim, body)
        self.conversations = body.messages or []
        # to_chat_completion_request dumps the batch's defaults too (exclude_none): a conversation's
        # request gives add_generation_prompt (so continue_final_message alone is "Cannot set both")
        # and tool_choice "none" (tools are type-checked, never used)
        self.body = replace(body, messages=None,
                            add_generation_prompt=True if body.add_generation_prompt is None
                            else body.add_generation_prompt,
                            tool_choice="none" if body.tool_choice is None else body.tool_choice)

    def build(self, rid: str, force_cache_threshold: bool):
        sim, b = self.sim, self.body
        convs = self.conversations
        self.check(force_cache_threshold, len(convs))     # N conversations bounded before any is rendered
        self.prompt_lp = None                # vLLM's batch body has no prompt logprobs
        # vLLM renders each conversation with tool_dicts=None: the template sees no tools
        opts = {**chat_options(b, sim.config.default_chat_template_kwargs), "tools": None}
        sizes = [sum(len(content_text(m.get("content"), False)) for m in conv if isinstance(m, dict))
                 for conv in convs]
        if sim.prompt_char_limit() is not None:
            for size in sizes:                # every conversation's bound before any is tokenized
                sim.check_prompt_chars(size, "messages")

        echo = sim.config.mode == "echo"
        max_len = sim.config.max_model_len

        def render(conv):
            check_chat_part_types(conv)
            prompt = chat_prompt(sim, conv, **opts)
            if not echo:        # the first too long refuses the batch now, with prepare's error,
                check_prompt_fits(max_len, prompt.length)    # not after every conversation is rendered
            return prompt
        if sum(sizes) > OFFLOAD_CHARS and getattr(sim.tokenizer, "name", "") != "render":
            # many conversations each under the tokenizer's own threshold still add up (as
            # completions' prompt arrays: tokenization.each_text); the render service's HTTP stays here
            prompts = off_hub(list, map(render, convs))     # the map runs in the worker, as list reads it
        else:
            prompts = [render(conv) for conv in convs]
        # one JSON body whatever ``stream`` says (vLLM answers a batch with a JSONResponse)
        self._checked = (*self._checked[:-1], False)
        return self.request(rid, prompts, force_cache_threshold)

    def _work(self, tokens: int, prompt_len: int = 0) -> tuple[int, str, str]:
        b = self.body
        top = (b.top_logprobs or 0) if b.logprobs else 0
        mct = "max_completion_tokens" if b.max_completion_tokens is not None else "max_tokens"
        formula = f"conversations x {mct}" + (" x (1 + top_logprobs)" if top else "")
        return tokens * (1 + top), formula, "messages" if len(self.conversations) > 1 else mct

    def role(self, index: int) -> str:
        """The role of conversation ``index``'s answer (:func:`~.chat.response_role`)."""
        return response_role(self.body, self.conversations[index])

    def mm_tokens(self, seqs) -> dict | None:
        """``prompt_tokens_details.multimodal_tokens`` summed over the conversations (vLLM's
        ``Counter`` of each prompt's counts), with ``--enable-prompt-tokens-details``."""
        pd = usage_details(self.sim)
        if pd is None or pd.shape != "vllm":
            return None
        total: Counter = Counter()
        for s in seqs:
            counts = mm_token_counts(self.conversations[s.prompt_index], s.prompt_len)
            if counts:
                total.update(counts)
        return dict(total) or None

    def render(self, seqs) -> dict:
        """vLLM's ``chat_completion_full_generator_batch``: one choice per conversation."""
        sim, b = self.sim, self.body
        as_ids = tokens_as_ids(sim, b)
        out = render_chat(self.req, seqs, bool(b.logprobs), b.top_logprobs or 0, usage_details(sim), as_ids,
                          sim.reasoning is not None, self.mm_tokens(seqs))
        out["system_fingerprint"] = system_fingerprint(sim.config)
        out["kv_transfer_params"] = None          # the batch's body never carries them
        listed = lp.listed_names(sim.tokenizer, self.req.logprob_token_ids, as_ids)
        for c, s in zip(out["choices"], seqs):
            if listed and c["logprobs"] is not None:
                c["logprobs"] = {"content": [lp.with_listed(e, k, listed)
                                             for k, e in enumerate(c["logprobs"]["content"])]}
            role = self.role(s.prompt_index)
            c["message"]["role"] = role
            if b.echo:
                echoed = echo_content(self.conversations[s.prompt_index], role)    # "" or the text:
                c["message"]["content"] = echoed + (c["message"]["content"] or "")  # never null (l. 329-342)
            if b.return_token_ids:
                c["token_ids"] = list(s.ids)
        return out

    def stream(self, seqs):          # never called: build() asks the engine for one body
        raise NotImplementedError
