"""The names the spans carry are the GenAI conventions' as the pinned package defines them."""

from __future__ import annotations

from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as genai
from opentelemetry.semconv._incubating.metrics import gen_ai_metrics
from opentelemetry.semconv.attributes import (
    client_attributes,
    error_attributes,
    http_attributes,
    server_attributes,
    url_attributes,
)

from ollama_tap.otel import semconv as sc

PINNED = {
    sc.OPERATION: genai.GEN_AI_OPERATION_NAME,
    sc.PROVIDER: genai.GEN_AI_PROVIDER_NAME,
    sc.SYSTEM: genai.GEN_AI_SYSTEM,
    sc.REQUEST_MODEL: genai.GEN_AI_REQUEST_MODEL,
    sc.RESPONSE_MODEL: genai.GEN_AI_RESPONSE_MODEL,
    sc.INPUT_TOKENS: genai.GEN_AI_USAGE_INPUT_TOKENS,
    sc.OUTPUT_TOKENS: genai.GEN_AI_USAGE_OUTPUT_TOKENS,
    sc.CACHED_TOKENS: genai.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS,
    sc.FINISH_REASONS: genai.GEN_AI_RESPONSE_FINISH_REASONS,
    sc.TEMPERATURE: genai.GEN_AI_REQUEST_TEMPERATURE,
    sc.TOP_P: genai.GEN_AI_REQUEST_TOP_P,
    sc.TOP_K: genai.GEN_AI_REQUEST_TOP_K,
    sc.MAX_TOKENS: genai.GEN_AI_REQUEST_MAX_TOKENS,
    sc.SEED: genai.GEN_AI_REQUEST_SEED,
    sc.INPUT_MESSAGES: genai.GEN_AI_INPUT_MESSAGES,
    sc.OUTPUT_MESSAGES: genai.GEN_AI_OUTPUT_MESSAGES,
    sc.SYSTEM_INSTRUCTIONS: genai.GEN_AI_SYSTEM_INSTRUCTIONS,
    sc.TOKEN_TYPE: genai.GEN_AI_TOKEN_TYPE,
    sc.SERVER_ADDRESS: server_attributes.SERVER_ADDRESS,
    sc.SERVER_PORT: server_attributes.SERVER_PORT,
    sc.ERROR_TYPE: error_attributes.ERROR_TYPE,
    sc.HTTP_METHOD: http_attributes.HTTP_REQUEST_METHOD,
    sc.HTTP_ROUTE: http_attributes.HTTP_ROUTE,
    sc.HTTP_STATUS: http_attributes.HTTP_RESPONSE_STATUS_CODE,
    sc.URL_PATH: url_attributes.URL_PATH,
    sc.CLIENT_ADDRESS: client_attributes.CLIENT_ADDRESS,
    sc.OPERATION_DURATION: gen_ai_metrics.GEN_AI_CLIENT_OPERATION_DURATION,
    sc.TOKEN_USAGE: gen_ai_metrics.GEN_AI_CLIENT_TOKEN_USAGE,
    sc.TIME_TO_FIRST_CHUNK: gen_ai_metrics.GEN_AI_CLIENT_OPERATION_TIME_TO_FIRST_CHUNK,
    sc.TIME_PER_OUTPUT_CHUNK: gen_ai_metrics.GEN_AI_CLIENT_OPERATION_TIME_PER_OUTPUT_CHUNK,
}


def test_every_name_is_the_pinned_packages() -> None:
    assert {ours: ours for ours in PINNED} == PINNED


def test_operations_are_the_conventions_values() -> None:
    values = {v.value for v in genai.GenAiOperationNameValues}
    assert {sc.CHAT, sc.TEXT_COMPLETION, sc.EMBEDDINGS} <= values
    assert sc.operation_of("/api/chat") == "chat"
    assert sc.operation_of("/v1/completions") == "text_completion"
    assert sc.operation_of("/v1/embeddings") == "embeddings"
    assert sc.operation_of("/api/tags") is None
    assert sc.span_name("chat", "phi4") == "chat phi4" and sc.span_name("chat", None) == "chat"
