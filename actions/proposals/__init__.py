"""Proposals, the first step of every action: one entry per action tool (`transfer_propose`,
`swap_propose`, `card_state_propose`, `card_limit_propose`). A transfer or swap goes under the
agent's spending permission when one covers it (permissions/spending.py), else it is proposed
for the passkey.

    checks.py    what the request asks, checked and built: asset, amount, recipient, account,
                 swap quote, the user operation with gas; `ToolError`
    services.py  the entries and the `proposed` action each creates
"""
