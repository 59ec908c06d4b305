// Local dev chains only: in-process EDR simulated L1s. `hardhat node` serves the "node" network;
// its chain id comes from PICNIC_CHAIN_ID (chain/stack.py sets it: 31337 is the card's chain,
// 31338 the L2-like one), so one config starts either chain.
const chainId = Number(process.env.PICNIC_CHAIN_ID || 31337);
if (!Number.isSafeInteger(chainId) || chainId < 1) {
  throw new Error(`PICNIC_CHAIN_ID=${process.env.PICNIC_CHAIN_ID} is not a positive integer`);
}

export default {
  networks: {
    default: { type: "edr-simulated", chainType: "l1", chainId },
    node: { type: "edr-simulated", chainType: "l1", chainId },
  },
};
