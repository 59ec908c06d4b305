"""The user's spending permissions page: what each agent may spend without asking, what
remains of this period (read from the chain), what was spent under it, and Revoke (the
session key is destroyed at once; the on-chain revocation is signed with one passkey prompt)."""

from __future__ import annotations

import uuid

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST

from actions.evm_clients import ChainUnavailable
from actions.permissions.follow import spend_permission_follow
from actions.permissions.grants import recipients_text
from actions.permissions.models import SpendPermissionStatus
from actions.permissions.revoking import revoke_sign_path, spend_permissions_revoke
from actions.permissions.selectors import spend_permissions_for_user
from actions.permissions.spending import remaining
from core.api import error_json
from core.echo import prefix
from core.formats import decimal_string
from core.lifecycle import Actor

P = SpendPermissionStatus
# Where a Revoke button shows: the grant is live, or its revocation was never signed.
REVOCABLE = (P.REQUESTED, P.GRANTING, P.ACTIVE, P.REVOKING)


@login_required
def permissions_page(request: HttpRequest) -> HttpResponse:
    rows = []
    for permission in spend_permissions_for_user(user=request.user):
        permission = spend_permission_follow(permission)
        left = remaining(permission) if permission.status == P.ACTIVE else None
        revoke_open = bool(
            permission.revoke_action_id
            and permission.revoke_action.status in ("proposed", "signed", "submitted", "broadcast")
        )
        rows.append(
            {
                "permission": permission,
                "recipients": recipients_text(permission.recipients),
                "remaining": decimal_string(left.units, permission.token.decimals)
                if left and left.units is not None
                else None,
                "remaining_error": left.error if left else "",
                "period_ends_at": left.period_ends_at if left else None,
                "spends": permission.actions.filter(type__in=("transfer", "swap")).order_by(
                    "-created_at"
                )[:20],
                "can_revoke": permission.status in REVOCABLE and not revoke_open,
                "revoke_action": permission.revoke_action if revoke_open else None,
            }
        )
    return render(request, "actions/permissions.html", {"rows": rows})


@login_required
@require_POST
def permissions_revoke(request: HttpRequest) -> HttpResponse:
    """Revoke the permissions ticked (or the one button's): keys destroyed now, one op per
    chain to sign."""
    permission_ids = []
    for value in request.POST.getlist("permission"):
        try:
            permission_ids.append(uuid.UUID(value))
        except ValueError:  # not a form of ours: refused whole, before anything is revoked
            return error_json(
                "permission must be the id of a permission",
                code="invalid_input",
                status=400,
                errors={"permission": [f"{prefix(value)} is not a permission id"]},
            )
    try:
        actions = spend_permissions_revoke(
            user=request.user,
            permission_ids=permission_ids,
            actor=Actor.end_user(request.user),
            why="the user revoked it",
        )
    except ChainUnavailable as exc:
        messages.error(
            request,
            _(
                "The server can no longer spend under it: its key is destroyed. The revocation "
                "on the network could not be prepared (%(chain)s did not answer); try again."
            )
            % {"chain": exc.chain.name},
        )
        return redirect("spend-permissions")
    if actions:
        return redirect(revoke_sign_path(actions[0]))
    messages.success(request, _("Revoked: the server can no longer spend under it."))
    return redirect("spend-permissions")
