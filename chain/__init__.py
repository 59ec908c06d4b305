"""The local chain stack (Hardhat node, ERC-4337 EntryPoints, Alto bundler), driven from Python."""
