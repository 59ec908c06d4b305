"""The card (a Gnosis Pay Safe): freeze and unfreeze through Gnosis Pay, and the daily limit
through the Safe's Delay and Roles modules.

    models.py     Card, GnosisPaySession
    state.py      freeze / unfreeze: SIWE sign-in, the request, its reconciliation
    limit.py      the daily limit: relayed, held for the cooldown, dispatched
    selectors.py  reads: the user's cards, the last state change, the session token
    public.py     the face: the card reads, the Gnosis Pay client, the two card kinds
"""
