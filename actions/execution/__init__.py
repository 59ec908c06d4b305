"""The action's life once proposed: created, signed or rejected on the signing page, sent
(user operations, card requests, the card limit: the `KINDS` table), reconciled, expired,
purged; its status reads and the signing and activity pages.

    models.py           ActionType, ActionStatus, the `action` lifecycle, Action, its history
    kinds.py            the table of action types: how each is signed, sent and reconciled
    services.py         create, expire, submit, reconcile (+ the beat batch), status refresh,
                        staff mark-failed / re-send
    signing.py          sign or reject with the passkey → `signed` / `rejected`
    transitions.py      action_touch, ReconcileOutcome
    user_operations.py  ERC-4337: delivery to the bundler, re-sends, receipts, dropped ops
    retention.py        the purge of terminal actions past retention
    selectors.py        the action reads (status in one statement, stuck, pending on chain)
    serializers.py      the status answer's serializer
    signing_views.py    the signing page and the activity page
    signing_facts.py    what those pages show about an action (balances, prices, reasons)
"""
