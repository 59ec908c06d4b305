"""Shared API plumbing: one error type and body, OAuth2 scope checks, input validated against
the app's contract (the JSON Schema its MCP tool publishes), and the OpenAPI that says so.

Every 4xx/5xx of the three apps' APIs has one body, `{"detail", "code", "errors"}`:
`detail` is the text a person or agent reads (the seeds' exact texts), `code` a stable word to
branch on, `errors` maps a field (or `(body)` / `(query)`) to its messages, `{}` when the
problem is not one of fields. Services raise a `core.errors.DomainError` (its status, code and
safe message), views their input's `ApiError`; neither builds error responses, and no view maps
one error to another. DRF's own exceptions (401, 405, 415, parse errors) get the same body here.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import requests
import uritemplate
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import RequestDataTooBig
from django.db import InterfaceError as DatabaseInterfaceError
from django.db import OperationalError as DatabaseOperationalError
from django.http import Http404, JsonResponse
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.utils import OpenApiResponse
from jsonschema import Draft7Validator
from oauth2_provider.contrib.rest_framework import TokenHasScope
from rest_framework import exceptions, serializers, status
from rest_framework.views import APIView
from rest_framework.views import exception_handler as drf_exception_handler

from core.echo import prefix
from core.errors import INVALID_INPUT, DomainError, redact
from core.json_input import too_large
from core.schema import DATE_TIME_DESCRIPTION, FORMATS, input_problems

logger = logging.getLogger(__name__)

DATABASE_UNAVAILABLE = "The database is unavailable for a moment; retry the request."


class ApiError(exceptions.APIException):
    """The one domain error a view raises: a status, a code, the text, and field errors."""

    status_code = status.HTTP_400_BAD_REQUEST
    default_code = "invalid"

    def __init__(
        self,
        detail: str,
        *,
        code: str | None = None,
        errors: dict[str, list[str]] | None = None,
        **extra: Any,
    ):
        super().__init__(detail=detail, code=code or self.default_code)
        self.errors = errors or {}
        self.extra = extra


class InvalidInput(ApiError):
    default_code = "invalid_input"

    def __init__(self, errors: dict[str, list[str]]):
        super().__init__(INVALID_INPUT, errors=errors)


class ServiceUnavailable(ApiError):
    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_code = "unavailable"


class InsufficientScope(ApiError):
    status_code = status.HTTP_403_FORBIDDEN
    default_code = "insufficient_scope"

    def __init__(self, required: list[str]):
        self.required = required
        super().__init__(
            f"Insufficient scope: this call requires the scope {' '.join(required)}",
            required_scopes=required,
        )


class UserTokenRequired(ApiError):
    status_code = status.HTTP_403_FORBIDDEN
    default_code = "user_token_required"

    def __init__(self):
        super().__init__(
            "This API acts for a user: the bearer token was issued to an application alone "
            "(client_credentials); authorize as a user to get one"
        )


def api_error(exc: DomainError) -> ApiError:
    """The API's answer to a domain error: its status, code, message and field errors."""
    error = ApiError(exc.message, code=exc.code, errors=exc.errors, **exc.extra)
    error.status_code = exc.status
    return error


class RequiredScopes(TokenHasScope):
    """TokenHasScope, but a token that lacks the scope gets a 403 that names it (RFC 6750 §3.1),
    and a token with no user (client_credentials) is refused before anything is looked up:
    every endpoint acts for a user, so one answer for all of them (no 404-vs-500 oracle)."""

    def has_permission(self, request, view) -> bool:
        token = request.auth
        if token is not None and hasattr(token, "scope") and token.user_id is None:
            raise UserTokenRequired()
        if super().has_permission(request, view):
            return True
        token = request.auth
        if token is not None and hasattr(token, "scope") and not token.is_expired():
            raise InsufficientScope(list(self.get_scopes(request, view)))
        return False


# --- the one body ---------------------------------------------------------------------------


def _messages(value: Any) -> list[str]:
    if isinstance(value, dict):
        return [f"{k}: {m}" for k, v in value.items() for m in _messages(v)]
    if isinstance(value, list):
        return [m for item in value for m in _messages(item)]
    return [str(value)]


