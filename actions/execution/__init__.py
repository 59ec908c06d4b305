"""The action's life once proposed: created, signed or rejected (from the signing page, its own
room), sent by its kind (user operations here, card requests and the card limit in card/,
through the table of action types), reconciled, expired, purged; its status reads.

    models.py           ActionType, ActionStatus, the `action` lifecycle, Action, its history
    kinds.py            what a kind of action answers, the user operation's kind, and the
                        registry the table of types (actions/action_types.py) fills
    services.py         create, expire, submit, reconcile (+ the beat batch), status refresh,
                        staff mark-failed / re-send
    signing.py          sign or reject with the passkey → `signed` / `rejected`
    transitions.py      action_touch, ReconcileOutcome
    user_operations.py  ERC-4337: delivery to the bundler, re-sends, receipts, dropped ops
    retention.py        the purge of terminal actions past retention
    selectors.py        the action reads (status in one statement, stuck, pending on chain)
    public.py           the face: what the other rooms, the app level and the beat use
"""
