"""The consent page (DOT's authorization endpoint with our page and checks) and the user's
"Connected agents" page."""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import replace
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _
from django.views.decorators.http import require_GET, require_POST
from oauth2_provider.exceptions import OAuthToolkitError
from oauth2_provider.models import get_application_model
from oauth2_provider.settings import oauth2_settings
from oauth2_provider.views import AuthorizationView, RevokeTokenView
from oauth2_provider.views import TokenView as DotTokenView
from oauthlib.oauth2.rfc6749 import errors

from core.agents import agent_disconnected, agents_listed
from core.middleware import CSP
from oauth import selectors, services
from oauth.policy import is_loopback, resource_served
from oauth.scopes import ACT, READ, scope_words
from oauth.throttles import token_refusal
from oauth.validators import unserved_resource_error

PKCE_CHALLENGE = re.compile(r"[A-Za-z0-9._~-]{43,128}")


def has_nul(request) -> bool:
    """A NUL anywhere in the parameters or the Basic credentials: PostgreSQL text cannot hold
    one, so DOT's lookups would fail with a 500 instead of refusing the request."""
    for params in (request.GET, request.POST):
        for key, values in params.lists():
            if "\x00" in key or any("\x00" in v for v in values):
                return True
    auth = request.META.get("HTTP_AUTHORIZATION", "")
    if auth[:6].lower() == "basic ":
        try:
            return b"\x00" in base64.b64decode(auth[6:].strip(), validate=False)
        except (ValueError, binascii.Error):
            return False
    return "\x00" in auth


def _pkce_s256(params) -> bool:
    """RFC 7636 S256 with a well-formed challenge (43-128 unreserved characters)."""
    challenge = params.get("code_challenge") or ""
    return params.get("code_challenge_method") == "S256" and bool(
        PKCE_CHALLENGE.fullmatch(challenge)
    )


def _oauth_error(description: str) -> JsonResponse:
    response = JsonResponse(
        {"error": "invalid_request", "error_description": description}, status=400
    )
    response["Cache-Control"] = "no-store"
    return response


def _source(uri: str) -> str | None:
    """`uri` as a CSP source: its origin for http(s), its scheme for a private-use URI."""
    try:
        parts = urlsplit(uri)
    except ValueError:
        return None
    if parts.scheme in ("http", "https") and parts.netloc:
        return f"{parts.scheme}://{parts.netloc}"
    return f"{parts.scheme}:" if parts.scheme else None


def _consent_csp(redirect_uri: str | None) -> str:
    """The site's CSP, widened for this page only: the form's answer redirects to the agent's
    callback (Chromium applies form-action to that redirect). Images stay 'self': the
    agent's logo is served from our origin (agent_logo)."""
    policy = CSP
    target = _source(redirect_uri) if redirect_uri else None
    if target:
        policy = policy.replace("form-action 'self'", f"form-action 'self' {target}")
    return policy


