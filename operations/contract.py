"""The operations API contract: tong_operation_status's response written from the seed (003_…),
and the input of each endpoint. The DRF views validate against these (core.api.ApiView); the
MCP adapter publishes the status tool's (mcp_adapter.tools)."""

from __future__ import annotations

DATE = {"type": "string", "format": "date-time"}
NULLABLE_DATE = {"type": ["string", "null"], "format": "date-time"}
CREDITS = {"type": "string", "pattern": r"^-?\d+\.\d{6}$"}
UUID = {"type": "string", "format": "uuid"}
CHANNEL = {"type": "string", "enum": ["api", "mcp"]}
MS = {"type": ["number", "null"], "minimum": 0}
COUNT = {"type": "number", "minimum": 0}

OPERATION_STATUS_SCHEMA = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "type": "object",
    "additionalProperties": False,
    "required": [
        "id",
        "tool",
        "category",
        "channel",
        "state",
        "status",
        "stage",
        "dispatch_status",
        "created_at",
        "updated_at",
        "detail_expires_at",
        "detail_expired",
        "timing",
        "review",
        "result",
        "error",
        "billing",
    ],
    "properties": {
        "id": UUID,
        "tool": {"type": "string"},
        "category": {"type": "string"},
        "channel": CHANNEL,
        "state": {
            "type": "string",
            "enum": [
                "queued",
                "running",
                "waiting",
                "needs_review",
                "paused",
                "reconciling",
                "succeeded",
                "failed",
                "cancelled",
            ],
        },
        "status": {
            "type": "string",
            "enum": [
                "accepted",
                "running",
                "needs_review",
                "paused",
                "reconciling",
                "succeeded",
                "failed",
                "cancelled",
            ],
        },
        "stage": {
            "type": "string",
            "enum": ["admission", "dispatch", "review", "generation", "reconciliation", "complete"],
        },
        "dispatch_status": {"type": "string", "enum": ["pending", "unknown", "acknowledged"]},
        "created_at": DATE,
        "updated_at": DATE,
        "detail_expires_at": NULLABLE_DATE,
        "detail_expired": {"type": "boolean"},
        "timing": {
            "type": "object",
            "additionalProperties": False,
            "required": [
                "dispatch_started_at",
                "acknowledged_at",
                "completed_at",
                "dispatch_acknowledgement_ms",
                "end_to_end_ms",
            ],
            "properties": {
                "dispatch_started_at": NULLABLE_DATE,
                "acknowledged_at": NULLABLE_DATE,
                "completed_at": NULLABLE_DATE,
                "dispatch_acknowledgement_ms": MS,
                "end_to_end_ms": MS,
            },
        },
        "review": {},
        "result": {},
        "error": {
            "type": ["object", "null"],
            "additionalProperties": False,
            "required": ["code"],
            "properties": {"code": {"type": "string"}},
        },
        "billing": {
            "type": "object",
            "additionalProperties": False,
            "required": ["status", "usage_credits", "wallet_debited_credits"],
            "properties": {
                "status": {
                    "type": "string",
                    "enum": ["none", "pending", "settled", "released", "reconciling"],
                },
                "usage_credits": CREDITS,
                "wallet_debited_credits": CREDITS,
                "released_credits": CREDITS,
                "refunded_credits": CREDITS,
                "unfunded_credits": CREDITS,
                "pending_credits": CREDITS,
                "tokens": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {
                        "input": COUNT,
                        "output": COUNT,
                        "cached": COUNT,
                        "cache_write": COUNT,
                    },
                },
                "components": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "additionalProperties": False,
                        "required": [
                            "source_id",
                            "tool",
                            "model",
                            "channel",
                            "credential_id",
                            "kind",
                            "usage_credits",
                            "wallet_debited_credits",
                        ],
                        "properties": {
                            "id": {"type": "string"},
                            "source_id": {"type": "string"},
                            "tool": {"type": "string"},
                            "model": {"type": ["string", "null"]},
                            "channel": CHANNEL,
                            "credential_id": {"type": "string"},
                            "kind": {
                                "type": "string",
                                "enum": ["text_pool", "reasoning", "generation"],
                            },
                            "usage_credits": CREDITS,
                            "wallet_debited_credits": CREDITS,
                            "evidence_at": DATE,
                            "updated_at": DATE,
                        },
                    },
                },
            },
        },
        "quote": {
            "type": "object",
            "additionalProperties": False,
            "required": [
                "id",
                "operation_id",
                "tool",
                "operation",
                "model",
                "configuration",
                "submit_value",
                "submit_field",
                "quoted_credits",
                "expires_at",
            ],
            "properties": {
                "id": UUID,
                "operation_id": UUID,
                "tool": {"type": "string"},
                "operation": {"type": ["string", "null"]},
                "model": {"type": ["string", "null"]},
                "configuration": {"type": "object"},
                "submit_value": {"type": "string"},
                "submit_field": {"type": "string"},
                "quoted_credits": {"anyOf": [CREDITS, {"type": "null"}]},
                "expires_at": NULLABLE_DATE,
            },
        },
    },
}


# --- inputs ---------------------------------------------------------------------------------

