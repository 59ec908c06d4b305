// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {Account} from "@openzeppelin/contracts/account/Account.sol";
import {PackedUserOperation} from "@openzeppelin/contracts/interfaces/IERC4337.sol";
import {ERC4337Utils} from "@openzeppelin/contracts/account/utils/ERC4337Utils.sol";
import {IERC20} from "@openzeppelin/contracts/token/ERC20/IERC20.sol";
import {SafeERC20} from "@openzeppelin/contracts/token/ERC20/utils/SafeERC20.sol";
import {ECDSA} from "@openzeppelin/contracts/utils/cryptography/ECDSA.sol";
import {MessageHashUtils} from "@openzeppelin/contracts/utils/cryptography/MessageHashUtils.sol";

/// Spend permissions: an owner grants a session key (a secp256k1 address) the right to send up
/// to `allowance` of one ERC-20 token per `period` seconds, from `start` until `end`, to the
/// listed recipients (or to anyone, or to no one when it only swaps). The session key then signs user operations whose callData
/// is exactly `executePermitted(id, to, amount)` (or, when the permission names a pair,
/// `executePermittedSwap`) and nothing else; no passkey is involved.
///
/// Its ops use the permission's own EntryPoint nonce keys: the key's top 160 bits are the id's
/// first 20 bytes (the low 32 bits are free, for spends in parallel).
///
/// A permission signature is `abi.encode(type(uint256).max, bytes32 id, bytes ecdsaSignature)`,
/// the ECDSA signature over the userOpHash as an EIP-191 personal message
/// ("\x19Ethereum Signed Message:\n32" ‖ userOpHash). The userOpHash binds the chain id, the
/// EntryPoint, this account and the op's nonce, so a signature is good for one op only.
///
/// A permission may also name a pair (`permitSwaps`): the session key may then sign
/// `executePermittedSwap(id, router, amountIn, data, minOut)`, which spends amountIn of the
/// permission's token from the same allowance, lets one of the permission's routers pull exactly
/// that, calls it with `data`, and reverts unless the account then holds at least `minOut` more
/// of the pair's token and at most amountIn less of its own: whatever `data` says, the output
/// lands in this account. Same-chain only (a bridge's output cannot be checked here).
///
/// Validation reads only this account's storage and never the block's time (ERC-7562): the
/// time window goes back to the EntryPoint as validAfter/validUntil, and the allowance is
/// checked and recorded when the op executes, so two ops that together exceed it cannot both
/// move tokens. An id is never reused, even after revocation.
abstract contract SpendPermissions is Account {
    using SafeERC20 for IERC20;

    /// The first word of a permission signature (an owner signature names an owner index there).
    uint256 internal constant PERMISSION_SIGNATURE = type(uint256).max;

    struct Permission {
        address sessionKey;
        address token;
        uint160 allowance; // per period, in the token's smallest unit
        uint48 period; // seconds
        uint48 start; // first second spends are allowed
        uint48 end; // first second they are not
        bool anyRecipient;
    }

    struct Spend {
        uint48 periodIndex; // (time - start) / period when spentInPeriod was last recorded
        uint160 spentInPeriod;
    }

    mapping(bytes32 => Permission) private _permissions;
    mapping(bytes32 => mapping(address => bool)) private _recipients;
    mapping(bytes32 => Spend) private _spends;
    /// The pair's output token of a permission that may swap (0: transfers only), and the
    /// routers it may swap through (never recipients of transfers).
    mapping(bytes32 => address) private _swapTo;
    mapping(bytes32 => mapping(address => bool)) private _routers;
    /// Every id ever granted: an id is never granted twice, even after it was revoked.
    mapping(bytes32 => bool) public usedPermissionIds;

    event PermissionGranted(
        bytes32 indexed id,
        address indexed sessionKey,
        address indexed token,
        uint160 allowance,
        uint48 period,
        uint48 start,
        uint48 end,
        bool anyRecipient
    );
    event PermissionRecipient(bytes32 indexed id, address indexed recipient);
    event PermissionRevoked(bytes32 indexed id);
    event PermissionSwapAllowed(bytes32 indexed id, address indexed toToken);
    event PermissionRouter(bytes32 indexed id, address indexed router);
    event PermissionSwapped(
        bytes32 indexed id, address indexed router, address indexed toToken, uint256 amountIn, uint256 amountOut
    );
    event PermissionSpent(
        bytes32 indexed id, address indexed to, uint256 amount, uint256 periodIndex, uint256 spentInPeriod
    );

    modifier onlySelf() {
        require(msg.sender == address(this), "PasskeyAccount: only the account itself");
        _;
    }

    // --- grant and revoke (owner-signed user operations: execute(self, 0, data)) ------------

    function grantPermission(
        bytes32 id,
        address sessionKey,
        address token,
        uint160 allowance,
        uint48 period,
        uint48 start,
        uint48 end,
        address[] calldata recipientList,
        bool anyRecipient
    ) external onlySelf {
        require(!usedPermissionIds[id], "PasskeyAccount: permission id already used");
        require(sessionKey != address(0), "PasskeyAccount: no session key");
        require(token != address(0) && token.code.length > 0, "PasskeyAccount: token is not a contract");
        require(allowance > 0, "PasskeyAccount: zero allowance");
        require(period > 0, "PasskeyAccount: zero period");
        require(end > start, "PasskeyAccount: end before start");
        require(end > block.timestamp, "PasskeyAccount: end in the past");
        // Neither: no transfers at all (a permission that only swaps, see permitSwaps).
        require(recipientList.length == 0 || !anyRecipient, "PasskeyAccount: recipients or any recipient, not both");
        usedPermissionIds[id] = true;
        _permissions[id] = Permission(sessionKey, token, allowance, period, start, end, anyRecipient);
        emit PermissionGranted(id, sessionKey, token, allowance, period, start, end, anyRecipient);
        for (uint256 i = 0; i < recipientList.length; i++) {
            require(recipientList[i] != address(0), "PasskeyAccount: zero recipient");
            if (_recipients[id][recipientList[i]]) continue; // listed twice: once is enough
            _recipients[id][recipientList[i]] = true;
            emit PermissionRecipient(id, recipientList[i]);
        }
    }

    /// Lets a live permission swap its token into `toToken` through the listed routers; once
    /// per permission, in the same owner-signed op as the grant (an executeBatch).
    function permitSwaps(bytes32 id, address toToken, address[] calldata routerList) external onlySelf {
        address token = _permissions[id].token;
        require(token != address(0), "PasskeyAccount: no such permission");
        require(_swapTo[id] == address(0), "PasskeyAccount: swaps already set");
        require(toToken != token && toToken.code.length > 0, "PasskeyAccount: bad pair");
        require(routerList.length > 0, "PasskeyAccount: no router");
        _swapTo[id] = toToken;
        emit PermissionSwapAllowed(id, toToken);
        for (uint256 i = 0; i < routerList.length; i++) {
            address r = routerList[i];
            // A router is a contract that is none of the tokens nor the account: approving it
            // must not let the calldata reach them directly.
            require(
                r.code.length > 0 && r != token && r != toToken && r != address(this),
                "PasskeyAccount: bad router"
            );
            if (_routers[id][r]) continue;
            _routers[id][r] = true;
            emit PermissionRouter(id, r);
        }
    }

    function revokePermission(bytes32 id) external onlySelf {
        require(_permissions[id].sessionKey != address(0), "PasskeyAccount: no such permission");
        delete _permissions[id];
        emit PermissionRevoked(id);
    }

    // --- spending (session-key-signed user operations) -------------------------------------

    function executePermitted(bytes32 id, address to, uint256 amount) external onlyEntryPoint {
        Permission memory p = _permissions[id];
        _spend(id, p, to, amount);
        require(p.anyRecipient || _recipients[id][to], "PasskeyAccount: recipient not allowed");
        IERC20(p.token).safeTransfer(to, amount);
    }

    /// Swaps amountIn of the permission's token through an allowed router; `data` is the
    /// router call (its recipient must be this account: the balance check below says so).
    function executePermittedSwap(bytes32 id, address router, uint256 amountIn, bytes calldata data, uint256 minOut)
        external
        onlyEntryPoint
    {
        Permission memory p = _permissions[id];
        _spend(id, p, router, amountIn);
        address toToken = _swapTo[id];
        require(toToken != address(0) && _routers[id][router], "PasskeyAccount: router not allowed");
        require(minOut > 0, "PasskeyAccount: zero minimum output");
        IERC20 tokenIn = IERC20(p.token);
        uint256 inBefore = tokenIn.balanceOf(address(this));
        uint256 outBefore = IERC20(toToken).balanceOf(address(this));
        tokenIn.forceApprove(router, amountIn);
        (bool ok, bytes memory reason) = router.call(data);
        if (!ok) {
            assembly ("memory-safe") {
                revert(add(reason, 0x20), mload(reason))
            }
        }
        tokenIn.forceApprove(router, 0); // nothing left for the router to pull later
        uint256 outAfter = IERC20(toToken).balanceOf(address(this));
        require(
            outAfter >= outBefore + minOut && tokenIn.balanceOf(address(this)) + amountIn >= inBefore,
            "PasskeyAccount: swap output not received"
        );
        emit PermissionSwapped(id, router, toToken, amountIn, outAfter - outBefore);
    }

    /// Checks the window and records `amount` against the period's allowance (transfers and
    /// swaps share it).
    function _spend(bytes32 id, Permission memory p, address to, uint256 amount) private {
        require(p.sessionKey != address(0), "PasskeyAccount: no such permission");
        require(block.timestamp >= p.start, "PasskeyAccount: permission not started");
        require(block.timestamp < p.end, "PasskeyAccount: permission expired");
        uint48 index = uint48((block.timestamp - p.start) / p.period);
        Spend memory s = _spends[id];
        uint256 spent = s.periodIndex == index ? s.spentInPeriod : 0; // a new period starts at 0
        require(amount <= p.allowance && spent + amount <= p.allowance, "PasskeyAccount: over the period's allowance");
        spent += amount;
        _spends[id] = Spend(index, uint160(spent));
        emit PermissionSpent(id, to, amount, index, spent);
    }

    // --- reads -----------------------------------------------------------------------------

    function permission(bytes32 id)
        external
        view
        returns (
            address sessionKey,
            address token,
            uint160 allowance,
            uint48 period,
            uint48 start,
            uint48 end,
            bool anyRecipient
        )
    {
        Permission storage p = _permissions[id];
        return (p.sessionKey, p.token, p.allowance, p.period, p.start, p.end, p.anyRecipient);
    }

    /// The pair's output token (0: no swaps, or no such permission).
    function swapTo(bytes32 id) external view returns (address) {
        return _permissions[id].sessionKey == address(0) ? address(0) : _swapTo[id];
    }

    function isRouter(bytes32 id, address router) external view returns (bool) {
        return _permissions[id].sessionKey != address(0) && _routers[id][router];
    }

    /// False once the permission is revoked (or never existed).
    function isRecipient(bytes32 id, address recipient) external view returns (bool) {
        return _permissions[id].sessionKey != address(0) && _recipients[id][recipient];
    }

    /// What may still be spent now (at block.timestamp) and until when: the end of the current
    /// period, or the permission's end if that comes first. (0, 0) when the permission does not
    /// exist, has not started or has ended.
    function spendable(bytes32 id) external view returns (uint256 remaining, uint256 periodEndsAt) {
        Permission storage p = _permissions[id];
        if (p.sessionKey == address(0) || block.timestamp < p.start || block.timestamp >= p.end) return (0, 0);
        uint256 index = (block.timestamp - p.start) / p.period;
        Spend storage s = _spends[id];
        uint256 spent = s.periodIndex == index ? s.spentInPeriod : 0;
        remaining = p.allowance - spent;
        periodEndsAt = uint256(p.start) + (index + 1) * p.period;
        if (periodEndsAt > p.end) periodEndsAt = p.end;
    }

    // --- validation --------------------------------------------------------------------------

    function _isPermissionSignature(bytes calldata signature) internal pure returns (bool) {
        return signature.length >= 0x20 && uint256(bytes32(signature[0:0x20])) == PERMISSION_SIGNATURE;
    }

    /// A session key's user operation: its callData must be exactly
    /// `executePermitted(id, to, amount)` (`to` allowed) or `executePermittedSwap(id, router, …)`
    /// (`router` one of the permission's) for the id its signature names, its nonce key the
    /// permission's, the key must be that permission's. Returns the permission's window as validAfter/validUntil
    /// (the EntryPoint compares them with the block's time); never reverts on malformed input.
    function _validatePermissionOp(PackedUserOperation calldata userOp, bytes32 userOpHash)
        internal
        view
        returns (uint256)
    {
        (bool ok, bytes32 id, bytes calldata ecdsaSignature) = _decodePermissionSignature(userOp.signature);
        if (!ok) return ERC4337Utils.SIG_VALIDATION_FAILED;
        bytes calldata data = userOp.callData;
        // executePermitted(id, to, amount) or executePermittedSwap(id, router, amountIn, data,
        // minOut): both have the id, then the recipient or the router, in their first two words.
        bool swap = data.length >= 0xc4 && bytes4(data[0:4]) == this.executePermittedSwap.selector;
        if (!swap && (data.length != 0x64 || bytes4(data[0:4]) != this.executePermitted.selector)) {
            return ERC4337Utils.SIG_VALIDATION_FAILED;
        }
        if (bytes32(data[4:0x24]) != id) return ERC4337Utils.SIG_VALIDATION_FAILED;
        // The op's nonce key must be the permission's own (its top 160 bits are the id's first
        // 20 bytes; the low 32 bits are free for parallel spends): a session key cannot use up
        // the owners' nonces, or another permission's.
        if (uint160(userOp.nonce >> 96) != uint160(bytes20(id))) return ERC4337Utils.SIG_VALIDATION_FAILED;
        uint256 toWord = uint256(bytes32(data[0x24:0x44]));
        if (toWord >> 160 != 0) return ERC4337Utils.SIG_VALIDATION_FAILED;
        Permission storage p = _permissions[id];
        address sessionKey = p.sessionKey;
        if (sessionKey == address(0)) return ERC4337Utils.SIG_VALIDATION_FAILED;
        if (swap) {
            if (!_routers[id][address(uint160(toWord))]) return ERC4337Utils.SIG_VALIDATION_FAILED;
        } else if (!p.anyRecipient && !_recipients[id][address(uint160(toWord))]) {
            return ERC4337Utils.SIG_VALIDATION_FAILED;
        }
        (address signer, ECDSA.RecoverError err,) =
            ECDSA.tryRecoverCalldata(MessageHashUtils.toEthSignedMessageHash(userOpHash), ecdsaSignature);
        if (err != ECDSA.RecoverError.NoError || signer != sessionKey) return ERC4337Utils.SIG_VALIDATION_FAILED;
        // The EntryPoint accepts validAfter <= time <= validUntil; spends run in [start, end).
        return ERC4337Utils.packValidationData(true, p.start, p.end - 1);
    }

    /// `abi.decode(signature, (uint256, bytes32, bytes))` that returns false instead of
    /// reverting on malformed input.
    function _decodePermissionSignature(bytes calldata signature)
        private
        pure
        returns (bool ok, bytes32 id, bytes calldata ecdsaSignature)
    {
        ecdsaSignature = signature[0:0];
        if (signature.length < 0x80 || !_isPermissionSignature(signature)) return (false, 0, ecdsaSignature);
        id = bytes32(signature[0x20:0x40]);
        uint256 offset = uint256(bytes32(signature[0x40:0x60]));
        if (offset > signature.length - 0x20) return (false, 0, ecdsaSignature);
        uint256 length = uint256(bytes32(signature[offset:offset + 0x20]));
        if (length > signature.length - offset - 0x20) return (false, 0, ecdsaSignature);
        ecdsaSignature = signature[offset + 0x20:offset + 0x20 + length];
        return (true, id, ecdsaSignature);
    }
}
