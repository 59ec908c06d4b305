// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {PackedUserOperation, IEntryPoint} from "@openzeppelin/contracts/interfaces/IERC4337.sol";
import {ERC4337Utils} from "@openzeppelin/contracts/account/utils/ERC4337Utils.sol";
import {Address} from "@openzeppelin/contracts/utils/Address.sol";
import {ECDSA} from "@openzeppelin/contracts/utils/cryptography/ECDSA.sol";
import {EIP712} from "@openzeppelin/contracts/utils/cryptography/EIP712.sol";
import {P256} from "@openzeppelin/contracts/utils/cryptography/P256.sol";
import {WebAuthn} from "@openzeppelin/contracts/utils/cryptography/WebAuthn.sol";
import {SpendPermissions} from "./SpendPermissions.sol";

/// An ERC-4337 account owned by any number of passkeys (P-256 public keys kept by index; the
/// constructor's key is owner 0). Every signature names the owner that made it,
/// `abi.encode(uint256 ownerIndex, bytes32[] batch, bytes webauthnAuth)`, so verifying one is a
/// single P-256 check (the P256VERIFY precompile at 0x100, OpenZeppelin's Solidity fallback
/// where a chain lacks it) whatever the number of owners.
///
/// A user operation's signature may approve a batch of userOpHashes with one WebAuthn
/// assertion (challenge = keccak256(abi.encode(batch))): the same owner change on every
/// configured chain for one passkey prompt. That is safe because each userOpHash binds the
/// chain id, the EntryPoint and the account (and the op's nonce): listing it approves that op
/// and nothing else. ERC-1271 and module transactions take no batch (their hashes need not
/// bind this account), so there the batch must be empty.
///
/// Recovery: a recovery key (an address; the server derives it from a code the user keeps)
/// can propose one thing, adding a passkey owner, which any owner can cancel until it is
/// executed, and anyone can execute once `delay` seconds have passed on chain.
///
/// Spend permissions (SpendPermissions.sol): a session key an owner granted signs token
/// transfers within an allowance per period; its signature starts with type(uint256).max where
/// an owner signature names an owner index. User operations only, never ERC-1271 or module
/// transactions.
contract PasskeyAccount is SpendPermissions, EIP712 {
    IEntryPoint private immutable _entryPoint;

    // keccak256("EIP712Domain(uint256 chainId,address verifyingContract)") and
    // keccak256("ModuleTx(bytes data,bytes32 salt)"): Zodiac's signed module transaction.
    bytes32 private constant DOMAIN_TYPEHASH = 0x47e79534a245952e8b16893a336b85a3d9ea9fa8c573f3d803afb92a79469218;
    bytes32 private constant MODULE_TX_TYPEHASH = 0x2939aeeda3ca260200c9f7b436b19e13207547ccc65cfedc857751c5ea6d91d4;
    bytes32 private constant RECOVERY_TYPEHASH = keccak256("RecoveryProposal(bytes32 qx,bytes32 qy,uint256 nonce)");

    struct Owner {
        bytes32 qx;
        bytes32 qy;
    }

    /// Owners by index; a removed owner's slot is zeroed and its index never reused.
    mapping(uint256 => Owner) private _owners;
    /// keccak256(qx, qy) → index + 1 (0: not a live owner).
    mapping(bytes32 => uint256) private _ownerSlot;
    uint256 public nextOwnerIndex;
    uint256 public ownerCount;

    address private _recoveryKey;
    uint256 private _recoveryDelay;
    Owner private _pending;
    uint256 private _readyAt; // 0: nothing pending (a pending proposal's readyAt is a block time)
    /// Bumped by every proposal, so a recovery-key signature is good for one proposal only.
    uint256 public recoveryNonce;

    /// Module transactions already relayed: a signature is good for one call only.
    mapping(bytes32 => bool) public consumed;

    event ModuleTxRelayed(address indexed modifier_, bytes32 indexed hash);
    event OwnerAdded(uint256 indexed index, bytes32 qx, bytes32 qy);
    event OwnerRemoved(uint256 indexed index, bytes32 qx, bytes32 qy);
    event RecoverySet(address indexed recoveryKey, uint256 delay);
    event RecoveryProposed(bytes32 qx, bytes32 qy, uint256 readyAt, uint256 nonce);
    event RecoveryCancelled(bytes32 qx, bytes32 qy);
    event RecoveryExecuted(uint256 indexed index, bytes32 qx, bytes32 qy);

    error PasskeyAccountInvalidPublicKey(bytes32 qx, bytes32 qy);

    constructor(IEntryPoint entryPoint_, bytes32 qx, bytes32 qy) EIP712("PasskeyAccount", "1") {
        _entryPoint = entryPoint_;
        _addOwner(qx, qy);
    }

    function entryPoint() public view override returns (IEntryPoint) {
        return _entryPoint;
    }

    // --- owners ----------------------------------------------------------------------------

    function ownerAt(uint256 index) external view returns (bytes32 qx, bytes32 qy) {
        Owner storage owner = _owners[index];
        return (owner.qx, owner.qy);
    }

    function isOwner(bytes32 qx, bytes32 qy) public view returns (bool) {
        return _ownerSlot[keccak256(abi.encode(qx, qy))] != 0;
    }

    /// Called by the account itself, i.e. from a user operation an owner signed.
    function addOwner(bytes32 qx, bytes32 qy) external onlySelf {
        _addOwner(qx, qy);
    }

    /// The key is named as well as the index, so an op built against a stale view of the
    /// owners fails instead of removing someone else.
    function removeOwnerAtIndex(uint256 index, bytes32 qx, bytes32 qy) external onlySelf {
        Owner storage owner = _owners[index];
        require(owner.qx == qx && owner.qy == qy && (qx | qy) != 0, "PasskeyAccount: no such owner");
        require(ownerCount > 1, "PasskeyAccount: last owner");
        delete _owners[index];
        delete _ownerSlot[keccak256(abi.encode(qx, qy))];
        ownerCount -= 1;
        emit OwnerRemoved(index, qx, qy);
    }

    function _addOwner(bytes32 qx, bytes32 qy) private returns (uint256 index) {
        if (!P256.isValidPublicKey(qx, qy)) revert PasskeyAccountInvalidPublicKey(qx, qy);
        bytes32 key = keccak256(abi.encode(qx, qy));
        require(_ownerSlot[key] == 0, "PasskeyAccount: already an owner");
        index = nextOwnerIndex++;
        _owners[index] = Owner(qx, qy);
        _ownerSlot[key] = index + 1;
        ownerCount += 1;
        emit OwnerAdded(index, qx, qy);
    }

    // --- signatures ------------------------------------------------------------------------

    function _validateUserOp(PackedUserOperation calldata userOp, bytes32 userOpHash, bytes calldata signature)
        internal
        view
        override
        returns (uint256)
    {
        if (_isPermissionSignature(signature)) return _validatePermissionOp(userOp, userOpHash);
        return _verify(userOpHash, signature, true)
            ? ERC4337Utils.SIG_VALIDATION_SUCCESS
            : ERC4337Utils.SIG_VALIDATION_FAILED;
    }

    /// ERC-1271 and module transactions: an owner's assertion over `hash` itself (no batch).
    /// A permission signature is never accepted here (it names no owner).
    function _rawSignatureValidation(bytes32 hash, bytes calldata signature) internal view override returns (bool) {
        if (_isPermissionSignature(signature)) return false;
        return _verify(hash, signature, false);
    }

    function _verify(bytes32 hash, bytes calldata signature, bool batchAllowed) private view returns (bool) {
        (bool ok, uint256 index, bytes32[] calldata batch, bytes calldata authData) = _decode(signature);
        if (!ok) return false;
        // The named owner only: one P-256 check whatever the number of owners.
        Owner storage owner = _owners[index];
        (bytes32 qx, bytes32 qy) = (owner.qx, owner.qy);
        if ((qx | qy) == 0) return false; // never an owner, or removed
        bytes32 challenge;
        (ok, challenge) = _challenge(hash, batch, batchAllowed);
        if (!ok) return false;
        (bool decoded, WebAuthn.WebAuthnAuth calldata auth) = WebAuthn.tryDecodeAuth(authData);
        if (!decoded) return false;
        return WebAuthn.verify(abi.encodePacked(challenge), auth, qx, qy);
    }

    /// What the assertion must be over: the hash itself, or a batch that lists it.
    function _challenge(bytes32 hash, bytes32[] calldata batch, bool batchAllowed)
        private
        pure
        returns (bool ok, bytes32 challenge)
    {
        if (batch.length == 0) return (true, hash);
        if (!batchAllowed) return (false, 0);
        for (uint256 i = 0; i < batch.length; i++) {
            if (batch[i] == hash) return (true, keccak256(abi.encode(batch)));
        }
        return (false, 0);
    }

    /// `abi.decode(signature, (uint256, bytes32[], bytes))` that returns false instead of
    /// reverting on malformed input (a bad signature is a failed validation, not a revert).
    function _decode(bytes calldata signature)
        private
        pure
        returns (bool ok, uint256 index, bytes32[] calldata batch, bytes calldata authData)
    {
        batch = _emptyBatch();
        authData = signature[0:0];
        if (signature.length < 0x60) return (false, 0, batch, authData);
        index = uint256(bytes32(signature[0x00:0x20]));
        uint256 batchOffset = uint256(bytes32(signature[0x20:0x40]));
        uint256 authOffset = uint256(bytes32(signature[0x40:0x60]));
        uint256 end = signature.length - 0x20;
        if (batchOffset > end || authOffset > end) return (false, 0, batch, authData);
        uint256 batchLength = uint256(bytes32(signature[batchOffset:batchOffset + 0x20]));
        uint256 authLength = uint256(bytes32(signature[authOffset:authOffset + 0x20]));
        if (batchLength > (end - batchOffset) / 0x20 || authLength > end - authOffset) {
            return (false, 0, batch, authData);
        }
        authData = signature[authOffset + 0x20:authOffset + 0x20 + authLength];
        assembly ("memory-safe") {
            batch.offset := add(signature.offset, add(batchOffset, 0x20))
            batch.length := batchLength
        }
        return (true, index, batch, authData);
    }

    function _emptyBatch() private pure returns (bytes32[] calldata batch) {
        assembly ("memory-safe") {
            batch.offset := 0
            batch.length := 0
        }
    }

    /// ERC-1271: an owner's WebAuthn assertion over `hash` (e.g. a Safe message hash).
    function isValidSignature(bytes32 hash, bytes calldata signature) external view returns (bytes4) {
        return _rawSignatureValidation(hash, signature) ? bytes4(0x1626ba7e) : bytes4(0xffffffff);
    }

    /// The legacy ERC-1271 form Safe 1.4.1 calls on contract owners: the assertion is over
    /// keccak256(data), the Safe's EIP-712 message hash.
    function isValidSignature(bytes calldata data, bytes calldata signature) external view returns (bytes4) {
        return _rawSignatureValidation(keccak256(data), signature) ? bytes4(0x20c13b0b) : bytes4(0xffffffff);
    }

    // --- recovery --------------------------------------------------------------------------

    /// Set (or with address(0), clear) the recovery key and its delay; drops a pending
    /// proposal, which the old key made.
    function setRecovery(address recoveryKey, uint256 delay) external onlySelf {
        _dropPending();
        _recoveryKey = recoveryKey;
        _recoveryDelay = delay;
        emit RecoverySet(recoveryKey, delay);
    }

    function recovery()
        external
        view
        returns (address key, uint256 delay, bytes32 pendingQx, bytes32 pendingQy, uint256 readyAt)
    {
        return (_recoveryKey, _recoveryDelay, _pending.qx, _pending.qy, _readyAt);
    }

    /// The EIP-712 hash the recovery key signs to propose (qx, qy) as a new owner: the domain
    /// binds the chain id and this account, the nonce makes it single use.
    function recoveryProposalHash(bytes32 qx, bytes32 qy, uint256 nonce) public view returns (bytes32) {
        return _hashTypedDataV4(keccak256(abi.encode(RECOVERY_TYPEHASH, qx, qy, nonce)));
    }

    /// Anyone may relay the recovery key's signature; the owner is added by executeRecovery
    /// once `delay` seconds of chain time have passed, unless an owner cancels first.
    function proposeRecovery(bytes32 qx, bytes32 qy, bytes calldata signature) external {
        require(_recoveryKey != address(0), "PasskeyAccount: no recovery key");
        require(_readyAt == 0, "PasskeyAccount: recovery pending");
        if (!P256.isValidPublicKey(qx, qy)) revert PasskeyAccountInvalidPublicKey(qx, qy);
        uint256 nonce = recoveryNonce;
        (address signer, ECDSA.RecoverError err,) =
            ECDSA.tryRecoverCalldata(recoveryProposalHash(qx, qy, nonce), signature);
        require(
            err == ECDSA.RecoverError.NoError && signer == _recoveryKey, "PasskeyAccount: not signed by the recovery key"
        );
        recoveryNonce = nonce + 1;
        _pending = Owner(qx, qy);
        _readyAt = block.timestamp + _recoveryDelay;
        emit RecoveryProposed(qx, qy, _readyAt, nonce);
    }

    /// Any owner, through a user operation, until the recovery is executed.
    function cancelRecovery() external onlySelf {
        require(_readyAt != 0, "PasskeyAccount: no recovery pending");
        _dropPending();
    }

    function executeRecovery() external {
        require(_readyAt != 0, "PasskeyAccount: no recovery pending");
        require(block.timestamp >= _readyAt, "PasskeyAccount: recovery not ready");
        (bytes32 qx, bytes32 qy) = (_pending.qx, _pending.qy);
        delete _pending;
        _readyAt = 0;
        // An owner may have added the same key meanwhile: then there is nothing left to add.
        uint256 slot = _ownerSlot[keccak256(abi.encode(qx, qy))];
        uint256 index = slot != 0 ? slot - 1 : _addOwner(qx, qy);
        emit RecoveryExecuted(index, qx, qy);
    }

    function _dropPending() private {
        if (_readyAt == 0) return;
        emit RecoveryCancelled(_pending.qx, _pending.qy);
        delete _pending;
        _readyAt = 0;
    }

    // --- calls -----------------------------------------------------------------------------

    /// Run one call from the account (a plain value transfer when data is empty); reverts
    /// bubble up, so the user operation fails with the callee's reason.
    function execute(address target, uint256 value, bytes calldata data) external onlyEntryPoint {
        (bool success, bytes memory returndata) = target.call{value: value}(data);
        if (!success) Address.verifyCallResult(success, returndata);
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

    /// The hash an owner signs to let a relayer make this account call `modifier_` with
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

    /// Relayed, not 4337: anyone may submit a module transaction an owner signed (e.g.
    /// enqueueing into the card Safe's Delay modifier, where this account is an enabled
    /// module). Single use; reverts bubble up so nothing is consumed on failure.
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
}

/// Counterfactual deployment: the account address depends on the entry point, the first
/// passkey's public key and a salt (the same on every chain); the first user operation
/// deploys it through initCode. Owners added later do not move it.
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
