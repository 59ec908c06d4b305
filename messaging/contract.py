"""The private-messaging/v1 contract, copied from the seed (sosoapi_dm_actions_status): the
input and output JSON Schemas the MCP tools publish and the DRF views validate against."""

from __future__ import annotations

from typing import Any

from core.formats import rfc3339
from core.schema import fullmatch_pattern

CONTRACT_VERSION = "private-messaging/v1"
STATUSES = ["queued", "claimed", "sending", "sent", "unknown", "failed", "cancelled"]

STATUS_INPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "workspace_id": {"type": "string", "format": "uuid"},
        "social_account_id": {"type": "string", "format": "uuid"},
        "action_id": {"type": "string", "format": "uuid"},
        "idempotency_key": {"type": "string", "format": "uuid"},
    },
    "required": ["workspace_id", "social_account_id"],
    "additionalProperties": False,
}

DATE_TIME_PATTERN = (
    r"^(?:(?:\d\d[2468][048]|\d\d[13579][26]|\d\d0[48]|[02468][048]00|[13579][26]00)-02-29|"
    r"\d{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12]\d|3[01])|(?:0[469]|11)-(?:0[1-9]|[12]\d|30)|"
    r"(?:02)-(?:0[1-9]|1\d|2[0-8])))T(?:(?:[01]\d|2[0-3]):[0-5]\d(?::[0-5]\d(?:\.\d+)?)?"
    r"(?:Z|([+-](?:[01]\d|2[0-3]):[0-5]\d)))$"
)

STATUS_OUTPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "contract_version": {"type": "string", "const": CONTRACT_VERSION},
        "action": {
            "type": "object",
            "properties": {
                "id": {"type": "string", "format": "uuid"},
                "conversation_id": {"type": "string", "format": "uuid"},
                "status": {"type": "string", "enum": STATUSES},
                "provider_message_id": {"type": ["string", "null"]},
                "reason": {"type": ["string", "null"]},
                "created_at": {
                    "type": "string",
                    "pattern": DATE_TIME_PATTERN,
                    "format": "date-time",
                },
            },
            "required": [
                "id",
                "conversation_id",
                "status",
                "provider_message_id",
                "reason",
                "created_at",
            ],
            "additionalProperties": False,
        },
    },
    "required": ["contract_version", "action"],
    "$schema": "http://json-schema.org/draft-07/schema#",
    "additionalProperties": False,
}

ANNOTATIONS = {
    "readOnlyHint": True,
    "destructiveHint": False,
    "idempotentHint": True,
    "openWorldHint": False,
}

# The send side (ours; the seed only implies it): same style, strict.
SEND_INPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "workspace_id": {"type": "string", "format": "uuid"},
        "social_account_id": {"type": "string", "format": "uuid"},
        "conversation_id": {"type": "string", "format": "uuid"},
        # Matched whole: `$` alone lets "4244\n" through in Python (core.schema.END).
        "recipient_id": {"type": "string", "pattern": fullmatch_pattern(r"[0-9]{1,19}")},
        "text": {"type": "string", "minLength": 1, "maxLength": 10000},
        "idempotency_key": {"type": "string", "format": "uuid"},
    },
    "required": ["workspace_id", "social_account_id", "text", "idempotency_key"],
    "additionalProperties": False,
}

CANCEL_INPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "workspace_id": {"type": "string", "format": "uuid"},
        "social_account_id": {"type": "string", "format": "uuid"},
        "action_id": {"type": "string", "format": "uuid"},
    },
    "required": ["workspace_id", "social_account_id", "action_id"],
    "additionalProperties": False,
}


def action_payload(delivery) -> dict[str, Any]:
    return {
        "contract_version": CONTRACT_VERSION,
        "action": {
            "id": str(delivery.id),
            "conversation_id": str(delivery.conversation_id),
            "status": delivery.status,
            "provider_message_id": delivery.provider_message_id,
            "reason": delivery.reason,
            "created_at": rfc3339(delivery.created_at),
        },
    }
