from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.http import HttpResponsePermanentRedirect
from django.templatetags.static import static
from django.urls import include, path
from django.views.generic import RedirectView
from django.views.i18n import JavaScriptCatalog
from drf_spectacular.views import SpectacularAPIView
from oauth2_provider.urls import base_urlpatterns as oauth_base
from oauth2_provider.urls import management_urlpatterns as oauth_management
from oauth2_provider.urls import metadata_urlpatterns as oauth_metadata

from actions.urls import api_urlpatterns as actions_api
from actions.urls import signing_urlpatterns
from actions.urls import staff_urlpatterns as actions_staff
from messaging.urls import api_urlpatterns as messaging_api
from messaging.urls import staff_urlpatterns as messaging_staff
from operations.urls import api_urlpatterns as operations_api
from operations.urls import staff_urlpatterns as operations_staff
from picnic.health import healthz, readyz
from picnic.live import staff_stream
from picnic.login import ThrottledAdminAuthenticationForm, ThrottledLoginView
from picnic.metrics import metrics_view

admin.site.login_form = ThrottledAdminAuthenticationForm


def favicon(request):
    # Resolved per request: with the manifest storage the hashed name exists after collectstatic.
    return HttpResponsePermanentRedirect(static("picnic/favicon.svg"))


# One OAuth namespace: the RFC 8414 metadata at the origin's root (so its issuer is the origin,
# the same one the `iss` parameter and the MCP protected-resource metadata name), the endpoints
# under /o/. DOT's own urlpatterns would add a second metadata document under /o/ (issuer
# …/o) and the OIDC and dynamic-registration routes, which answer 500/403 with both disabled.
oauth_urlpatterns = [
    path("healthz", healthz, name="healthz"),
    path("readyz", readyz, name="readyz"),
    *oauth_metadata,
    path("o/", include(oauth_base + oauth_management)),
]

urlpatterns = [
    path("healthz", healthz, name="healthz"),
    path("readyz", readyz, name="readyz"),
    path("metrics", metrics_view, name="metrics"),
    path("", RedirectView.as_view(url="/admin/", permanent=False)),
    path("admin/", admin.site.urls),
    path("accounts/login/", ThrottledLoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    # The language switcher (`set_language`, POST) and the end-user scripts' catalogue.
    path("i18n/", include("django.conf.urls.i18n")),
    path("i18n/catalog.js", JavaScriptCatalog.as_view(), name="javascript-catalog"),
    # Browsers ask for /favicon.ico whatever the page links; one icon for both.
    path("favicon.ico", favicon, name="favicon"),
    *signing_urlpatterns,
    path("", include((oauth_urlpatterns, "oauth2_provider"), namespace="oauth2_provider")),
    path("api/v1/", include((actions_api, "actions"), namespace="actions-api")),
    path("api/v1/", include((operations_api, "operations"), namespace="operations-api")),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path(
        "private-messaging-api/",
        include((messaging_api, "messaging"), namespace="private-messaging-api"),
    ),
    path("staff/events", staff_stream, name="staff-events"),
    path("staff/", include((actions_staff, "actions"), namespace="actions-staff")),
    path("staff/", include((messaging_staff, "messaging"), namespace="messaging-staff")),
    path("staff/", include((operations_staff, "operations"), namespace="operations-staff")),
    # The support console (/staff/ itself, search, bulk, CSV): after the apps' staff pages.
    path("staff/", include(("console.urls", "console"), namespace="console")),
]
