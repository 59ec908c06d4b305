// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {IERC20} from "@openzeppelin/contracts/token/ERC20/IERC20.sol";
import {SafeERC20} from "@openzeppelin/contracts/token/ERC20/utils/SafeERC20.sol";
import {Ownable} from "@openzeppelin/contracts/access/Ownable.sol";

/// A fixed-rate exchange for the dev chain: what the local swap-quote server routes through.
/// rate[tokenIn][tokenOut] is tokenOut base units per 1e18 base units of tokenIn.
contract DemoSwapRouter is Ownable {
    using SafeERC20 for IERC20;

    mapping(address => mapping(address => uint256)) public rate;

    error NoRoute(address tokenIn, address tokenOut);
    error InsufficientOutput(uint256 amountOut, uint256 minAmountOut);

    constructor(address owner_) Ownable(owner_) {}

    function setRate(address tokenIn, address tokenOut, uint256 outPer1e18In) external onlyOwner {
        rate[tokenIn][tokenOut] = outPer1e18In;
    }

    function quote(address tokenIn, address tokenOut, uint256 amountIn) public view returns (uint256) {
        uint256 r = rate[tokenIn][tokenOut];
        if (r == 0) revert NoRoute(tokenIn, tokenOut);
        return (amountIn * r) / 1e18;
    }

    function swap(address tokenIn, address tokenOut, uint256 amountIn, uint256 minAmountOut, address to)
        external
        returns (uint256 amountOut)
    {
        amountOut = quote(tokenIn, tokenOut, amountIn);
        if (amountOut < minAmountOut) revert InsufficientOutput(amountOut, minAmountOut);
        IERC20(tokenIn).safeTransferFrom(msg.sender, address(this), amountIn);
        IERC20(tokenOut).safeTransfer(to, amountOut);
    }
}
