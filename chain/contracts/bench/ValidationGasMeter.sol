// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {IAccount, PackedUserOperation} from "@openzeppelin/contracts/interfaces/IERC4337.sol";

/// BENCHMARK ONLY (bench/owner_gas.py): its runtime code is put at the EntryPoint's address in
/// an eth_call state override, so the account sees the EntryPoint as caller; returns the gas
/// `validateUserOp` used (cold storage, as in a bundle) and what it returned.
contract ValidationGasMeter {
    function measure(IAccount account, PackedUserOperation calldata op, bytes32 opHash)
        external
        returns (uint256 gasUsed, uint256 validationData)
    {
        uint256 before = gasleft();
        validationData = account.validateUserOp(op, opHash, 0);
        gasUsed = before - gasleft();
    }
}
