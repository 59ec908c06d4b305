from django.urls import path

from actions import signing_views, views

app_name = "actions"

api_urlpatterns = [
    path("actions/transfer", views.TransferView.as_view(), name="transfer"),
    path("actions/swap", views.SwapView.as_view(), name="swap"),
    path("actions/card_freeze", views.CardFreezeView.as_view(), name="card-freeze"),
    path("actions/card_unfreeze", views.CardUnfreezeView.as_view(), name="card-unfreeze"),
    path("actions/card_limit", views.CardLimitView.as_view(), name="card-limit"),
    path("smart-accounts", views.SmartAccountsView.as_view(), name="smart-accounts"),
    path("balances", views.BalancesView.as_view(), name="balances"),
    path("card", views.CardView.as_view(), name="card"),
    path("profile", views.ProfileView.as_view(), name="profile"),
    path("transactions", views.TransactionsView.as_view(), name="transactions"),
    path("actions/<str:action_id>", views.ActionStatusView.as_view(), name="action-status"),
]

staff_urlpatterns = [
    path("actions/<uuid:action_id>/", views.action_timeline, name="action-timeline"),
    path(
        "actions/<uuid:action_id>/mark-failed",
        views.action_mark_failed_view,
        name="action-mark-failed",
    ),
    path("actions/<uuid:action_id>/resend", views.action_resend_view, name="action-resend"),
]


signing_urlpatterns = [
    path("passkeys/", signing_views.passkeys_page, name="passkeys"),
    path(
        "passkeys/register/options", signing_views.passkey_register_options, name="passkey-options"
    ),
    path("passkeys/register/verify", signing_views.passkey_register_verify, name="passkey-verify"),
    path("sign/<uuid:action_id>/", signing_views.sign_page, name="sign"),
    path("sign/<uuid:action_id>/options", signing_views.sign_options, name="sign-options"),
    path("sign/<uuid:action_id>/approve", signing_views.sign_approve, name="sign-approve"),
    path("sign/<uuid:action_id>/reject", signing_views.sign_reject, name="sign-reject"),
]
