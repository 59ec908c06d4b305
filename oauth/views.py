"""The consent page (DOT's authorization endpoint with our page and checks) and the user's
"Connected agents" page."""

from __future__ import annotations

from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST
from oauth2_provider.exceptions import OAuthToolkitError
from oauth2_provider.models import get_application_model
from oauth2_provider.settings import oauth2_settings
from oauth2_provider.views import AuthorizationView
from oauth2_provider.views import TokenView as DotTokenView

from oauth import selectors, services
from oauth.policy import is_loopback, resource_served
from oauth.scopes import ACT, READ, scope_words
from oauth.validators import unserved_resource_error
from picnic.middleware import CSP


def _source(uri: str) -> str | None:
    """`uri` as a CSP source: its origin for http(s), its scheme for a private-use URI."""
    try:
        parts = urlsplit(uri)
    except ValueError:
        return None
    if parts.scheme in ("http", "https") and parts.netloc:
        return f"{parts.scheme}://{parts.netloc}"
    return f"{parts.scheme}:" if parts.scheme else None


def _consent_csp(redirect_uri: str | None, logo_uri: str | None) -> str:
    """The site's CSP, widened for this page only: the form's answer redirects to the agent's
    callback (Chromium applies form-action to that redirect), and the agent's logo loads
    from its https origin."""
    policy = CSP
    target = _source(redirect_uri) if redirect_uri else None
    if target:
        policy = policy.replace("form-action 'self'", f"form-action 'self' {target}")
    logo = _source(logo_uri) if logo_uri else None
    if logo and logo.startswith("https://"):
        policy = policy.replace("img-src 'self' data:", f"img-src 'self' data: {logo}")
    return policy


class ConsentView(AuthorizationView):
    """DOT's authorization endpoint: the request checked by oauthlib (client, redirect URI,
    PKCE S256, scopes), an RFC 8707 resource we do not serve refused (invalid_target, back to
    the client), then our page: who asks, what it may read and propose, approve or deny."""

    template_name = "oauth/consent.html"

    def get(self, request, *args, **kwargs):
        try:
            _scopes, credentials = self.validate_authorization_request(request)
        except OAuthToolkitError as error:
            return self.error_response(error, application=None)
        for resource in request.GET.getlist("resource"):
            if not resource_served(resource):
                application = get_application_model().objects.get(
                    client_id=credentials["client_id"]
                )
                error = OAuthToolkitError(
                    error=unserved_resource_error(resource, state=credentials.get("state")),
                    redirect_uri=credentials["redirect_uri"],
                )
                return self.error_response(error, application)
        response = super().get(request, *args, **kwargs)
        context = getattr(response, "context_data", None) or {}
        if response.status_code == 200 and "application" in context:
            profile = context.get("profile")
            response["Content-Security-Policy"] = _consent_csp(
                context.get("redirect_uri"), profile.logo_uri if profile else None
            )
        return response

    def post(self, request, *args, **kwargs):
        for resource in request.POST.get("resource", "").split():
            if not resource_served(resource):
                raise Http404  # the form's hidden field was edited: nothing to authorize
        return super().post(request, *args, **kwargs)

    def redirect(self, redirect_to, application):
        """RFC 9207 §2: `iss` in every authorization response, errors (access_denied,
        invalid_target) included; DOT adds it to successful ones only. A client that saw
        `authorization_response_iss_parameter_supported` rejects a response without it."""
        parts = urlsplit(redirect_to)
        query = parse_qsl(parts.query, keep_blank_values=True)
        if "error" in dict(query) and "iss" not in dict(query):
            issuer = oauth2_settings.oauth2_authorization_server_issuer(self.request)
            query.append(("iss", issuer))
            redirect_to = urlunsplit(parts._replace(query=urlencode(query)))
        return super().redirect(redirect_to, application)

    def get_context_data(self, **kwargs):
        context = super().get_context_data(**kwargs)
        application = context.get("application")
        if application is None:  # an error page
            return context
        profile = selectors.client_profile(application.client_id)
        words = scope_words(context.get("scopes", []))
        redirect_uri = context.get("redirect_uri") or ""
        source = application.registration_source
        context.update(
            profile=profile,
            reads=[w for w in words if w.kind == READ],
            acts=[w for w in words if w.kind == ACT],
            # Who vouches for the name: staff (registered in the admin) or the https host of
            # a metadata document; a dynamically registered name is the agent's own claim.
            verified=source != application.RegistrationSource.DCR,
            document_host=urlsplit(application.client_id).hostname
            if source == application.RegistrationSource.CIMD
            else None,
            redirect_host=_host(redirect_uri),
            redirect_is_loopback=is_loopback(redirect_uri),
        )
        return context


def _host(uri: str) -> str:
    try:
        parts = urlsplit(uri)
    except ValueError:
        return uri
    return parts.hostname or f"{parts.scheme}:"


class TokenView(DotTokenView):
    """DOT's token endpoint. An error raised while the token is saved (an RFC 8707
    `invalid_target`, DOT's or ours) reaches DOT's view with oauthlib's headers, which name no
    content type: Django would call the JSON error HTML. RFC 6749 §5.2: it is JSON."""

    def post(self, request, *args, **kwargs):
        response = super().post(request, *args, **kwargs)
        if response.status_code >= 400 and response.content.startswith(b"{"):
            response["Content-Type"] = "application/json"
            response["Cache-Control"] = "no-store"
        return response


@login_required
def connected_agents(request):
    return render(
        request,
        "oauth/connected_agents.html",
        {"agents": selectors.connected_agents(user=request.user)},
    )


@login_required
@require_POST
def agent_revoke(request, application_id: int):
    revoked = services.agent_revoke(user=request.user, application_id=application_id)
    if revoked.access_tokens or revoked.refresh_tokens:
        messages.success(request, _("Disconnected: that agent's tokens no longer work."))
    return redirect("oauth-agents:list")
