"""ERC-4337 and Safe primitives: userOpHash, signature packing, the bundler JSON-RPC client.

Pure Python over web3.py/eth_abi: no Django, no app, no settings (callers pass URLs, timeouts
and keys), so `chain/` and every app can use them (enforced by `evm/tests/test_boundary.py`).
"""
