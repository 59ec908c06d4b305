// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {Account} from "@openzeppelin/contracts/account/Account.sol";
import {IEntryPoint} from "@openzeppelin/contracts/interfaces/IERC4337.sol";
import {Address} from "@openzeppelin/contracts/utils/Address.sol";
import {SignerP256} from "@openzeppelin/contracts/utils/cryptography/signers/SignerP256.sol";
import {SignerWebAuthn} from "@openzeppelin/contracts/utils/cryptography/signers/SignerWebAuthn.sol";

/// BENCHMARK BASELINE ONLY (bench/owner_gas.py), never deployed by the stack: PasskeyAccount as
/// it was with one owner (chain/contracts/PasskeyAccount.sol before owners by index), renamed;
/// its factory left out. Kept as source, not rebuilt from git history, so the baseline compiles
/// with the same solc settings in any checkout and cannot drift.
///
/// An ERC-4337 account owned by a passkey: validateUserOp accepts a WebAuthn assertion
/// (abi-encoded WebAuthn.WebAuthnAuth) whose challenge is the userOpHash, verified as P-256
/// on chain (the P256VERIFY precompile at 0x100, with OpenZeppelin's Solidity fallback).
contract SingleOwnerPasskeyAccount is Account, SignerWebAuthn {
    IEntryPoint private immutable _entryPoint;

    // keccak256("EIP712Domain(uint256 chainId,address verifyingContract)") and
    // keccak256("ModuleTx(bytes data,bytes32 salt)"): Zodiac's signed module transaction.
    bytes32 private constant DOMAIN_TYPEHASH = 0x47e79534a245952e8b16893a336b85a3d9ea9fa8c573f3d803afb92a79469218;
    bytes32 private constant MODULE_TX_TYPEHASH = 0x2939aeeda3ca260200c9f7b436b19e13207547ccc65cfedc857751c5ea6d91d4;

    /// Module transactions already relayed: a signature is good for one call only.
    mapping(bytes32 => bool) public consumed;

    event ModuleTxRelayed(address indexed modifier_, bytes32 indexed hash);

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

    /// The hash the passkey signs to let a relayer make this account call `modifier_` with
    /// `data`: Zodiac's EIP-712 ModuleTx hash (domain: chain id and the modifier), the same
    /// hash a Zodiac modifier with signature support (Delay 1.1) checks itself.
    function moduleTxHash(address modifier_, bytes calldata data, bytes32 salt) public view returns (bytes32) {
        bytes32 domainSeparator = keccak256(abi.encode(DOMAIN_TYPEHASH, block.chainid, modifier_));
        return keccak256(
            abi.encodePacked(
                bytes1(0x19), bytes1(0x01), domainSeparator, keccak256(abi.encode(MODULE_TX_TYPEHASH, keccak256(data), salt))
            )
        );
    }

    /// Relayed, not 4337: anyone may submit a module transaction this account's passkey
    /// signed (e.g. enqueueing into the card Safe's Delay modifier, where this account is an
    /// enabled module). Single use; reverts bubble up so nothing is consumed on failure.
    function execModuleTx(address modifier_, bytes calldata data, bytes32 salt, bytes calldata signature)
        external
        returns (bytes memory)
    {
        bytes32 hash = moduleTxHash(modifier_, data, salt);
        require(!consumed[hash], "PasskeyAccount: module transaction already relayed");
        require(_rawSignatureValidation(hash, signature), "PasskeyAccount: invalid passkey signature");
        consumed[hash] = true;
        (bool success, bytes memory returndata) = modifier_.call(data);
        if (!success) Address.verifyCallResult(success, returndata);
        emit ModuleTxRelayed(modifier_, hash);
        return returndata;
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
