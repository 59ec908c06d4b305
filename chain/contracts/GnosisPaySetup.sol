// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

interface IModuleProxyFactory {
    function deployModule(address masterCopy, bytes memory initializer, uint256 saltNonce)
        external
        returns (address proxy);
}

interface IModuleEnabler {
    function enableModule(address module) external;
}

/// Delegatecalled by Safe.setup (its `to`/`data` hook), so `address(this)` is the new Safe:
/// deploys the card account's Zodiac Delay and Roles modifiers (owner, avatar and target: the
/// Safe), enables the user's account as the Delay's module and both modifiers on the Safe.
/// This is the Gnosis Pay account layout; doing it in setup needs no owner signature.
contract GnosisPaySetup {
    function setUpModules(
        address factory,
        address delayMastercopy,
        address rolesMastercopy,
        address delayModule,
        uint256 cooldown,
        uint256 expiration
    ) external {
        address safe = address(this);
        address delay = IModuleProxyFactory(factory).deployModule(
            delayMastercopy,
            abi.encodeWithSignature("setUp(bytes)", abi.encode(safe, safe, safe, cooldown, expiration)),
            0
        );
        address roles = IModuleProxyFactory(factory).deployModule(
            rolesMastercopy, abi.encodeWithSignature("setUp(bytes)", abi.encode(safe, safe, safe)), 0
        );
        IModuleEnabler(delay).enableModule(delayModule); // the Safe owns the Delay
        IModuleEnabler(safe).enableModule(delay);
        IModuleEnabler(safe).enableModule(roles);
    }
}
