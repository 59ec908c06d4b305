// Preloaded into the Alto bundler (`node --require`): Alto's HTTP server binds 0.0.0.0 in its
// source, and nothing of the local chain stack may listen beyond loopback.
const net = require("node:net");

const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
  const host = process.env.PICNIC_BIND_HOST || "127.0.0.1";
  if (args.length && typeof args[0] === "object" && args[0] !== null && !Array.isArray(args[0])) {
    if (args[0].path === undefined) args[0] = { ...args[0], host };
  } else if (typeof args[0] === "number" || (typeof args[0] === "string" && /^\d+$/.test(args[0]))) {
    if (typeof args[1] === "string") args[1] = host;
    else args.splice(1, 0, host);
  }
  return listen.apply(this, args);
};
