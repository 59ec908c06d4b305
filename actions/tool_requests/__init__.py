"""What a tool asks, checked and built before anything is proposed: the asset, the amount, the
recipient (an address or an ENS name), the user's Picnic account on that chain, the swap quote
and the user operation with gas from the bundler. Both the proposals (proposals/services.py)
and the spending permissions (grants, spending under one, revoking) build on it, so it sits
below both.

    checks.py    the request checked and built; `ToolError`, what an action tool refuses
    public.py    the face: the checks the proposals and the permissions use
"""