def error_body(exc: exceptions.APIException) -> dict[str, Any]:
    if isinstance(exc, ApiError):
        return {
            "detail": str(exc.detail),
            "code": exc.detail.code,
            "errors": exc.errors,
            **exc.extra,
        }
    if isinstance(exc, exceptions.ValidationError):  # a serializer's or DRF's own field errors
        fields = exc.detail if isinstance(exc.detail, dict) else {"(body)": exc.detail}
        errors = {str(name): _messages(value) for name, value in fields.items()}
        return {"detail": INVALID_INPUT, "code": "invalid_input", "errors": errors}
    detail = exc.detail
    code = getattr(detail, "code", None) or exc.default_code
    return {"detail": " ".join(_messages(detail)), "code": str(code), "errors": {}}


def exception_handler(exc, context):
    if isinstance(exc, DomainError):
        exc = api_error(exc)
    elif isinstance(exc, Http404):
        exc = exceptions.NotFound()
    elif isinstance(exc, DjangoPermissionDenied):
        exc = exceptions.PermissionDenied()
    elif isinstance(exc, RequestDataTooBig):  # DRF reads request.body: a JSON 400, not HTML
        exc = too_large()
    elif isinstance(exc, DatabaseOperationalError | DatabaseInterfaceError):
        # The database went away under the request (a restart, a failover): its transaction
        # rolled back, so a retry (a write with its idempotency key) is safe. A 503 says so;
        # a 500 would say the request itself is wrong.
        logger.warning("database unavailable: %s", failure_reason(exc))
        exc = ServiceUnavailable(DATABASE_UNAVAILABLE)
    response = drf_exception_handler(exc, context)  # headers, rollback; None for a bug (a 500)
    if response is None:
        return None
    response.data = error_body(exc)
    if response.status_code == status.HTTP_503_SERVICE_UNAVAILABLE:
        response.setdefault("Retry-After", "1")
    if isinstance(exc, InsufficientScope):
        response["WWW-Authenticate"] = (
            f'Bearer error="insufficient_scope", scope="{" ".join(exc.required)}"'
        )
    return response


def error_json(detail: str, *, code: str, status: int, **extra: Any) -> JsonResponse:
    """The same body from a plain Django view (the signing page's JSON endpoints)."""
    return JsonResponse({"detail": detail, "code": code, "errors": {}, **extra}, status=status)


# --- input validated against the contract ---------------------------------------------------


def _field(error, root: str) -> str:
    path = [str(p) for p in error.path]
    if error.validator == "required":  # name the missing field rather than its parent
        path += [n for n in error.validator_value if error.message.startswith(repr(n))][:1]
    return ".".join(path) or root


def schema_errors(schema: dict[str, Any], data: Any, *, root: str = "(body)") -> dict[str, list]:
    """Draft-7 errors (formats checked) keyed by field; `{}` when `data` is valid. First, for
    any input: no NUL or lone surrogate in a string or key, no number that is not finite
    (core.schema); the schema's own messages would echo such values back."""
    if problems := input_problems(data, root=root):
        return problems
    errors: dict[str, list[str]] = {}
    validator = Draft7Validator(schema, format_checker=FORMATS)
    for error in sorted(validator.iter_errors(data), key=lambda e: [str(p) for p in e.path]):
        if error.validator == "pattern" and error.schema.get("format") == "date-time":
            continue  # its format check (core.schema.FORMATS) says the same, and more
        errors.setdefault(_field(error, root), []).append(_message(error))
    return errors


