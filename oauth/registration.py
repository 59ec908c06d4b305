"""Dynamic client registration (RFC 7591/7592) for agents, in front of django-oauth-toolkit's.

DOT registers whatever a valid RFC 7591 body asks for (confidential clients, any grant, any
https redirect). Ours first checks the body against what an agent may be: a public client
(`token_endpoint_auth_method: "none"`, PKCE S256 enforced by the server), the code grant and
its refresh, redirect URIs on loopback or in OAUTH2_DCR_REDIRECT_URIS (oauth.policy), a name,
home page and logo it will be shown by. Then DOT's view writes the client from a normalised
body. Refusals are RFC 7591 §3.2.2 errors (`invalid_redirect_uri`, `invalid_client_metadata`),
always a 400 with a reason, never a 500, whatever the body.
"""

from __future__ import annotations

import json

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import JsonResponse
from oauth2_provider.views import (
    DynamicClientRegistrationManagementView,
    DynamicClientRegistrationView,
)

from core import json_input, throttle
from oauth.logos import logo_uri_allowed
from oauth.policy import MAX_URI_LENGTH, redirect_uri_problem
from oauth.services import client_profile_record

MAX_BODY_BYTES = 16 * 1024
MAX_REDIRECT_URIS = 10
MAX_NAME_LENGTH = 100
GRANT_TYPES = {"authorization_code", "refresh_token"}


class Refused(Exception):
    def __init__(self, description: str, error: str = "invalid_client_metadata"):
        super().__init__(description)
        self.error = error
        self.description = description

    def response(self) -> JsonResponse:
        return JsonResponse(
            {"error": self.error, "error_description": self.description}, status=400
        )


def _body(request) -> object:
    declared = request.META.get("CONTENT_LENGTH") or "0"
    if not declared.isdigit() or int(declared) > MAX_BODY_BYTES:
        raise Refused(f"The registration body must be at most {MAX_BODY_BYTES} bytes of JSON")
    try:
        raw = request.body
    except RequestDataTooBig:
        raise Refused(f"The registration body must be at most {MAX_BODY_BYTES} bytes") from None
    if len(raw) > MAX_BODY_BYTES:
        raise Refused(f"The registration body must be at most {MAX_BODY_BYTES} bytes")
    try:
        return json_input.loads(raw)
    except json_input.BodyRefused as exc:
        raise Refused(str(exc.detail)) from None


def _optional_https(data: dict, field: str) -> str | None:
    value = data.get(field)
    if value is None:
        return None
    if (
        not isinstance(value, str)
        or not value.startswith("https://")
        or len(value) > MAX_URI_LENGTH
        or not value.isprintable()
        or any(c.isspace() for c in value)
    ):
        raise Refused(f"{field} must be an https URL of at most {MAX_URI_LENGTH} characters")
    return value


def normalised_metadata(data: object) -> dict:
    """The registration DOT should write for this body, or Refused with the first reason."""
    if not isinstance(data, dict):
        raise Refused("The registration body must be a JSON object")
    uris = data.get("redirect_uris")
    if not isinstance(uris, list) or not 1 <= len(uris) <= MAX_REDIRECT_URIS:
        raise Refused(
            f"redirect_uris must be an array of 1 to {MAX_REDIRECT_URIS} URIs",
            "invalid_redirect_uri",
        )
    for uri in uris:
        problem = redirect_uri_problem(uri)
        if problem:
            raise Refused(problem, "invalid_redirect_uri")
    method = data.get("token_endpoint_auth_method", "none")
    if method != "none":
        raise Refused(
            'Only public clients register here: token_endpoint_auth_method must be "none" '
            "(the code is bound to the client by PKCE S256)"
        )
    grants = data.get("grant_types", ["authorization_code", "refresh_token"])
    if (
        not isinstance(grants, list)
        or not all(isinstance(g, str) for g in grants)
        or "authorization_code" not in grants
        or set(grants) - GRANT_TYPES
    ):
        raise Refused('grant_types may hold only "authorization_code" and "refresh_token"')
    responses = data.get("response_types", ["code"])
    if not isinstance(responses, list) or set(map(str, responses)) - {"code"} or not responses:
        raise Refused('response_types may hold only "code"')
    name = data.get("client_name", "")
    if not isinstance(name, str) or len(name) > MAX_NAME_LENGTH or not name.isprintable():
        raise Refused(f"client_name must be printable text of at most {MAX_NAME_LENGTH} characters")
    _optional_https(data, "client_uri")
    if not logo_uri_allowed(data.get("logo_uri", "https://")):  # http only on loopback, locally
        _optional_https(data, "logo_uri")
    return {
        "redirect_uris": list(dict.fromkeys(uris)),
        "client_name": name.strip(),
        "grant_types": ["authorization_code", "refresh_token"],
        "token_endpoint_auth_method": "none",
    }


def _registered(request, data: dict, answer, write):
    """Run DOT's view on the normalised body; on success keep the profile and answer with
    the metadata we registered (RFC 7591 §3.2.1: what the server actually holds)."""
    request._body = json.dumps(write).encode()  # DOT's view reads request.body
    response = answer()
    if response.status_code not in (200, 201):
        return response
    registered = json.loads(response.content)
    profile = client_profile_record(client_id=registered["client_id"], metadata=data)
    registered["response_types"] = ["code"]
    for field in ("client_uri", "logo_uri"):
        if getattr(profile, field):
            registered[field] = getattr(profile, field)
    return JsonResponse(registered, status=response.status_code)


def _over_the_limit(request) -> bool:
    """Registration is open, so each client address may register OAUTH2_DCR_PER_HOUR clients
    an hour (core/throttle.py: shared by the web processes on Redis); past that, 429."""
    address = request.META.get("REMOTE_ADDR", "")
    return throttle.hit("dcr", address, window_seconds=3600) > settings.OAUTH2_DCR_PER_HOUR


class RegistrationView(DynamicClientRegistrationView):
    def post(self, request, *args, **kwargs):
        if _over_the_limit(request):
            response = JsonResponse(
                {
                    "error": "too_many_requests",
                    "error_description": "Too many registrations from this address: try later",
                },
                status=429,
            )
            response["Retry-After"] = "3600"
            return response
        try:
            data = _body(request)
            write = normalised_metadata(data)
        except Refused as refused:
            return refused.response()
        return _registered(
            request, data, lambda: super(RegistrationView, self).post(request), write
        )


class RegistrationManagementView(DynamicClientRegistrationManagementView):
    """RFC 7592 read, update and delete with the registration access token; an update goes
    through the same checks as a registration."""

    def put(self, request, client_id, *args, **kwargs):
        try:
            data = _body(request)
            write = normalised_metadata(data)
        except Refused as refused:
            return refused.response()
        parent = super()
        return _registered(request, data, lambda: parent.put(request, client_id), write)
