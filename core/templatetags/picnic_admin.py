"""The admin index's "tracked work" block, read from the lifecycle registry."""

from __future__ import annotations

from django import template

from core.admin import tracked_work as tracked_work_rows

register = template.Library()


@register.inclusion_tag("admin/picnic/tracked_work.html", takes_context=True)
def tracked_work(context) -> dict:
    return {"kinds": tracked_work_rows(context["request"].user)}