class ConsentView(AuthorizationView):
    """DOT's authorization endpoint: the request checked by oauthlib (client, redirect URI,
    PKCE S256, scopes), an RFC 8707 resource we do not serve refused (invalid_target, back to
    the client), then our page: who asks, what it may read and propose, approve or deny."""

    template_name = "oauth/consent.html"

    def refused(self, description: str):
        """An error page (nothing to redirect to safely: the request is not a valid one)."""
        error = {"error": "invalid_request", "description": description}
        return self.render_to_response({"error": error}, status=400)

    def get(self, request, *args, **kwargs):
        if has_nul(request):
            return self.refused(_("The request contains a NUL character."))
        try:
            _scopes, credentials = self.validate_authorization_request(request)
        except OAuthToolkitError as error:
            return self.error_response(error, application=None)
        problem = None
        if not _pkce_s256(credentials):
            # DOT would refuse "plain" only after the user approved: say it before.
            problem = errors.InvalidRequestError(
                description="PKCE is required, with code_challenge_method S256",
                state=credentials.get("state"),
            )
        for resource in request.GET.getlist("resource"):
            if not resource_served(resource):
                problem = unserved_resource_error(resource, state=credentials.get("state"))
        if problem is not None:
            application = get_application_model().objects.get(client_id=credentials["client_id"])
            error = OAuthToolkitError(error=problem, redirect_uri=credentials["redirect_uri"])
            return self.error_response(error, application)
        response = super().get(request, *args, **kwargs)
        context = getattr(response, "context_data", None) or {}
        if response.status_code == 200 and "application" in context:
            response["Content-Security-Policy"] = _consent_csp(context.get("redirect_uri"))
        return response

    def post(self, request, *args, **kwargs):
        if has_nul(request):
            return self.refused(_("The request contains a NUL character."))
        for resource in request.POST.get("resource", "").split():
            if not resource_served(resource):
                raise Http404  # the form's hidden field was edited: nothing to authorize
        client_id = request.POST.get("client_id", "")
        if not get_application_model().objects.filter(client_id=client_id).exists():
            return self.refused(_("This agent is not registered here."))
        if not _pkce_s256(request.POST):
            return self.refused(_("The agent must use PKCE with S256: start again from it."))
        return super().post(request, *args, **kwargs)

    def form_invalid(self, form):
        return self.refused(_("The answer was incomplete: start again from the agent."))

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
            logo_url=services.client_logo_shown(profile=profile),
            initial=(application.name or application.client_id or "?")[:1].upper(),
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
        if refusal := token_refusal(request):
            return refusal
        if has_nul(request):
            return _oauth_error("The request contains a NUL character")
        response = super().post(request, *args, **kwargs)
        if response.status_code >= 400 and response.content.startswith(b"{"):
            response["Content-Type"] = "application/json"
            response["Cache-Control"] = "no-store"
        return response


class RevocationView(RevokeTokenView):
    """DOT's RFC 7009 endpoint, with a NUL refused before any lookup."""

    def post(self, request, *args, **kwargs):
        if has_nul(request):
            return _oauth_error("The request contains a NUL character")
        return super().post(request, *args, **kwargs)


@login_required
def connected_agents(request):
    # Each agent's active spending permissions, from the app that holds them.
    granted: dict = {}
    for _receiver, answer in agents_listed.send_robust(sender=None, user=request.user):
        if isinstance(answer, dict):
            for application_id, grants in answer.items():
                granted.setdefault(application_id, []).extend(grants)
    agents = [
        replace(
            agent,
            logo_url=services.client_logo_shown(profile=agent.profile),
            permissions=tuple(granted.get(agent.application.pk, ())),
        )
        for agent in selectors.connected_agents(user=request.user)
    ]
    return render(request, "oauth/connected_agents.html", {"agents": agents})


@require_GET
def agent_logo(request, digest: str):
    """An agent's logo as we re-encoded it: named by its hash, so cached for a year."""
    png = selectors.client_logo_png(digest)
    if png is None:
        raise Http404
    response = HttpResponse(png, content_type="image/png")
    response["Cache-Control"] = "public, max-age=31536000, immutable"
    response["X-Content-Type-Options"] = "nosniff"
    response["Content-Security-Policy"] = "default-src 'none'; sandbox"
    return response


@login_required
@require_POST
def agent_revoke(request, application_id: int):
    revoked = services.agent_revoke(user=request.user, application_id=application_id)
    if revoked.access_tokens or revoked.refresh_tokens:
        messages.success(request, _("Disconnected: that agent's tokens no longer work."))
    # Other apps end what they hold for the agent (spending permissions: keys destroyed, a
    # revocation to sign); the first page they name is where the user finishes it.
    answers = agent_disconnected.send_robust(
        sender=None, user=request.user, application_id=application_id
    )
    follow_up = next((path for _receiver, path in answers if isinstance(path, str)), None)
    return redirect(follow_up or "oauth-agents:list")
