"""vLLM 0.34 refuses a chat content part of a type it does not know when it renders the
conversation (``parse_chat_message_content_part``, ``renderers/chat_utils/chat_message.py``
l. 548-555), on every route that renders OpenAI chat messages; its request models take any
object as a part, so the answer is the render's ``VLLMValidationError``, not pydantic's."""
from __future__ import annotations

import pytest

from generation.adapters.fields import CHAT_PART_TYPES

USER = [{"role": "user", "content": [{"type": "file", "file": {"file_id": "f"}}]}]
MESSAGE = ("Unsupported chat content part type: 'file'. Supported types: audio_embeds, audio_url, "
           "image_embeds, image_pil, image_url, input_audio, input_image, input_text, output_text, "
           "prompt_embeds, refusal, text, thinking, tool_reference, video_embeds, video_url. "
           "(parameter=type, value=file)")


@pytest.mark.parametrize("path,body", [
    ("/v1/chat/completions", {"model": "test-model", "messages": USER, "max_tokens": 2}),
    ("/v1/chat/completions", {"model": "test-model", "messages": USER, "max_tokens": 2, "stream": True}),
    ("/v1/chat/completions/render", {"model": "test-model", "messages": USER}),
    ("/tokenize", {"model": "test-model", "messages": USER}),
])
def test_an_unknown_part_type_is_refused_as_vllm_renders_it(api, path, body):
    r = api.post(path, json=body)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert (err["message"], err["type"], err["param"]) == (MESSAGE, "BadRequestError", "type")


def test_every_type_vllm_knows_is_served(api):
    for t in CHAT_PART_TYPES:
        part = {"type": t, "text": "hi", t: "hi"} if t not in ("image_url", "audio_url", "video_url") else {"type": t, t: {"url": "http://x/y"}}
        if t in ("input_audio",):
            part = {"type": t, "input_audio": {"data": "AAAA", "format": "wav"}}
        r = api.post("/tokenize", json={"model": "test-model", "messages": [{"role": "user", "content": [part]}]})
        assert r.status_code == 200, (t, r.text[:300])


def test_a_part_with_a_uuid_takes_vllms_other_branch(api):
    part = {"type": "file", "uuid": "u-1", "image_url": "http://x/y"}
    r = api.post("/tokenize", json={"model": "test-model", "messages": [{"role": "user", "content": [part]}]})
    assert r.status_code == 200, r.text
