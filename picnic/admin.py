"""This deployment's admin site: the index lists its three apps first, and staff choose the
time zone the pages show times in. The admin pieces every app shares are in core.admin."""

from __future__ import annotations

from django.contrib import admin
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.urls import path
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme

from core.admin import FastListRows
from core.timezones import set_zone_cookie, zone_named, zone_names

# --- The site ----------------------------------------------------------------------------

# The index lists our three apps first, in this order; auth last, anything else (OAuth
# internals) in between: support staff come for the work, rarely for the machinery.
APPS_FIRST = ("actions", "messaging", "operations")
APPS_LAST = ("auth",)


def _app_rank(app: dict) -> tuple[int, int]:
    label = app["app_label"]
    if label in APPS_FIRST:
        return 0, APPS_FIRST.index(label)
    if label in APPS_LAST:
        return 2, APPS_LAST.index(label)
    return 1, 0


class PicnicAdminSite(admin.AdminSite):
    """The default admin site (PicnicAdminConfig), its apps in the order staff need them."""

    site_header = "Picnic back-office"
    site_title = "Picnic back-office"
    # The app sidebar took 300 of 1280 px from every list (their last columns were cut off);
    # the index and the breadcrumbs lead to the same lists.
    enable_nav_sidebar = False

    def register(self, model_or_iterable, admin_class=None, **options):
        # Every list, Django's and other apps' included, draws its rows' checkboxes without a
        # template render each (core.admin.FastListRows): the same markup.
        admin_class = admin_class or admin.ModelAdmin
        if not issubclass(admin_class, FastListRows):
            admin_class = type(
                admin_class.__name__,
                (FastListRows, admin_class),
                {"__module__": admin_class.__module__, "__qualname__": admin_class.__qualname__},
            )
        super().register(model_or_iterable, admin_class, **options)

    def get_app_list(self, request, app_label=None):
        # sorted() is stable: the rest keeps Django's alphabetical order.
        return sorted(super().get_app_list(request, app_label), key=_app_rank)

    def get_urls(self):
        return [
            path("timezone/", self.admin_view(self.timezone_view), name="timezone"),
            *super().get_urls(),
        ]

    def timezone_view(self, request):
        """Choose the time zone the admin and staff pages show times in (a cookie)."""
        back = request.POST.get("next") or request.GET.get("next") or ""
        if not url_has_allowed_host_and_scheme(back, {request.get_host()}):
            back = ""
        error = None
        if request.method == "POST":
            name = request.POST.get("timezone", "")
            if zone_named(name) is not None:
                response = redirect(back or "admin:index")
                set_zone_cookie(response, name)
                return response
            error = "Choose a time zone from the list."
        context = {
            **self.each_context(request),
            "title": "Time zone",
            "zones": zone_names(),
            "current": timezone.get_current_timezone_name(),
            "next": back,
            "error": error,
        }
        return TemplateResponse(request, "admin/picnic/timezone.html", context)
