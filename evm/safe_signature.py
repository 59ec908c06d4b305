"""A Safe signature made by a contract owner (Safe 1.4.1 "contract signature", v = 0):
r = owner address, s = offset of the owner's signature data, v = 0, then length ‖ data."""

from __future__ import annotations


def contract_signature(*, owner: str, owner_signature: bytes) -> str:
    r = bytes(12) + bytes.fromhex(owner[2:])
    s = (65).to_bytes(32, "big")  # the dynamic part starts right after the one static signature
    return (
        "0x" + (r + s + b"\x00" + len(owner_signature).to_bytes(32, "big") + owner_signature).hex()
    )
