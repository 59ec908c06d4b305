"""The EVM side of production: ERC-4337 primitives (userOpHash, signature packing, the bundler
JSON-RPC client), the one Web3 factory (`rpc.http_web3`), many uint256 reads as one `eth_call`
(`word_reader`), the contracts' artifacts and addresses, and the on-chain account clients (the
passkey account, Safe, Zodiac Delay/Roles).

Pure Python over web3.py/eth_abi: no Django, no app, no settings (callers pass URLs, timeouts
and keys), so `chain/` and every app can use them (enforced by `evm/tests/test_boundary.py`).
"""
