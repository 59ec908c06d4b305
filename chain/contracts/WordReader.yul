// SPDX-License-Identifier: MIT
// Never deployed: this creation code with the calls packed after it is the data of an
// `eth_call` without `to` (evm/word_reader.py), and what it returns is that call's result. It
// makes each static call (a `balanceOf`, a vault's `convertToAssets`) and returns one uint256
// per call, abi-encoded as uint256[], so a chain's balances are one `eth_call` on any node.
// Yul, not a Solidity constructor: a Hardhat/EDR node spends its CPU per executed opcode and
// Solidity's ABI decoding of `address[]`/`bytes[]` arguments took ~430 opcodes a call, against
// ~60 for this loop. Packed per call: target (20 bytes), data length (2 bytes), data.
// A return that is not one 32-byte word (no code at the address) reads as 0; a call that
// reverts makes the whole read revert with its reason, as the call alone would.
object "WordReader" {
    code {
        let p := datasize("WordReader") // the first packed call, right after this code
        let out := 0x40 // where its result word goes: the array's offset and length go first
        for {} lt(p, codesize()) {} {
            codecopy(0, p, 32)
            let head := mload(0)
            let len := and(shr(80, head), 0xffff)
            codecopy(out, add(p, 22), len)
            // the return's first word lands on the call data, at out
            if iszero(staticcall(gas(), shr(96, head), out, len, out, 32)) {
                returndatacopy(0, 0, returndatasize())
                revert(0, returndatasize())
            }
            if iszero(eq(returndatasize(), 32)) { mstore(out, 0) }
            p := add(p, add(22, len))
            out := add(out, 32)
        }
        mstore(0, 0x20)
        mstore(0x20, shr(5, sub(out, 0x40)))
        return(0, out)
    }
}
