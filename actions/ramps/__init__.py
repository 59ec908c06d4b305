"""Fiat on/off-ramps (Monerium for EUR, Avenia for BRL): the user's ramp accounts and their
KYC status, refreshed from the providers (actions/providers/ramps.py).

    models.py     RampAccount and the currencies, providers and KYC statuses
    services.py   the KYC refresh
    selectors.py  the user's ramp accounts
    public.py     the face: the ramp accounts and their refresh
"""
