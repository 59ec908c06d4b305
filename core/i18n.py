"""Languages: end-user pages follow the user's choice (the `set_language` cookie) or their
browser's Accept-Language. The back-office (admin, staff console) stays English, so staff read
one wording and one date format whatever their browser says; so do the APIs, whose error texts
are the seeds' exact English (DRF would otherwise translate its own), and the OAuth endpoints
agents call (token, revocation, registration, metadata), whose JSON answers are for programs.
The consent page under /o/authorize/ is the user's, and follows their language."""

from __future__ import annotations

from django.conf import settings
from django.middleware.locale import LocaleMiddleware
from django.utils import translation

ENGLISH_ONLY_PATHS = (
    "/admin/",
    "/staff/",
    "/api/",
    "/private-messaging-api/",
    "/o/",
    "/.well-known/",
)
END_USER_PATHS = ("/o/authorize/",)


class EndUserLocaleMiddleware(LocaleMiddleware):
    def process_request(self, request):
        path = request.path
        if path.startswith(ENGLISH_ONLY_PATHS) and not path.startswith(END_USER_PATHS):
            translation.activate(settings.LANGUAGE_CODE)
            request.LANGUAGE_CODE = translation.get_language()
            return
        super().process_request(request)
