"""The simulator's prompt tokenizing and the checks that run before it (a mixin of
:class:`~generation.engine.simulator.Simulator`, which supplies ``config`` and ``tokenizer``):
a request's own chat template refused unless trusted, and a prompt too long for the context in
characters refused before the tokenizer sees it."""
from __future__ import annotations

from generation.errors import UNTRUSTED_TEMPLATE, ContextLengthError, InvalidParam
from generation.tokenization.tokenizer import content_text, tokenize_chat


class PromptChecks:
    def tokenize_text(self, text: str, add_special_tokens: bool = True) -> tuple[list, list]:
        """A text prompt's ids and pieces (vLLM: special tokens added unless told otherwise)."""
        return self.tokenizer.encode_prompt(text, add_special_tokens)

    def tokenize_messages(self, messages, bounded: str | None = None, **chat_options) -> tuple[list, list]:
        """A conversation's ids and pieces; ``chat_options`` are the keyword arguments of
        :func:`generation.tokenization.tokenizer.tokenize_chat` (tools, chat_template, ...).  Raises
        InvalidParam for a request chat template without ``--trust-request-chat-template``.
        ``bounded`` (the request field, for a prompt that must fit the context): first
        :meth:`check_prompt_chars` on the messages' text."""
        self.check_request_chat_template(chat_options)
        if bounded is not None and self.prompt_char_limit() is not None and isinstance(messages, list):
            self.check_prompt_chars(sum(len(content_text(m.get("content"), False)) for m in messages
                                        if isinstance(m, dict)), bounded)
        if bounded is not None and self.prompt_char_limit() is not None:   # the rendered text too
            chat_options = {**chat_options, "max_chars": self.prompt_char_limit(), "max_model_len": self.config.max_model_len}
        return tokenize_chat(self.tokenizer, messages, **chat_options)

    def prompt_char_limit(self) -> int | None:
        """The most characters a prompt that fits ``--max-model-len`` can have: the context
        times the tokenizer's longest token (``max_token_chars``, real tokenizers only; the
        simulated tokenizer's pieces have no bound), else None."""
        per = getattr(self.tokenizer, "max_token_chars", None)
        return None if not per else self.config.max_model_len * per

    def check_prompt_chars(self, chars: int, param: str) -> None:
        """Refuse at once (ContextLengthError) a prompt of ``chars`` characters in the request
        field ``param`` that cannot fit the context even at the tokenizer's most compact ratio
        (vLLM names ``parameter=input_text``, whatever the field; ``param`` null, case C07): a 4 MB prompt
        held the hub 5-6 s in the tokenizer before its length was refused."""
        limit = self.prompt_char_limit()
        if limit is not None and chars > limit:
            max_len = self.config.max_model_len
            raise ContextLengthError(            # vLLM 0.34's words (TokenizeParams._text_len_check)
                f"This model's maximum context length is {max_len} tokens. However, your prompt contains {chars} "
                f"characters (more than {limit} characters, which is the upper bound for {max_len} input tokens). "
                f"Please reduce the length of the input prompt.", "input_text", chars)

    def check_request_chat_template(self, chat_options: dict) -> None:
        """vLLM's guard on templates sent with a request: a Jinja template runs arbitrary loops,
        so it is refused (400 ``chat_template``) unless ``--trust-request-chat-template``."""
        kwargs = chat_options.get("chat_template_kwargs") or {}
        defaults = self.config.default_chat_template_kwargs or {}
        # vLLM checks the request's own kwargs: a chat_template the merge took from
        # --default-chat-template-kwargs (the very object) is the server's, not the request's
        sent = "chat_template" in kwargs and not ("chat_template" in defaults
                                                  and kwargs["chat_template"] is defaults["chat_template"])
        if (chat_options.get("chat_template") is not None or sent) and not self.config.trust_request_chat_template:
            raise InvalidParam(UNTRUSTED_TEMPLATE, "chat_template")
