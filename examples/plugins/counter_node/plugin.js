// Example ephemeral plugin in Node.js: no SDK, just the JSON-RPC 2.0 lines.
// Each tick delivers the next number after the cursor (URL-safe base64, no padding).
// config: {deliver: {channel, to}, label?: string}
"use strict";
const readline = require("readline");

const rl = readline.createInterface({ input: process.stdin });
const waiting = new Map(); // reverse-call id -> resolve
let nextId = 1;

function send(msg) {
  process.stdout.write(JSON.stringify({ jsonrpc: "2.0", ...msg }) + "\n");
}

function call(method, params) {
  const id = `r${nextId++}`;
  return new Promise((resolve, reject) => {
    waiting.set(id, (reply) => (reply.error ? reject(new Error(reply.error.message)) : resolve(reply.result)));
    send({ id, method, params });
  });
}

const b64 = {
  decode: (s) => Buffer.from(s, "base64url").toString("utf8"),
  encode: (s) => Buffer.from(s, "utf8").toString("base64url"),
};

async function pollTick(req) {
  const p = req.params;
  const target = (p.config || {}).deliver;
  if (!target || !target.channel || !target.to) {
    return send({ id: req.id, error: { code: -32602, message: "deliver: {channel, to} is required" } });
  }
  const last = p.cursor == null ? 0 : parseInt(b64.decode(p.cursor), 10);
  const n = last + 1;
  const label = p.config.label || p.job_id;
  await call("deliver", { tick_id: p.tick_id, channel: target.channel, to: target.to,
                          payload: { text: `${label} #${n}`, item_id: n } });
  send({ id: req.id, result: { next_cursor: b64.encode(String(n)), next_interval_secs: null,
                               metrics: { items_seen: 1, items_dispatched: 1 } } });
}

rl.on("line", (line) => {
  if (!line.trim()) return;
  const msg = JSON.parse(line);
  if (msg.method === "poll_tick") {
    pollTick(msg).catch((e) => send({ id: msg.id, error: { code: -32001, message: String(e.message || e) } }));
  } else if (msg.method !== undefined) {
    if (msg.id != null) send({ id: msg.id, error: { code: -32601, message: "no such method" } });
  } else if (waiting.has(msg.id)) {
    const resolve = waiting.get(msg.id);
    waiting.delete(msg.id);
    resolve(msg);
  }
});
