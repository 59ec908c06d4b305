"""What a staff member may see: Django's model permissions, read the way the admin reads them
(the change permission implies the view permission). Every staff page asks here, so a timeline,
the review queue, the event stream and the console lists agree with the admin."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps

from django.contrib.admin.views.decorators import staff_member_required
from django.core.exceptions import PermissionDenied
from django.db.models import Model


def may_view(user, model: type[Model]) -> bool:
    """Whether `user` may view rows of `model` (its view or change permission)."""
    meta = model._meta
    return user.has_perm(f"{meta.app_label}.view_{meta.model_name}") or user.has_perm(
        f"{meta.app_label}.change_{meta.model_name}"
    )


def staff_may_view(model: type[Model], *also: str) -> Callable:
    """A staff page about `model`: staff sign-in (else the admin's login page), then the view or
    change permission of `model` and every permission in `also` (else 403)."""

    def decorate(view: Callable) -> Callable:
        @wraps(view)
        def checked(request, *args, **kwargs):
            if not may_view(request.user, model):
                meta = model._meta
                raise PermissionDenied(f"needs {meta.app_label}.view_{meta.model_name}")
            for permission in also:
                if not request.user.has_perm(permission):
                    raise PermissionDenied(f"needs {permission}")
            return view(request, *args, **kwargs)

        return staff_member_required(checked)

    return decorate
