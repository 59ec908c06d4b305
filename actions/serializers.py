from __future__ import annotations

from rest_framework import serializers

from actions.models import ActionStatus, ActionType


class StatusHistoryEntrySerializer(serializers.Serializer):
    status = serializers.ChoiceField(choices=ActionStatus.choices, read_only=True)
    timestamp = serializers.DateTimeField(read_only=True)
    detail = serializers.CharField(read_only=True, allow_null=True)


class ActionStatusSerializer(serializers.Serializer):
    """`get_action_status`: exactly the seed's fields; every field always present."""

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
