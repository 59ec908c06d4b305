// Preloaded (`node --import ./bearer.mjs`) into the conformance suite, which cannot send a
// bearer token itself: every request it makes to MCP_BEARER_ORIGIN (the SDK client's fetch,
// its own fetch and undici.request calls) gets `Authorization: Bearer $MCP_BEARER_TOKEN`.
// Node's fetch and undici's request share the global dispatcher, so one interceptor covers both.
import { Agent, setGlobalDispatcher } from 'undici';

const token = process.env.MCP_BEARER_TOKEN;
const origin = process.env.MCP_BEARER_ORIGIN;
if (!token || !origin) throw new Error('set MCP_BEARER_TOKEN and MCP_BEARER_ORIGIN');

function withBearer(headers) {
  const value = `Bearer ${token}`;
  if (headers == null) return { authorization: value };
  if (Array.isArray(headers)) {
    // [name, value, name, value, ...] (or [[name, value], ...]): drop any Authorization.
    const flat = Array.isArray(headers[0]) ? headers.flat() : headers;
    const kept = [];
    for (let i = 0; i < flat.length; i += 2) {
      if (String(flat[i]).toLowerCase() !== 'authorization') kept.push(flat[i], flat[i + 1]);
    }
    return [...kept, 'authorization', value];
  }
  if (typeof headers[Symbol.iterator] === 'function') return withBearer([...headers].flat());
  const kept = Object.fromEntries(
    Object.entries(headers).filter(([name]) => name.toLowerCase() !== 'authorization')
  );
  return { ...kept, authorization: value };
}

const bearer = (dispatch) => (opts, handler) => {
  const target = typeof opts.origin === 'string' ? opts.origin : opts.origin?.origin;
  if (target === origin) opts = { ...opts, headers: withBearer(opts.headers) };
  return dispatch(opts, handler);
};

setGlobalDispatcher(new Agent().compose(bearer));
