"""Languages: end-user pages follow the user's choice (the `set_language` cookie) or their
browser's Accept-Language; back-office pages (admin, staff console) stay in English, so staff
read one wording and one date format whatever their browser says."""

from __future__ import annotations

from django.conf import settings
from django.middleware.locale import LocaleMiddleware
from django.utils import translation

BACK_OFFICE_PATHS = ("/admin/", "/staff/")


class EndUserLocaleMiddleware(LocaleMiddleware):
    def process_request(self, request):
        if request.path.startswith(BACK_OFFICE_PATHS):
            translation.activate(settings.LANGUAGE_CODE)
            request.LANGUAGE_CODE = translation.get_language()
            return
        super().process_request(request)
