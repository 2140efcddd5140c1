"""pydantic's field order of vLLM's request models, read from vLLM's source without importing it
(its modules import torch): each class's own annotated fields in source order, merged along
the class's MRO as pydantic merges them (``collect_model_fields``: the bases' annotations from
the most basic class down, a field redefined lower keeping its first place; plain mixins'
annotations count, ``ClassVar`` and ``_private`` names do not).

``VLLM_SRC`` (default ``/tmp/vsrc/vllm-0.34.0``) points at an unpacked vLLM sdist;
:data:`MODELS` names each model by its file under ``vllm/entrypoints``.
``python -m support.vllm_source`` (from ``tests/``) prints the orders as JSON for
``tests/fixtures/vllm034_request_field_order.json``."""
from __future__ import annotations

import ast
import json
import os
from pathlib import Path

VLLM_SRC = Path(os.environ.get("VLLM_SRC", "/tmp/vsrc/vllm-0.34.0"))
FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "vllm034_request_field_order.json"

# model -> its module under vllm/entrypoints; the bases it names are looked up in these modules too
MODELS = {
    "ChatCompletionRequest": "openai/chat_completion/protocol.py",
    "BatchChatCompletionRequest": "openai/chat_completion/protocol.py",
    "CompletionRequest": "openai/completion/protocol.py",
    "ResponsesRequest": "openai/responses/protocol.py",
    "EmbeddingCompletionRequest": "pooling/embed/protocol.py",
    "EmbeddingChatRequest": "pooling/embed/protocol.py",
    "TokenizeCompletionRequest": "serve/tokenize/protocol.py",
    "TokenizeChatRequest": "serve/tokenize/protocol.py",
    "DetokenizeRequest": "serve/tokenize/protocol.py",
    "AnthropicMessagesRequest": "anthropic/protocol.py",
    "AnthropicCountTokensRequest": "anthropic/protocol.py",
    "StreamOptions": "generate/base/protocol.py",
    "RerankRequest": "pooling/scoring/protocol.py",
}
BASE_MODULES = ("pooling/base/protocol.py", "generate/base/protocol.py", "serve/engine/protocol.py")


def _own_fields(node: ast.ClassDef) -> list[str]:
    out = []
    for stmt in node.body:
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            name = stmt.target.id
            if name.startswith("_") or ast.unparse(stmt.annotation).startswith(("ClassVar", "typing.ClassVar")):
                continue
            out.append(name)
    return out


def _classes(root: Path) -> dict[str, ast.ClassDef]:
    found = {}
    for rel in {*MODELS.values(), *BASE_MODULES}:
        tree = ast.parse((root / "vllm" / "entrypoints" / rel).read_text())
        found.update({n.name: n for n in tree.body if isinstance(n, ast.ClassDef)})
    return found


def field_orders(root: Path = VLLM_SRC) -> dict[str, list[str]]:
    """``{model: [field, ...]}`` in pydantic's order, for every model of :data:`MODELS`."""
    nodes = _classes(root)
    built: dict[str, type] = {}

    def build(name: str) -> type:
        if name not in built:
            node = nodes.get(name)
            bases = tuple(dict.fromkeys(build(ast.unparse(b)) for b in node.bases)) if node else ()
            built[name] = type(name, bases, {"fields": _own_fields(node) if node else []})
        return built[name]

    orders = {}
    for model in MODELS:
        merged: dict[str, None] = {}
        for cls in reversed(build(model).__mro__):
            merged.update(dict.fromkeys(cls.__dict__.get("fields", ())))
        orders[model] = list(merged)
    return orders


def fixture() -> dict[str, list[str]]:
    return json.loads(FIXTURE.read_text())


if __name__ == "__main__":
    print(json.dumps(field_orders(), indent=1))
