"""The user's accounts and who owns them: passkeys, smart accounts and tokens, the owner
changes (add or remove a device, the recovery code, a recovery) on every chain at once, device
links, and what the pages remember (time zone, language).

    models.py           Passkey, SmartAccount, Token, AccountChange (its lifecycle), DeviceLink,
                        RecoverySetup, Preferences
    passkeys.py         passkey registration (the WebAuthn ceremony), the Picnic smart account
    owner_changes.py    an owner change proposed and signed with one passkey prompt; expiry
    change_delivery.py  the change carried out on each chain: sent, repaired, reconciled
    devices.py          device links and the recovery throttle
    recovery.py         the recovery code: set up, recover, cancel; the beat processing
    mail.py             the e-mails about devices and recovery
    preferences.py      time zone and language of the end-user pages
    selectors.py        reads: accounts, tokens, passkeys, changes, the recovery setup
    pages.py            the passkeys page (register, rename, remove)
    device_views.py     the device, account-change and recovery pages
    public.py           the face: what the other rooms, the app level and the routes use
"""
