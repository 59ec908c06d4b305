from __future__ import annotations

import uuid
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connections
from django.db.models import Q, QuerySet
from django.utils import timezone

from messaging.errors import Forbidden, NotFound
from messaging.models import Conversation, D, Delivery, Membership, SocialAccount


def _uuid(value) -> uuid.UUID | None:
    try:
        return uuid.UUID(str(value))
    except ValueError:
        return None


def membership_role(*, user, workspace_id) -> str | None:
    return (
        Membership.objects.filter(workspace_id=workspace_id, user=user)
        .values_list("role", flat=True)
        .first()
    )


def social_account_for(
    *, user, workspace_id, social_account_id, roles
) -> tuple[SocialAccount, str]:
    """The social account, if the user is a member of its workspace with one of `roles`.

    A non-member, an unknown workspace and an account of another workspace all look the same.
    """
    role = membership_role(user=user, workspace_id=workspace_id)
    account = SocialAccount.objects.filter(pk=social_account_id, workspace_id=workspace_id).first()
    if role is None or account is None:
        raise NotFound("Social account not found in this workspace")
    if role not in roles:
        raise Forbidden(f"Your role in this workspace ({role}) does not allow this")
    return account, role


def delivery_lookup(*, account: SocialAccount, action_id=None, idempotency_key=None) -> Delivery:
    deliveries = Delivery.objects.filter(
        workspace_id=account.workspace_id, social_account=account
    ).prefetch_related("history")
    if action_id is not None:
        delivery = deliveries.filter(pk=action_id).first()
        what = f"action_id {action_id}"
    else:
        delivery = deliveries.filter(idempotency_key=idempotency_key).first()
        what = f"idempotency_key {idempotency_key}"
    if delivery is None:
        raise NotFound(
            f"Delivery not found: no action with {what} for this workspace and social account. "
            "Nothing was recorded for it, so nothing was sent; a send with the same "
            "idempotency_key is safe."
        )
    return delivery


def deliveries_due_q(now: datetime) -> Q:
    """Claimable: queued and due, or claimed with no live lease (nothing was sent yet)."""
    lapsed = Q(lease_expires_at__isnull=True) | Q(lease_expires_at__lt=now)
    return Q(status=D.QUEUED, next_attempt_at__lte=now) | (
        Q(status=D.CLAIMED, next_attempt_at__lte=now) & lapsed
    )


def deliveries_stuck(now: datetime | None = None) -> QuerySet[Delivery]:
    """What support must look at: `unknown` (only staff resolve it, so it waits for them
    whatever its age), `claimed`/`sending` past the lease, and work due for longer than a
    lease that no worker has picked up (beat or workers down)."""
    now = now or timezone.now()
    overdue = now - timedelta(seconds=settings.DM_LEASE_SECONDS)
    return Delivery.objects.filter(
        Q(status=D.UNKNOWN)
        | Q(status__in=(D.CLAIMED, D.SENDING), lease_expires_at__lt=now)
        | Q(
            status__in=(D.QUEUED, D.CLAIMED),
            lease_expires_at__isnull=True,
            next_attempt_at__lt=overdue,
        )
    )


# The models of `delivery_for_attempt`'s row, in column order, with their table aliases.
_ATTEMPT_PARTS = ((Delivery, "d"), (SocialAccount, "a"), (Conversation, "c"))
_attempt_plans: dict[str, tuple] = {}


def _attempt_plan(using: str) -> tuple:
    """The statement of `delivery_for_attempt` and, per model, its attribute names and column
    converters, worked out once per database (compiling the ORM's select_related query cost
    more CPU than running it, once per delivery)."""
    if using not in _attempt_plans:
        quote = connections[using].ops.quote_name
        columns, plans = [], []
        for model, alias in _ATTEMPT_PARTS:
            fields = model._meta.concrete_fields
            columns += [f"{alias}.{quote(field.column)}" for field in fields]
            table = model._meta.db_table
            converters = (
                model._default_manager.none()
                .query.get_compiler(using)
                .get_converters([field.get_col(table) for field in fields])
            )
            plans.append((model, [field.attname for field in fields], converters))
        delivery = Delivery._meta
        sql = (
            f"SELECT {', '.join(columns)} FROM {quote(delivery.db_table)} d "
            f"JOIN {quote(SocialAccount._meta.db_table)} a "
            f"ON a.{quote(SocialAccount._meta.pk.column)} = "
            f"d.{quote(delivery.get_field('social_account').column)} "
            f"JOIN {quote(Conversation._meta.db_table)} c "
            f"ON c.{quote(Conversation._meta.pk.column)} = "
            f"d.{quote(delivery.get_field('conversation').column)} "
            f"WHERE d.{quote(delivery.pk.column)} = %s"
        )
        _attempt_plans[using] = (sql, plans)
    return _attempt_plans[using]


def delivery_for_attempt(*, delivery_id) -> Delivery | None:
    """A delivery with its social account (credential, provider) and conversation (recipient)
    loaded, as `select_related` would, in one statement: what a worker's attempt reads."""
    pk = _uuid(delivery_id)
    if pk is None:
        return None
    using = Delivery.objects.db
    connection = connections[using]
    sql, plans = _attempt_plan(using)
    with connection.cursor() as cursor:
        cursor.execute(sql, [Delivery._meta.pk.get_db_prep_value(pk, connection)])
        row = cursor.fetchone()
    if row is None:
        return None
    instances, start = [], 0
    for model, names, converters in plans:
        values = list(row[start : start + len(names)])
        start += len(names)
        for index, (functions, expression) in converters.items():
            for convert in functions:
                values[index] = convert(values[index], expression, connection)
        instances.append(model.from_db(using, names, values))
    delivery, account, conversation = instances
    # Set through the descriptors: cached, as select_related leaves them.
    delivery.social_account, delivery.conversation = account, conversation
    return delivery
