"""What error reports may show: secrets masked whatever DEBUG is.

Django's filter hides settings whose *name* looks secret (…KEY, …TOKEN, …PASS…), but
DATABASE_URL, CELERY_BROKER_URL, EVENTS_URL or CACHE_URL carry their password inside the
value. Here the password part of any URL is masked (`scheme://user:********@host`), so the
report still says which server was used, in settings, request META and frame variables alike.
"""

from __future__ import annotations

import re

from django.views.debug import SafeExceptionReporterFilter

MASK = "********"

# scheme://[user]:password@host: the password runs up to the last "@" that is followed by a
# host (no "@" or "/" in it), so "/" or "@" inside an unencoded password is masked too.
_URL_PASSWORD = re.compile(
    r"(?P<head>\b[a-zA-Z][a-zA-Z0-9+.-]*://[^:@/\s]*:)[^\s]*?@(?=[^@\s/]*(?:[/?#\s]|$))"
)
# ...?password=…&token=… in a URL's query.
_QUERY_SECRET = re.compile(
    r"(?P<head>[?&](?:[^=&\s]*(?:pass|secret|token|key|signature|dsn)[^=&\s]*)=)[^&\s#]+",
    re.IGNORECASE,
)


def mask_url_secrets(text: str) -> str:
    text = _URL_PASSWORD.sub(lambda m: f"{m['head']}{MASK}@", text)
    return _QUERY_SECRET.sub(lambda m: f"{m['head']}{MASK}", text)


class SecretMaskingExceptionReporterFilter(SafeExceptionReporterFilter):
    # Django's list, plus DSNs and credentials that other names carry.
    hidden_settings = re.compile(
        "API|AUTH|TOKEN|KEY|SECRET|PASS|SIGNATURE|HTTP_COOKIE|DSN|CREDENTIAL|PRIVATE",
        flags=re.IGNORECASE,
    )

    def is_active(self, request):
        # Django masks sensitive variables and POST fields only when DEBUG is off; the DEBUG
        # page is exactly where they would be shown, so always mask.
        return True

    def cleanse_setting(self, key, value):
        return self._mask_strings(super().cleanse_setting(key, value))

    def cleanse_special_types(self, request, value):
        return self._mask_strings(super().cleanse_special_types(request, value))

    def get_traceback_frame_variables(self, request, tb_frame):
        variables = super().get_traceback_frame_variables(request, tb_frame)
        # A local named like a secret (password, api_key, token…) is masked like a setting.
        return [
            (name, self.cleansed_substitute if self._secret_name(name) else value)
            for name, value in variables
        ]

    def _secret_name(self, name) -> bool:
        return isinstance(name, str) and bool(self.hidden_settings.search(name))

    def _mask_strings(self, value):
        if isinstance(value, str):
            return mask_url_secrets(value)
        if type(value) is dict:
            return {key: self._mask_strings(item) for key, item in value.items()}
        if type(value) is list:
            return [self._mask_strings(item) for item in value]
        if type(value) is tuple:
            return tuple(self._mask_strings(item) for item in value)
        return value
