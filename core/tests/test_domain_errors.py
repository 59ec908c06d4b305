"""A domain error a service raises (core.errors) is answered by core.api's handler in the one
error body, with its status and code, Retry-After on a 503; a refused transition keeps its
IllegalTransition text for the code that catches one and answers the client's words."""

from __future__ import annotations

import json

import pytest

from core import errors
from core.api import exception_handler
from core.lifecycle import IllegalTransition

pytestmark = pytest.mark.django_db


def answer(exc: Exception):
    return exception_handler(exc, {"view": None, "request": None})


@pytest.mark.parametrize(
    ("error", "status", "code"),
    [
        (errors.DomainError("Refused"), 400, "invalid"),
        (errors.NotFound("Thing not found: x"), 404, "not_found"),
        (errors.Forbidden("Not yours"), 403, "permission_denied"),
        (errors.Conflict("Moved on", code="not_cancellable"), 409, "not_cancellable"),
        (errors.Gone("Expired"), 410, "gone"),
        (errors.Unprocessable("No", errors={"input": ["required"]}), 422, "unprocessable"),
        (errors.Unavailable("The chain Base could not be read: timed out"), 503, "unavailable"),
    ],
)
def test_a_domain_error_is_answered_in_the_one_body(error, status, code):
    response = answer(error)
    assert response.status_code == status
    assert response.data == {"detail": error.message, "code": code, "errors": error.errors}
    assert response.has_header("Retry-After") == (status == 503)


def test_extra_fields_go_beside_the_three():
    response = answer(errors.DomainError("Refused", code="limit", limit=3))
    assert response.data == {"detail": "Refused", "code": "limit", "errors": {}, "limit": 3}


def test_a_refused_transition_is_still_an_illegal_one_with_the_clients_words():
    illegal = IllegalTransition(model="Delivery", pk=7, current="sent", target="cancelled")
    refused = illegal.refused("Only queued deliveries can be cancelled; this one is sent")
    assert isinstance(refused, IllegalTransition) and refused.current == "sent"
    assert str(refused) == "Delivery 7: cannot move from 'sent' to 'cancelled'"
    response = answer(refused)
    assert response.status_code == 409
    assert json.loads(json.dumps(response.data)) == {
        "detail": "Only queued deliveries can be cancelled; this one is sent",
        "code": "conflict",
        "errors": {},
    }
    assert answer(illegal) is None  # an unrefused one is a bug: a 500
