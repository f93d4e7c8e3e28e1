"""The names spans and metrics carry: the GenAI semantic conventions as pinned, and our own.

Pinned to the GenAI names as `opentelemetry-semantic-conventions` 0.66b2 defines them
(tests/otel/test_semconv.py checks each against that package); docs/opentelemetry.md says
what each holds.
"""

from __future__ import annotations

from typing import Final

from ollama_tap.ollama import routes

OPERATION: Final = "gen_ai.operation.name"
PROVIDER: Final = "gen_ai.provider.name"
SYSTEM: Final = "gen_ai.system"
"""The provider's name before `gen_ai.provider.name` replaced it; sent unless opted out."""
REQUEST_MODEL: Final = "gen_ai.request.model"
RESPONSE_MODEL: Final = "gen_ai.response.model"
INPUT_TOKENS: Final = "gen_ai.usage.input_tokens"
OUTPUT_TOKENS: Final = "gen_ai.usage.output_tokens"
CACHED_TOKENS: Final = "gen_ai.usage.cache_read.input_tokens"
FINISH_REASONS: Final = "gen_ai.response.finish_reasons"
TEMPERATURE: Final = "gen_ai.request.temperature"
TOP_P: Final = "gen_ai.request.top_p"
TOP_K: Final = "gen_ai.request.top_k"
MAX_TOKENS: Final = "gen_ai.request.max_tokens"
SEED: Final = "gen_ai.request.seed"
INPUT_MESSAGES: Final = "gen_ai.input.messages"
OUTPUT_MESSAGES: Final = "gen_ai.output.messages"
SYSTEM_INSTRUCTIONS: Final = "gen_ai.system_instructions"
TOKEN_TYPE: Final = "gen_ai.token.type"
SERVER_ADDRESS: Final = "server.address"
SERVER_PORT: Final = "server.port"
ERROR_TYPE: Final = "error.type"
HTTP_METHOD: Final = "http.request.method"
HTTP_ROUTE: Final = "http.route"
HTTP_STATUS: Final = "http.response.status_code"
URL_PATH: Final = "url.path"
CLIENT_ADDRESS: Final = "client.address"

OPERATION_DURATION: Final = "gen_ai.client.operation.duration"
TOKEN_USAGE: Final = "gen_ai.client.token.usage"
TIME_TO_FIRST_CHUNK: Final = "gen_ai.client.operation.time_to_first_chunk"
TIME_PER_OUTPUT_CHUNK: Final = "gen_ai.client.operation.time_per_output_chunk"

PROVIDER_OLLAMA: Final = "ollama"

CHAT: Final = "chat"
TEXT_COMPLETION: Final = "text_completion"
EMBEDDINGS: Final = "embeddings"
_OPERATIONS: Final = {
    "/api/chat": CHAT,
    "/v1/chat/completions": CHAT,
    "/v1/messages": CHAT,
    "/v1/responses": CHAT,
    "/api/generate": TEXT_COMPLETION,
    "/v1/completions": TEXT_COMPLETION,
    **dict.fromkeys(routes.EMBEDDING_ENDPOINTS, EMBEDDINGS),
}
"""The GenAI operation of each route that gets a span: every inference and embedding one."""

TAP: Final = "ollama_tap."
"""The prefix of the proxy's own attributes and events."""
FIRST_TOKEN_EVENT: Final = TAP + "first_token"
FIRST_CONTENT_EVENT: Final = TAP + "first_content"


def operation_of(endpoint: str) -> str | None:
    """The GenAI operation of a route, or None for a route that gets no span."""
    return _OPERATIONS.get(endpoint)


def span_name(operation: str, model: str | None) -> str:
    """`{operation} {model}`, or the operation alone without a model (the conventions)."""
    return f"{operation} {model}" if model else operation
