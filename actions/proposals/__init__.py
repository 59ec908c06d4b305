"""Proposals, the first step of every action: one entry per action tool (`transfer_propose`,
`swap_propose`, `card_state_propose`, `card_limit_propose`). A transfer or swap goes under the
agent's spending permission when one covers it (permissions/spending.py), else it is proposed
for the passkey. What a request asks is checked and built in the `tool_requests` room.

    services.py  the entries and the `proposed` action each creates
    public.py    the face: the entries
"""
