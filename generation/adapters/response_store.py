"""Stored Responses-API answers (vLLM's ``VLLM_ENABLE_RESPONSES_API_STORE=1``), for
``GET /v1/responses/{id}`` and ``POST /v1/responses/{id}/cancel``.

vLLM keeps every ``store``d response in memory when that variable is set (and nothing
otherwise: the routes then answer 404).  Here the store is bounded: the oldest entries go first
beyond :data:`MAX_STORED`.
"""
from __future__ import annotations

from collections import OrderedDict

MAX_STORED = 10_000


class ResponseStore:
    """``response id -> response object`` (the JSON dict as returned), oldest dropped first."""

    def __init__(self, limit: int = MAX_STORED):
        self.limit = limit
        self.items: OrderedDict[str, dict] = OrderedDict()

    def put(self, response: dict) -> None:
        self.items[response["id"]] = response
        self.items.move_to_end(response["id"])
        while len(self.items) > self.limit:
            self.items.popitem(last=False)

    def get(self, response_id: str) -> dict | None:
        return self.items.get(response_id)
