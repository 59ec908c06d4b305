"""The transaction history: Transfer logs read from the chain, executed actions and Gnosis Pay
card purchases, as one list the get_transactions tool pages through.

    models.py     TokenTransfer, CardPurchase, HistoryEntry
    services.py   the sync from the chain and from Gnosis Pay
    selectors.py  a page of the history behind an opaque cursor
    public.py     the face: the history page and its sync
"""
