"""Spending permissions: an agent spends within limits the user signed once.

An agent asks (`spend_permission_request`, the MCP tool `request_spend_permission`): the
request is checked whole, a session key is made for this grant only (sealed at rest,
session_keys.py), and a `spendGrant` action carries the user operation in which the passkey
account calls `grantPermission` on itself. The user signs it on the usual signing page; the
usual submission and reconciliation follow (kinds.SpendGrant), and the permission follows its
action (`spend_permission_follow`): granting once signed, active once included.

Under an active permission, a `transfer` of the permission's agent, token, recipient and
window that the chain's `spendable` covers is signed by the server with the session key
(`transfer_under_permission`): the op calls `executePermitted`, which the contract checks
again (allowance per period, window, recipient) and records. Anything else falls back to the
passkey with the reason.

A permission may also name a pair, token → to_token on the same chain: a `swap` of that pair
within it (`swap_under_permission`) calls `executePermittedSwap` through one of the routers
named at the grant (the quote provider's contract, asked when the agent asks), and the account
reverts unless the output arrives in it. A cross-chain pair is refused: a bridge's output cannot
be checked on the source chain.

Revoking (the user's page, or disconnecting the agent) destroys the session key at once, then
a `spendRevoke` action calls `revokePermission` on chain with one passkey signature. The sweep
(beat) ends permissions past their expiry and follows grants and revocations whose action
ended outside the worker (expired, rejected).

    models.py        SpendPermission, its lifecycle and history
    grants.py        the request checked whole and its `spendGrant` action
    spending.py      whether a permission covers a transfer or swap, and the op its key signs
    revoking.py      revocation by the user, on disconnect, on deactivation
    follow.py        the permission following its actions; the expiry sweep
    session_keys.py  session keys sealed with Fernet
    reasons.py       why a permission did not cover a spend (codes and words)
    receivers.py     the receivers of the core's agent signals
    selectors.py     the payload the tools and pages show
    views.py         the user's Spending permissions page
    public.py        the face: what the other rooms, the app level and the routes use
"""