def _message(error) -> str:
    """The rule the value broke, naming the value by a short escaped prefix at most
    (core.echo): jsonschema's own messages quote the whole value, and a value may be 100 KB."""
    shown = prefix(error.instance)
    # A regex says little to a person or an agent: where the field describes what it expects,
    # say that instead.
    described = isinstance(error.schema, dict) and error.schema.get("description")
    if error.validator == "pattern" and described:
        return f"{shown} does not match the expected form: {described}"
    if error.validator == "format" and error.validator_value == "date-time":
        return f"{shown} is not {DATE_TIME_DESCRIPTION}, on a day that exists"
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        allowed = (
            set(error.schema.get("properties", {})) if isinstance(error.schema, dict) else set()
        )
        extra = [prefix(key) for key in error.instance if key not in allowed]
        verb = "was" if len(extra) == 1 else "were"
        shown_keys = ", ".join(extra[:3]) + (", …" if len(extra) > 3 else "")
        return f"Additional properties are not allowed ({shown_keys} {verb} unexpected)"
    if error.validator in ("maxLength", "minLength", "maxItems", "minItems"):
        what = "characters" if error.validator.endswith("Length") else "items"
        bound = "at most" if error.validator.startswith("max") else "at least"
        return f"{shown} must have {bound} {error.validator_value} {what}"
    # Every other jsonschema message quotes the instance with repr(): keep a prefix of it.
    message = error.message.replace(repr(error.instance), shown)
    return message if len(message) <= MAX_MESSAGE_CHARS else message[:MAX_MESSAGE_CHARS] + "…"


# A field's message is at most this long (an enum's list of values, a pattern).
MAX_MESSAGE_CHARS = 300


def failure_reason(exc: BaseException) -> str:
    """What failed, in words a client may read: a transport failure by its kind, anything
    else by its message with internal addresses removed."""

    if isinstance(exc, requests.Timeout):
        return "timed out"
    if isinstance(exc, requests.ConnectionError):
        return "connection refused" if "refused" in str(exc).lower() else "connection failed"
    if isinstance(exc, requests.HTTPError) and exc.response is not None:
        return f"HTTP {exc.response.status_code}"
    return redact(str(exc)) or type(exc).__name__


def error_text(detail: str, errors: dict[str, list[str]]) -> str:
    """One line for an agent: the detail, then each field's messages."""
    if not errors:
        return detail
    return f"{detail}: " + "; ".join(f"{f}: {m}" for f, ms in errors.items() for m in ms)


def query_input(schema: dict[str, Any], params) -> dict[str, Any]:
    """Query parameters as the schema's types (they arrive as strings)."""
    data: dict[str, Any] = {}
    for name, value in params.items():
        kind = schema.get("properties", {}).get(name, {}).get("type")
        data[name] = (
            int(value) if kind == "integer" and value.isascii() and value.isdigit() else value
        )
    return data


class ApiView(APIView):
    """An API view of the three apps: scopes checked, then the input validated once, strictly,
    against `input_schema` (the body, or the query of a GET) into `self.input`."""

    permission_classes = [RequiredScopes]
    input_schema: dict[str, Any] | None = None
    # Where the view's services let a dependency's own exception through (a chain node, a
    # provider): the app's function (a staticmethod) naming the domain error to answer, None
    # for a bug.
    dependency_errors: Callable[[Exception], DomainError | None] | None = None

    def handle_exception(self, exc):
        if self.dependency_errors is not None and not isinstance(
            exc, DomainError | exceptions.APIException
        ):
            exc = self.dependency_errors(exc) or exc
        return super().handle_exception(exc)

    def initial(self, request, *args, **kwargs):
        super().initial(request, *args, **kwargs)
        self.input: dict[str, Any] = {}
        if self.input_schema is None or not hasattr(self, request.method.lower()):
            return  # nothing to validate, or a 405 that dispatch answers next
        if request.method == "GET":
            data, root = query_input(self.input_schema, request.query_params), "(query)"
        else:
            data, root = request.data, "(body)"
        errors = schema_errors(self.input_schema, data, root=root)
        if errors:
            raise InvalidInput(errors)
        self.input = data


# --- OpenAPI: one Error component on every error answer -------------------------------------


class ErrorSerializer(serializers.Serializer):
    detail = serializers.CharField(help_text="What went wrong, in words.")
    code = serializers.CharField(help_text="A stable word to branch on, e.g. not_found.")
    errors = serializers.DictField(
        child=serializers.ListField(child=serializers.CharField()),
        help_text="Messages per field (`(body)`/`(query)` for the whole input); {} if none.",
    )
    required_scopes = serializers.ListField(
        child=serializers.CharField(), required=False, help_text="On insufficient_scope only."
    )


def error_response(description: str) -> OpenApiResponse:
    return OpenApiResponse(ErrorSerializer, description=description)


