// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {Account} from "@openzeppelin/contracts/account/Account.sol";
import {IEntryPoint} from "@openzeppelin/contracts/interfaces/IERC4337.sol";
import {Address} from "@openzeppelin/contracts/utils/Address.sol";
import {SignerP256} from "@openzeppelin/contracts/utils/cryptography/signers/SignerP256.sol";
import {SignerWebAuthn} from "@openzeppelin/contracts/utils/cryptography/signers/SignerWebAuthn.sol";

/// An ERC-4337 account owned by a passkey: validateUserOp accepts a WebAuthn assertion
/// (abi-encoded WebAuthn.WebAuthnAuth) whose challenge is the userOpHash, verified as P-256
/// on chain (the P256VERIFY precompile at 0x100, with OpenZeppelin's Solidity fallback).
contract PasskeyAccount is Account, SignerWebAuthn {
    IEntryPoint private immutable _entryPoint;

    constructor(IEntryPoint entryPoint_, bytes32 qx, bytes32 qy) SignerP256(qx, qy) {
        _entryPoint = entryPoint_;
    }

    function entryPoint() public view override returns (IEntryPoint) {
        return _entryPoint;
    }

    /// Run one call from the account (a plain value transfer when data is empty); reverts
    /// bubble up, so the user operation fails with the callee's reason.
    function execute(address target, uint256 value, bytes calldata data) external onlyEntryPoint {
        (bool success, bytes memory returndata) = target.call{value: value}(data);
        if (!success) Address.verifyCallResult(success, returndata);
    }

    /// ERC-1271: a WebAuthn assertion over `hash` (e.g. a Safe message hash) by this passkey.
    function isValidSignature(bytes32 hash, bytes calldata signature) external view returns (bytes4) {
        return _rawSignatureValidation(hash, signature) ? bytes4(0x1626ba7e) : bytes4(0xffffffff);
    }

    /// The legacy ERC-1271 form Safe 1.4.1 calls on contract owners: the assertion is over
    /// keccak256(data), the Safe's EIP-712 message hash.
    function isValidSignature(bytes calldata data, bytes calldata signature) external view returns (bytes4) {
        return _rawSignatureValidation(keccak256(data), signature) ? bytes4(0x20c13b0b) : bytes4(0xffffffff);
    }

    /// Several calls in one user operation (e.g. approve, then swap); all or nothing.
    function executeBatch(address[] calldata targets, uint256[] calldata values, bytes[] calldata datas)
        external
        onlyEntryPoint
    {
        for (uint256 i = 0; i < targets.length; i++) {
            (bool success, bytes memory returndata) = targets[i].call{value: values[i]}(datas[i]);
            if (!success) Address.verifyCallResult(success, returndata);
        }
    }
}

/// Counterfactual deployment: the account address depends on the entry point, the passkey's
/// public key and a salt; the first user operation deploys it through initCode.
contract PasskeyAccountFactory {
    IEntryPoint public immutable entryPoint;

    constructor(IEntryPoint entryPoint_) {
        entryPoint = entryPoint_;
    }

    function createAccount(bytes32 qx, bytes32 qy, uint256 salt) external returns (PasskeyAccount) {
        address predicted = getAddress(qx, qy, salt);
        if (predicted.code.length > 0) return PasskeyAccount(payable(predicted));
        return new PasskeyAccount{salt: bytes32(salt)}(entryPoint, qx, qy);
    }

    function getAddress(bytes32 qx, bytes32 qy, uint256 salt) public view returns (address) {
        bytes32 codeHash = keccak256(
            abi.encodePacked(type(PasskeyAccount).creationCode, abi.encode(entryPoint, qx, qy))
        );
        return address(uint160(uint256(keccak256(abi.encodePacked(bytes1(0xff), address(this), bytes32(salt), codeHash)))));
    }
}
