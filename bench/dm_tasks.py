"""The protocol baselines of `bench/dm_worker.py`: an at-most-once DM delivery reduced to its
irreducible work, in raw SQL. One conditional UPDATE claims the delivery straight to `sending`
with its history row, committed before the first byte leaves; the HTTP POST to the provider;
`sent` with its history row, committed. History rows carry the delivery's trace id, as the
project's do. Loaded into the worker with `--include`.

Two forms of the same work: `protocol_deliver_now` wraps each transition in BEGIN/COMMIT
(UPDATE, then INSERT: 8 statements per delivery); `floor_deliver_now` makes each transition
one statement (a CTE: the conditional UPDATE and the history INSERT, atomic by itself in
autocommit: 2 statements per delivery), the tighter floor."""

from __future__ import annotations

import http.client
import json
import os
from urllib.parse import quote, urlsplit

from celery import shared_task
from django.conf import settings
from django.db import connection, transaction

HISTORY = (
    "INSERT INTO messaging_deliverystatushistory "
    "(delivery_id, from_status, status, timestamp, detail, actor_kind, payload, trace_id) "
    "VALUES (%s, %s, %s, now(), %s, 'worker', %s, %s)"
)


def protocol_deliver_now(delivery_id: str) -> str:
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            "UPDATE messaging_delivery d SET status = 'sending', lease_owner = %s, "
            "lease_expires_at = now() + interval '60 seconds', updated_at = now() "
            "FROM messaging_conversation c WHERE d.id = %s AND d.status = 'queued' "
            "AND c.id = d.conversation_id RETURNING d.text, c.recipient_id, d.trace_id",
            [str(os.getpid()), delivery_id],
        )
        row = cursor.fetchone()
        if row is None:
            return "not_claimed"
        text, recipient, trace_id = row
        cursor.execute(HISTORY, [delivery_id, "queued", "sending", "sending", None, trace_id])
    url = urlsplit(settings.X_API_BASE_URL)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=5)
    conn.request(
        "POST",
        f"/2/dm_conversations/with/{quote(recipient, safe='')}/messages",
        body=json.dumps({"text": text}),
        headers={
            "Authorization": f"Bearer {os.environ['BENCH_X_TOKEN']}",
            "Content-Type": "application/json",
        },
    )
    answer = conn.getresponse()
    payload = json.loads(answer.read())
    conn.close()
    message_id = payload["data"]["dm_event_id"]
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            "UPDATE messaging_delivery SET status = 'sent', provider_message_id = %s, "
            "lease_expires_at = NULL, updated_at = now() WHERE id = %s AND status = 'sending'",
            [message_id, delivery_id],
        )
        cursor.execute(
            HISTORY, [delivery_id, "sending", "sent", message_id, json.dumps(payload), trace_id]
        )
    return "sent"


def _post(recipient: str, text: str) -> tuple[str, dict]:
    url = urlsplit(settings.X_API_BASE_URL)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=5)
    conn.request(
        "POST",
        f"/2/dm_conversations/with/{quote(recipient, safe='')}/messages",
        body=json.dumps({"text": text}),
        headers={
            "Authorization": f"Bearer {os.environ['BENCH_X_TOKEN']}",
            "Content-Type": "application/json",
        },
    )
    answer = conn.getresponse()
    payload = json.loads(answer.read())
    conn.close()
    return payload["data"]["dm_event_id"], payload


FLOOR_HISTORY = (
    "h AS (INSERT INTO messaging_deliverystatushistory "
    "(delivery_id, from_status, status, timestamp, detail, actor_kind, payload, trace_id) "
    "SELECT id, %s, %s, now(), %s, 'worker', CAST(%s AS jsonb), trace_id FROM u)"
)


def floor_deliver_now(delivery_id: str) -> str:
    with connection.cursor() as cursor:
        cursor.execute(
            "WITH u AS (UPDATE messaging_delivery d SET status = 'sending', lease_owner = %s, "
            "lease_expires_at = now() + interval '60 seconds', updated_at = now() "
            "FROM messaging_conversation c WHERE d.id = %s AND d.status = 'queued' "
            "AND c.id = d.conversation_id RETURNING d.id, d.text, c.recipient_id, d.trace_id), "
            f"{FLOOR_HISTORY} SELECT recipient_id, text FROM u",
            [str(os.getpid()), delivery_id, "queued", "sending", "sending", None],
        )
        row = cursor.fetchone()
    if row is None:
        return "not_claimed"
    message_id, payload = _post(*row)
    with connection.cursor() as cursor:
        cursor.execute(
            "WITH u AS (UPDATE messaging_delivery SET status = 'sent', provider_message_id = %s, "
            "lease_expires_at = NULL, updated_at = now() WHERE id = %s AND status = 'sending' "
            f"RETURNING id, trace_id), {FLOOR_HISTORY} SELECT 1 FROM u",
            [message_id, delivery_id, "sending", "sent", message_id, json.dumps(payload)],
        )
    return "sent"


@shared_task(name="bench.floor_deliver", acks_late=False)
def floor_deliver(delivery_id: str) -> str:
    return floor_deliver_now(delivery_id)


@shared_task(name="bench.protocol_deliver", acks_late=False)
def protocol_deliver(delivery_id: str) -> str:
    return protocol_deliver_now(delivery_id)
