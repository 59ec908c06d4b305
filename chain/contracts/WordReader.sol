// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

/// Never deployed: its creation code with the calls appended is the data of an `eth_call`
/// without `to`, and the constructor's return is that call's result. It makes each static call
/// (a `balanceOf`, a vault's `convertToAssets`) and returns one uint256 per call, so a chain's
/// balances are one `eth_call` on any node (no deployed helper, no state override): a node
/// spends most of a small call on the call itself, not on the contract code it runs.
/// A return that is not one 32-byte word (no code at the address) reads as 0; a call that
/// reverts makes the whole read revert with its reason, as the call alone would.
contract WordReader {
    constructor(address[] memory targets, bytes[] memory calls) {
        uint256[] memory words = new uint256[](targets.length);
        for (uint256 i = 0; i < targets.length; ++i) {
            (bool ok, bytes memory answer) = targets[i].staticcall(calls[i]);
            if (!ok) {
                assembly {
                    revert(add(answer, 32), mload(answer))
                }
            }
            if (answer.length == 32) words[i] = abi.decode(answer, (uint256));
        }
        bytes memory result = abi.encode(words);
        assembly {
            return(add(result, 32), mload(result))
        }
    }
}
