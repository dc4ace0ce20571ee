// router.js: which inbound messages are payload, and each payload delivered once although the
// server sends it on both channels (pure). Spec references name llmrtc v1 sections.

/** Messages handled by the client itself (WebSocket only); everything else is payload. */
export const SIGNALING_TYPES = new Set(["ready", "pong", "signal", "reconnect-ack"]);

/** Error codes that refuse a `reconnect` (spec: "Error Codes"). */
export const SESSION_CODES = new Set(["SESSION_NOT_FOUND", "SESSION_EXPIRED"]);

/** 32-bit FNV-1a of a string, as 8 hex digits (a compact fingerprint for dedupe). */
export function fnv1a(text) {
  let h = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) {
    h ^= text.charCodeAt(i);
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  return h.toString(16).padStart(8, "0");
}

/**
 * Delivers each payload message once although the server sends it on both the data channel and
 * the WebSocket (spec: "Transport Channels").
 *
 * Every message is accepted from whichever channel brings it first (normally the data channel,
 * the lower-latency one) and its twin from the other channel is dropped. Twins are matched by the
 * optional `seq` number when the server stamps one, otherwise by a fingerprint of the exact text,
 * FIFO per fingerprint, so legitimately repeated messages (two identical `tts-start`) still
 * arrive twice. Because both channels are ordered, first-arrival delivery keeps the order.
 * Unmatched entries expire after `windowMs` (a message sent on one channel only has no twin).
 */
export class PayloadRouter {
  /** @param {{windowMs?: number, maxEntries?: number, now?: () => number}} [opts] */
  constructor(opts = {}) {
    this.windowMs = opts.windowMs ?? 10000;
    this.maxEntries = opts.maxEntries ?? 512;
    this.now = opts.now ?? Date.now;
    /** @type {{ws: Map<string, number[]>, dc: Map<string, number[]>}} arrival times by key */
    this.pending = { ws: new Map(), dc: new Map() };
    this.counts = { ws: 0, dc: 0 };
    this.dropped = 0;
  }

  /**
   * @param {"ws" | "dc"} channel where the text arrived
   * @param {string} text the raw JSON text
   * @param {{seq?: unknown, type?: unknown}} msg the parsed message
   * @returns {boolean} true if the message must be delivered, false if it is a twin
   */
  accept(channel, text, msg) {
    const now = this.now();
    this._expire(now);
    const key = Number.isFinite(msg.seq) ? `#${msg.seq}` : `${text.length}:${fnv1a(text)}`;
    const other = channel === "ws" ? "dc" : "ws";
    const twins = this.pending[other].get(key);
    if (twins && twins.length) {
      twins.shift();
      if (!twins.length) this.pending[other].delete(key);
      this.counts[other] -= 1;
      this.dropped += 1;
      return false;
    }
    const mine = this.pending[channel];
    if (this.counts[channel] >= this.maxEntries) this._evictOldest(channel);
    const list = mine.get(key);
    if (list) list.push(now);
    else mine.set(key, [now]);
    this.counts[channel] += 1;
    return true;
  }

  /** Forget everything (a new connection starts a new pair of channels). */
  reset() {
    this.pending.ws.clear();
    this.pending.dc.clear();
    this.counts = { ws: 0, dc: 0 };
  }

  _expire(now) {
    for (const ch of /** @type {const} */ (["ws", "dc"])) {
      for (const [key, times] of this.pending[ch]) {
        while (times.length && now - times[0] > this.windowMs) {
          times.shift();
          this.counts[ch] -= 1;
        }
        if (!times.length) this.pending[ch].delete(key);
      }
    }
  }

  _evictOldest(ch) {
    let oldestKey = null;
    let oldest = Infinity;
    for (const [key, times] of this.pending[ch]) {
      if (times[0] < oldest) {
        oldest = times[0];
        oldestKey = key;
      }
    }
    if (oldestKey === null) return;
    const times = this.pending[ch].get(oldestKey);
    times.shift();
    this.counts[ch] -= 1;
    if (!times.length) this.pending[ch].delete(oldestKey);
  }
}
