"""Deactivating a user stops everything done in their name, in one place.

Whichever way `is_active` goes from true to false (`user_deactivate`, the admin's checkbox, a
shell's `user.save()`; not a queryset's `update()`, which sends no signal), `user_deactivated` is sent once the change commits, and each app that
holds something of the user ends it: oauth revokes their tokens (which also ends their MCP
streams at the next re-check), actions destroys their spending permissions' session keys and
proposes the on-chain revocation. The apps are siblings above core, so they receive a signal.
Reactivating sends nothing: what was ended stays ended (new tokens, new permissions)."""

from __future__ import annotations

import logging

from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models.signals import post_save, pre_save

from core.agents import user_deactivated
from core.lifecycle import Actor

logger = logging.getLogger(__name__)


def user_deactivate(*, user, actor: Actor, why: str = "the user was deactivated") -> bool:
    """Set the user inactive and end what they hold (tokens, streams, spending keys). True if
    they were active. The save's hook does the ending, so every path ends the same things."""
    with transaction.atomic():
        model = get_user_model()
        locked = model.objects.select_for_update().get(pk=user.pk)
        if not locked.is_active:
            user.is_active = False
            return False
        locked.is_active = False
        locked._deactivation = (actor, why)
        locked.save(update_fields=["is_active"])
    user.is_active = False
    return True


def _remember_was_active(sender, instance, raw=False, update_fields=None, **kwargs) -> None:
    if (
        raw
        or instance.pk is None
        or (update_fields is not None and "is_active" not in update_fields)
    ):
        instance._was_active = None  # is_active is not written (a login's last_login)
        return
    instance._was_active = (
        sender.objects.filter(pk=instance.pk).values_list("is_active", flat=True).first()
    )


def _on_saved(sender, instance, created=False, raw=False, **kwargs) -> None:
    was_active = getattr(instance, "_was_active", None)
    if raw or created or not was_active or instance.is_active:
        return
    actor, why = getattr(instance, "_deactivation", (Actor.system(), "the user was deactivated"))
    user_id = instance.pk
    # After the commit: a save rolled back deactivates nobody, and no receiver's chain call
    # runs inside the saver's transaction.
    transaction.on_commit(lambda: _send(user_id, actor, why))


def _send(user_id, actor: Actor, why: str) -> None:
    user = get_user_model().objects.get(pk=user_id)
    for receiver, answer in user_deactivated.send_robust(
        sender=None, user=user, actor=actor, why=why
    ):
        if isinstance(answer, Exception):
            # The token checks refuse an inactive user anyway; what failed here is logged
            # with its traceback for staff to finish.
            logger.error("deactivating user %s: %s failed", user_id, receiver, exc_info=answer)


def connect() -> None:
    model = get_user_model()
    pre_save.connect(_remember_was_active, sender=model, dispatch_uid="user-deactivation-pre")
    post_save.connect(_on_saved, sender=model, dispatch_uid="user-deactivation-post")