def error_responses(
    *errors: type[DomainError] | tuple[int, str],
) -> dict[int, OpenApiResponse]:
    """An operation's error answers for @extend_schema: a domain error by its status and `doc`,
    or a `(status, description)` pair where the view says more than the error class."""
    responses = {}
    for error in errors:
        code, description = error if isinstance(error, tuple) else (error.status, error.doc)
        responses[code] = error_response(description)
    return responses


# JSON Schema keywords OpenAPI 3.0's Schema Object does not have (validation is unaffected:
# the view still checks the contract's own dict).
_NOT_OAS30 = {"$schema", "$id", "$comment", "const", "examples", "dependentRequired"}


def openapi_schema(schema: Any) -> Any:
    """A contract's JSON Schema as an OpenAPI 3.0 Schema Object: a type list with "null" becomes
    `nullable`, `const` a one-value `enum`; keywords 3.0 lacks, and an empty `required`, are
    dropped."""
    if isinstance(schema, list):
        return [openapi_schema(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "const":
            out["enum"] = [value]
        elif key == "type" and isinstance(value, list):
            types = [t for t in value if t != "null"]
            if "null" in value:
                out["nullable"] = True
            if len(types) == 1:
                out["type"] = types[0]
            else:
                out["anyOf"] = [{"type": t} for t in types]
        elif key in ("anyOf", "oneOf") and {"type": "null"} in value:
            rest = [item for item in value if item != {"type": "null"}]
            out["nullable"] = True
            if len(rest) == 1:
                out.update(openapi_schema(rest[0]))
            else:
                out[key] = openapi_schema(rest)
        elif key == "required" and not value:
            continue  # 3.0: `required` must list at least one name
        elif key == "properties":
            out[key] = {name: openapi_schema(sub) for name, sub in value.items()}
        elif key not in _NOT_OAS30:
            out[key] = openapi_schema(value)
    return out


class ApiAutoSchema(AutoSchema):
    """Adds the error answers every API view can give and points each at the Error component.
    An ApiView's request body (or a GET's query parameters) is documented from its
    `input_schema`, the same dict that validates it, so the docs and a fuzzer see the real input.
    """

    def _input_schema(self) -> dict[str, Any] | None:
        return getattr(self.view, "input_schema", None)

    def _get_request_body(self, direction="request"):
        schema = self._input_schema()
        if schema is None or self.method not in ("POST", "PUT", "PATCH"):
            return super()._get_request_body(direction)
        return {
            "content": {"application/json": {"schema": openapi_schema(schema)}},
            "required": True,
        }

    def _get_parameters(self):
        parameters = super()._get_parameters()
        schema = self._input_schema()
        if schema is None or self.method != "GET":
            return parameters
        path_variables = set(uritemplate.variables(self.path))
        required = set(schema.get("required", []))
        from_schema = {
            name: {
                "in": "query",
                "name": name,
                "schema": openapi_schema({k: v for k, v in sub.items() if k != "description"}),
                "description": sub.get("description", ""),
                "required": name in required,
            }
            for name, sub in schema.get("properties", {}).items()
            if name not in path_variables
        }
        for parameter in from_schema.values():
            if not parameter["description"]:
                del parameter["description"]
        kept = [p for p in parameters if not (p["in"] == "query" and p["name"] in from_schema)]
        return sorted(kept + list(from_schema.values()), key=lambda p: (p["in"], p["name"]))

    def _get_response_bodies(self, direction="response"):
        responses = super()._get_response_bodies(direction)
        scopes = " ".join(getattr(self.view, "required_scopes", []))
        implied = {
            "401": "Missing or invalid bearer token",
            "403": f"Insufficient scope (needs {scopes})" if scopes else "Forbidden",
        }
        if getattr(self.view, "input_schema", None) is not None:
            implied["400"] = "Invalid input: `errors` names each field"
        if self.method in ("POST", "PUT", "PATCH"):
            implied["415"] = "The body is not application/json"
        for code, description in implied.items():
            responses.setdefault(code, {"description": description})
        for code, response in responses.items():
            if code >= "400" and "content" not in response:
                responses[code] = self._get_response_for_code(
                    error_response(response.get("description", "")), code, direction=direction
                )
        return dict(sorted(responses.items()))
