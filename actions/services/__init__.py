"""Writes for Picnic actions, one module per seam. Import from the module that owns the thing;
nothing is re-exported here.

An action's lifecycle, in order:
    proposals.py        propose: the action tools build what the passkey signs → `proposed`
    signing.py          sign or reject on the signing page → `signed` / `rejected`
    lifecycle.py        create, expire, submit, reconcile, staff mark-failed / re-send
    kinds.py            the table of action types: how each is signed, submitted, reconciled
    transitions.py      action_touch, ReconcileOutcome (a status change: core.lifecycle.transition)

What the kinds carry out:
    user_operations.py  ERC-4337: delivery to the bundler, re-sends, receipts, dropped ops
    card_state.py       card freeze / unfreeze through Gnosis Pay (SIWE sign-in)
    card_limit.py       the card's daily limit: Delay / Roles, through the relayer

The rest:
    passkeys.py         passkey registration (the WebAuthn ceremony)
    ramps.py            fiat ramps: KYC status from the providers
    history.py          transaction history: chain transfers, executed actions, card purchases
    retention.py        purge of terminal actions past the retention window
"""
