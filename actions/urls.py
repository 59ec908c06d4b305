from functools import wraps

from django.urls import path

from actions import views
from actions.accounts.public import device_views, pages
from actions.permissions.public import views as permission_views
from actions.signing_page.public import views as signing_views

app_name = "actions"

_action_status = views.ActionStatusView.as_view()


def _tool(name: str, view_class):
    """A tool's route, `actions/<tool>`, is also a GET of the action id `<tool>`: GET answers
    as the status view does for any id that is not an action (404 `Action not found: <tool>`),
    every other method is the tool's. `wraps` keeps `cls`, `initkwargs` and `csrf_exempt` of
    the DRF view, so the OpenAPI schema and CSRF handling see the tool view."""
    tool = view_class.as_view()

    @wraps(tool)
    def view(request, **kwargs):
        if request.method == "GET":
            return _action_status(request, action_id=name)
        return tool(request, **kwargs)

    return view


api_urlpatterns = [
    path("actions/transfer", _tool("transfer", views.TransferView), name="transfer"),
    path("actions/swap", _tool("swap", views.SwapView), name="swap"),
    path("actions/card_freeze", _tool("card_freeze", views.CardFreezeView), name="card-freeze"),
    path(
        "actions/card_unfreeze",
        _tool("card_unfreeze", views.CardUnfreezeView),
        name="card-unfreeze",
    ),
    path("actions/card_limit", _tool("card_limit", views.CardLimitView), name="card-limit"),
    path(
        "actions/request_spend_permission",
        _tool("request_spend_permission", views.RequestSpendPermissionView),
        name="request-spend-permission",
    ),
    path("spend-permissions", views.SpendPermissionsView.as_view(), name="spend-permissions"),
    path("smart-accounts", views.SmartAccountsView.as_view(), name="smart-accounts"),
    path("balances", views.BalancesView.as_view(), name="balances"),
    path("card", views.CardView.as_view(), name="card"),
    path("profile", views.ProfileView.as_view(), name="profile"),
    path("transactions", views.TransactionsView.as_view(), name="transactions"),
    # `path`, not `str`: an id with a slash (`../profile`, quoted or not) is an action that
    # does not exist (the seed's 404), not a miss of the URLconf.
    path("actions/<path:action_id>", _action_status, name="action-status"),
]

staff_urlpatterns = [
    path("actions/<uuid:action_id>/", views.action_timeline, name="action-timeline"),
    path(
        "actions/<uuid:action_id>/mark-failed",
        views.action_mark_failed_view,
        name="action-mark-failed",
    ),
    path("actions/<uuid:action_id>/resend", views.action_resend_view, name="action-resend"),
    path(
        "account-changes/<uuid:change_id>/",
        views.account_change_timeline,
        name="account-change-timeline",
    ),
    path(
        "spend-permissions/<uuid:permission_id>/",
        views.spend_permission_timeline,
        name="spend-permission-timeline",
    ),
]


signing_urlpatterns = [
    path("activity/", signing_views.activity_page, name="activity"),
    path("me/time-zone", pages.time_zone_set, name="time-zone"),
    path("passkeys/", pages.passkeys_page, name="passkeys"),
    path("permissions/", permission_views.permissions_page, name="spend-permissions"),
    path(
        "permissions/revoke", permission_views.permissions_revoke, name="spend-permissions-revoke"
    ),
    path("passkeys/register/options", pages.passkey_register_options, name="passkey-options"),
    path("passkeys/register/verify", pages.passkey_register_verify, name="passkey-verify"),
    path(
        "passkeys/<int:passkey_id>/rename",
        pages.passkey_rename_view,
        name="passkey-rename",
    ),
    path(
        "passkeys/<int:passkey_id>/remove",
        pages.passkey_remove_view,
        name="passkey-remove",
    ),
    path("passkeys/add-device", device_views.device_link_page, name="device-link"),
    path("devices/link/<str:token>", device_views.device_link_open_view, name="device-link-open"),
    path(
        "passkeys/<int:passkey_id>/approve",
        device_views.device_approve_start,
        name="device-approve",
    ),
    path("passkeys/recovery-code", device_views.recovery_code_page, name="recovery-code"),
    path(
        "account-changes/<uuid:change_id>/", device_views.account_change_page, name="account-change"
    ),
    path(
        "account-changes/<uuid:change_id>/options",
        device_views.account_change_options,
        name="account-change-options",
    ),
    path(
        "account-changes/<uuid:change_id>/sign",
        device_views.account_change_sign,
        name="account-change-sign",
    ),
    path(
        "account-changes/<uuid:change_id>/cancel",
        device_views.account_change_cancel,
        name="account-change-cancel",
    ),
    path(
        "account-changes/<uuid:change_id>/cancel-recovery",
        device_views.recovery_cancel_start,
        name="recovery-cancel",
    ),
    path("recover/", device_views.recovery_page, name="recover"),
    path("recover/options", device_views.recovery_options, name="recover-options"),
    path("recover/verify", device_views.recovery_verify, name="recover-verify"),
    path("sign/<uuid:action_id>/", signing_views.sign_page, name="sign"),
    path("sign/<uuid:action_id>/events", signing_views.sign_events, name="sign-events"),
    path("sign/<uuid:action_id>/options", signing_views.sign_options, name="sign-options"),
    path("sign/<uuid:action_id>/approve", signing_views.sign_approve, name="sign-approve"),
    path("sign/<uuid:action_id>/reject", signing_views.sign_reject, name="sign-reject"),
]
