"""The signing page and the activity page: an action as its owner reads it, signs it or
declines it. It reads across the rooms (the action, the account's passkeys, a bridge's leg, a
spending permission's reasons), so it sits above them.

    views.py   the pages: activity, sign (with its live events), options, approve, reject
    facts.py   what those pages show about an action, in plain words (balances, prices,
               recipient, reasons)
    public.py  the face: the views for the routes
"""
