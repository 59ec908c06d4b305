// Local dev chain only: an in-process EDR simulated L1 (chain id 31337).
export default {
  networks: {
    default: { type: "edr-simulated", chainType: "l1" },
  },
};
