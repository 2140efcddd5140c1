"""The error raised anywhere in the simulator and rendered as vLLM's error envelope."""
from __future__ import annotations

_TYPES = {400: "BadRequestError", 401: "AuthenticationError", 403: "PermissionDeniedError",
          404: "NotFoundError", 413: "RequestEntityTooLarge", 422: "UnprocessableEntityError",
          429: "RateLimitError"}


def error_type(status: int) -> str:
    """vLLM / reference error ``type`` for an HTTP status (api.md 2.1)."""
    if status >= 500:
        return "InternalServerError"
    return _TYPES.get(status, "APIConnectionError")


class APIError(Exception):
    """A client-visible error: HTTP ``status`` and vLLM's body
    ``{"error": {"message", "type", "param", "code"}}``."""

    def __init__(self, message: str, status: int = 400, param: str | None = None,
                 type_: str | None = None):
        super().__init__(message)
        self.message = message
        self.status = status
        self.param = param
        self.type = type_ or error_type(status)

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param,
                          "code": self.status}}


def model_not_found(model) -> APIError:
    return APIError(f"The model `{model if model is not None else ''}` does not exist.", 404, "model")
