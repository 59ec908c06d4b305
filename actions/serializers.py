from __future__ import annotations

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from actions.bridges.public import OUTCOMES, action_outcome, bridge_leg_of
from actions.execution.models import ActionStatus, ActionType
from actions.presenters import signing_permission


class StatusHistoryEntrySerializer(serializers.Serializer):
    status = serializers.ChoiceField(choices=ActionStatus.choices, read_only=True)
    timestamp = serializers.DateTimeField(read_only=True)
    detail = serializers.CharField(read_only=True, allow_null=True)


class ActionStatusSerializer(serializers.Serializer):
    """`get_action_status`: the seed's fields, then which spending permission signed it (null
    when the passkey did); every field always present."""

    action_id = serializers.CharField(source="id", read_only=True)
    type = serializers.ChoiceField(choices=ActionType.choices, read_only=True)
    status = serializers.ChoiceField(choices=ActionStatus.choices, read_only=True)
    summary = serializers.CharField(read_only=True)
    chain_id = serializers.IntegerField(read_only=True)
    smart_account = serializers.CharField(read_only=True)
    tx_hash = serializers.CharField(read_only=True, allow_null=True)
    user_op_hash = serializers.CharField(read_only=True, allow_null=True)
    block_number = serializers.IntegerField(read_only=True, allow_null=True)
    error = serializers.CharField(read_only=True, allow_null=True)
    created_at = serializers.DateTimeField(read_only=True)
    expires_at = serializers.DateTimeField(read_only=True)
    signed_at = serializers.DateTimeField(read_only=True, allow_null=True)
    broadcast_at = serializers.DateTimeField(read_only=True, allow_null=True)
    executed_at = serializers.DateTimeField(read_only=True, allow_null=True)
    status_history = StatusHistoryEntrySerializer(source="transitions", many=True, read_only=True)
    signed_by_permission = serializers.SerializerMethodField(
        help_text="The name of the spending permission whose key signed it, with no prompt; "
        "null when the user signed it with the passkey."
    )
    signed_by_permission_id = serializers.SerializerMethodField(
        help_text="That permission's id (get_spend_permissions' permission_id), or null."
    )

    outcome = serializers.SerializerMethodField(
        help_text="What happened, beside the seed's status: a cross-chain swap whose source "
        "transaction is executed can still be refunded, get another token, fail or wait on the "
        "bridge (pending). completed, refunded, partial, failed, pending, expired or rejected.",
    )
    outcome_detail = serializers.SerializerMethodField(
        help_text="That outcome in one English line (what came back, where, its tx), or null.",
    )

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_signed_by_permission(self, action) -> str | None:
        signer = signing_permission(action)
        return signer[1] if signer else None

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_signed_by_permission_id(self, action) -> str | None:
        signer = signing_permission(action)
        return signer[0] if signer else None

    @extend_schema_field(serializers.ChoiceField(choices=[(o, o) for o in OUTCOMES]))
    def get_outcome(self, action) -> str:
        return action_outcome(action, bridge_leg_of(action))[0]

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_outcome_detail(self, action) -> str | None:
        return action_outcome(action, bridge_leg_of(action))[1]
