"""Languages: end-user pages follow the user's choice (the `set_language` cookie) or their
browser's Accept-Language. The back-office (admin, staff console) stays English, so staff read
one wording and one date format whatever their browser says; so do the APIs, whose error texts
are the seeds' exact English (DRF would otherwise translate its own)."""

from __future__ import annotations

from django.conf import settings
from django.middleware.locale import LocaleMiddleware
from django.utils import translation

ENGLISH_ONLY_PATHS = ("/admin/", "/staff/", "/api/", "/private-messaging-api/")


class EndUserLocaleMiddleware(LocaleMiddleware):
    def process_request(self, request):
        if request.path.startswith(ENGLISH_ONLY_PATHS):
            translation.activate(settings.LANGUAGE_CODE)
            request.LANGUAGE_CODE = translation.get_language()
            return
        super().process_request(request)