# operation_id is in the path: a malformed one answers "Operation not found: …", like another
# owner's operation.
STATUS_INPUT_SCHEMA = {
    "type": "object",
    "properties": {"operation_id": {"type": "string", "format": "uuid"}},
    "required": ["operation_id"],
    "additionalProperties": False,
}


def _text(max_length: int) -> dict:
    """A string with something in it besides spaces."""
    return {"type": "string", "minLength": 1, "maxLength": max_length, "pattern": r"\S"}


def _optional(schema: dict) -> dict:
    return {**schema, "type": ["string", "null"]}


# Lengths are the columns' (Operation/Quote.tool, category, model, operation_name and
# submit_field are CharField(max_length=100)); NUL and lone surrogates are refused for every
# input by core.schema.
NAME = _text(100)
# A quote's output budget: a whole number of tokens, at least 1; the ceiling keeps the hold a
# price (quoted_credits is DECIMAL(20, 6)) and is above any model's output limit.
MAX_OUTPUT_TOKENS_LIMIT = 1_000_000
# The Responses API refuses a smaller `max_output_tokens`: a quote below it could not be sent.
MIN_OUTPUT_TOKENS = 16

# `input` may be left out only when a quote_id brings the submit value (checked in the view).
SUBMIT_INPUT_SCHEMA = {
    "type": "object",
    "properties": {
        "tool": NAME,
        "category": NAME,
        "channel": CHANNEL,
        "model": _optional(NAME),
        "input": _optional(_text(100_000)),
        "quote_id": _optional(UUID),
        "idempotency_key": {
            "type": ["string", "null"],
            "minLength": 1,
            "maxLength": 200,
            "pattern": r"^[\x21-\x7e]+$",
            "description": "the same key returns the same operation instead of a second one",
        },
    },
    "required": ["tool", "category"],
    "additionalProperties": False,
}

QUOTE_INPUT_SCHEMA = {
    "type": "object",
    "properties": {
        "tool": NAME,
        "submit_field": NAME,
        "submit_value": _text(100_000),
        "model": _optional(NAME),
        "operation": _optional(NAME),
        "configuration": {
            "type": ["object", "null"],
            "properties": {
                "max_output_tokens": {
                    "type": "integer",
                    "minimum": MIN_OUTPUT_TOKENS,
                    "maximum": MAX_OUTPUT_TOKENS_LIMIT,
                    "description": "the answer's token budget the quote prices",
                },
            },
        },
    },
    "required": ["tool", "submit_field", "submit_value"],
    "additionalProperties": False,
}


# --- MCP: quote, start, cancel, result ------------------------------------------------------
# Each is the API's own contract (the view validates with the same dict): the start tool is the
# submit body with a quote and a key required, and no input (the quote brings it).

QUOTE_BREAKDOWN = {
    "type": "object",
    "additionalProperties": False,
    "required": [
        "input_tokens",
        "input_credits",
        "max_output_tokens",
        "output_credits",
        "total_credits",
    ],
    "properties": {
        "input_tokens": {"type": "integer", "minimum": 1},
        "input_credits": CREDITS,
        "max_output_tokens": {"type": "integer", "minimum": 1},
        "output_credits": CREDITS,
        "total_credits": CREDITS,
    },
}

QUOTE_SCHEMA = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "type": "object",
    "additionalProperties": False,
    "required": [
        *OPERATION_STATUS_SCHEMA["properties"]["quote"]["required"],
        "breakdown",
    ],
    "properties": {
        **{
            k: v
            for k, v in OPERATION_STATUS_SCHEMA["properties"]["quote"]["properties"].items()
            if k != "operation_id"
        },
        "breakdown": QUOTE_BREAKDOWN,
    },
}
QUOTE_SCHEMA["required"].remove("operation_id")

START_INPUT_SCHEMA = {
    "type": "object",
    "properties": {
        name: SUBMIT_INPUT_SCHEMA["properties"][name]
        for name in ("tool", "category", "model", "quote_id", "idempotency_key")
    },
    "required": ["tool", "category", "quote_id", "idempotency_key"],
    "additionalProperties": False,
}
START_INPUT_SCHEMA["properties"]["quote_id"] = UUID
START_INPUT_SCHEMA["properties"]["idempotency_key"] = {
    **SUBMIT_INPUT_SCHEMA["properties"]["idempotency_key"],
    "type": "string",
}

# cancel and result take the id in the path, like the status.
CANCEL_INPUT_SCHEMA = STATUS_INPUT_SCHEMA
RESULT_INPUT_SCHEMA = STATUS_INPUT_SCHEMA

RESULT_SCHEMA = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "type": "object",
    "additionalProperties": False,
    "required": ["operation_id", "state", "ready", "result", "detail_expires_at"],
    "properties": {
        "operation_id": UUID,
        "state": OPERATION_STATUS_SCHEMA["properties"]["state"],
        "ready": {"type": "boolean", "description": "true once the operation succeeded"},
        "result": OPERATION_STATUS_SCHEMA["properties"]["result"],
        "detail_expires_at": NULLABLE_DATE,
    },
}
