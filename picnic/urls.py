from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.http import HttpResponsePermanentRedirect
from django.shortcuts import redirect
from django.templatetags.static import static
from django.urls import include, path
from django.views.i18n import JavaScriptCatalog
from drf_spectacular.views import SpectacularAPIView
from oauth2_provider.urls import metadata_urlpatterns as oauth_metadata

from actions.signing_page.public import views as signing_views
from actions.urls import api_urlpatterns as actions_api
from actions.urls import signing_urlpatterns
from actions.urls import staff_urlpatterns as actions_staff
from console.views import staff_events
from core.health import healthz, readyz
from core.login import ThrottledAdminAuthenticationForm, ThrottledLoginView
from core.metrics import metrics_view
from messaging.urls import api_urlpatterns as messaging_api
from messaging.urls import staff_urlpatterns as messaging_staff
from oauth import registration
from oauth import views as agent_views
from operations.urls import api_urlpatterns as operations_api
from operations.urls import staff_urlpatterns as operations_staff

admin.site.login_form = ThrottledAdminAuthenticationForm


def front_door(request):
    """`/`: staff reach the support console, end users their activity and passkeys, anyone
    else the one sign-in page (which says which is which)."""
    if request.user.is_authenticated and request.user.is_staff:
        return redirect("console:home")
    return signing_views.activity_page(request)


def favicon(request):
    # Resolved per request: with the manifest storage the hashed name exists after collectstatic.
    return HttpResponsePermanentRedirect(static("picnic/favicon.svg"))


# One OAuth namespace: the RFC 8414 metadata at the origin's root (so its issuer is the origin,
# the same one the `iss` parameter and the MCP protected-resource metadata name), the endpoints
# under /o/. Only what agents use is routed: our consent page in front of DOT's authorization
# endpoint, the token and revocation endpoints, and dynamic registration behind our checks
# (oauth/registration.py). DOT's own urlpatterns would add a second metadata document under /o/
# (issuer …/o), OIDC routes (OIDC is off), the device flow (not offered), introspection (it needs
# a scope no client holds: the MCP server reads tokens itself) and the application-management
# pages (any user could register a client there, past the checks).
# DOT's protected-resource document per path would describe any path of this origin as a
# resource (`/.well-known/oauth-protected-resource/mcp` naming `<web origin>/mcp` while the MCP
# server is elsewhere, with other scopes): the MCP server serves its own; the root document
# (this origin: the API) stays.
_metadata = [p for p in oauth_metadata if "resource_path" not in str(p.pattern)]
oauth_urlpatterns = [
    *_metadata,
    path("o/authorize/", agent_views.ConsentView.as_view(), name="authorize"),
    path("o/token/", agent_views.TokenView.as_view(), name="token"),
    path("o/revoke_token/", agent_views.RevocationView.as_view(), name="revoke-token"),
    path("o/register/", registration.RegistrationView.as_view(), name="dcr-register"),
    path(
        "o/register/<str:client_id>/",
        registration.RegistrationManagementView.as_view(),
        name="dcr-register-management",
    ),
]
agent_urlpatterns = [
    path("", agent_views.connected_agents, name="list"),
    path("<int:application_id>/revoke", agent_views.agent_revoke, name="revoke"),
    path("logo/<slug:digest>.png", agent_views.agent_logo, name="logo"),
]

urlpatterns = [
    path("healthz", healthz, name="healthz"),
    path("readyz", readyz, name="readyz"),
    path("metrics", metrics_view, name="metrics"),
    path("", front_door, name="front-door"),
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
    path("agents/", include((agent_urlpatterns, "oauth"), namespace="oauth-agents")),
    path("api/v1/", include((actions_api, "actions"), namespace="actions-api")),
    path("api/v1/", include((operations_api, "operations"), namespace="operations-api")),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path(
        "private-messaging-api/",
        include((messaging_api, "messaging"), namespace="private-messaging-api"),
    ),
    path("staff/events", staff_events, name="staff-events"),
    path("staff/", include((actions_staff, "actions"), namespace="actions-staff")),
    path("staff/", include((messaging_staff, "messaging"), namespace="messaging-staff")),
    path("staff/", include((operations_staff, "operations"), namespace="operations-staff")),
    # The support console (/staff/ itself, search, bulk, CSV): after the apps' staff pages.
    path("staff/", include(("console.urls", "console"), namespace="console")),
]
