// signaling.js: the WebSocket side of one connection: opening it (and telling why it did not
// open), and the heartbeat. Spec references ("spec: ...") name llmrtc v1 sections.

import { VoiceClientError } from "./errors.js";

/** @param {string} url @param {string} [playbook] @returns {string} the URL to open */
export function socketUrl(url, playbook) {
  if (!playbook) return url;
  return url + (url.includes("?") ? "&" : "?") + "playbook=" + encodeURIComponent(playbook);
}

/**
 * @typedef {object} SocketHandlers
 * @property {(text: string) => void} onText a message arrived
 * @property {(code: number | string) => void} onClosed closed after it had opened
 * @property {() => Promise<VoiceClientError>} whyNotOpened the error when it never opened
 */

/**
 * Open a WebSocket. `ws` is there at once (so a teardown can close it while it opens);
 * `opened` resolves when it opens, or rejects with `whyNotOpened()`'s error.
 * @param {string} url @param {(url: string) => WebSocket} createWebSocket
 * @param {SocketHandlers} handlers
 * @returns {{ws: WebSocket | null, opened: Promise<WebSocket>}}
 */
export function openSocket(url, createWebSocket, handlers) {
  let ws;
  try {
    ws = createWebSocket(url);
  } catch (err) {
    return { ws: null, opened: Promise.reject(new VoiceClientError("CONNECTION_FAILED",
      `cannot open ${url}: ${err?.message}`)) };
  }
  const opened = new Promise((resolve, reject) => {
    let open = false;
    let failed = false;
    const notOpened = () => {
      if (failed) return;
      failed = true;
      handlers.whyNotOpened().then(reject);
    };
    ws.addEventListener("open", () => {
      open = true;
      resolve(ws);
    });
    ws.addEventListener("message", (ev) => handlers.onText(String(ev.data)));
    ws.addEventListener("close", (ev) => {
      if (!open) notOpened();
      else handlers.onClosed(ev?.code ?? "?");
    });
    ws.addEventListener("error", () => {
      if (!open) notOpened();
    });
  });
  return { ws, opened };
}

/**
 * A WebSocket that never opened: was the server down, or did it refuse this page? A browser
 * tells a script neither, so ask the server's /health: answered to a CORS request, the
 * server is up and this origin allowed (refused for another reason: full, shutting down, a
 * token needed); answered only without CORS, the server is up and this origin is not in its
 * allowed_origins; not answered, the server is unreachable.
 * @param {string} url the WebSocket URL
 * @param {{fetch: typeof fetch | null, pageOrigin: string | null,
 *   withTimeout: (p: Promise<unknown>, what: string) => Promise<unknown>}} env
 * @returns {Promise<VoiceClientError>}
 */
export async function whyNotOpened(url, env) {
  const unreachable = new VoiceClientError("CONNECTION_FAILED",
    `the voice server at ${url} is unreachable`, { recoverable: true });
  let health;
  try {
    const u = new URL(url);
    u.protocol = u.protocol === "wss:" ? "https:" : "http:";
    u.pathname = "/health";
    u.search = "";
    health = u.toString();
  } catch {
    return unreachable;
  }
  if (!env.fetch) return unreachable;
  const probe = (mode) => env.withTimeout(
    env.fetch(health, { mode, cache: "no-store", credentials: "omit" }), "server check");
  try {
    await probe("cors");
    return new VoiceClientError("REFUSED", `the voice server at ${url} is running but ` +
      "refused the connection (it may be full, shutting down, or need a token)",
    { recoverable: true });
  } catch { /* not answered with CORS: look without */ }
  try {
    await probe("no-cors");
  } catch {
    return unreachable;
  }
  const origin = env.pageOrigin ?? "this page's origin";
  return new VoiceClientError("ORIGIN_REFUSED", `the voice server at ${url} does not allow ` +
    `pages from ${origin}: add it to its allowed_origins (--allowed-origins or ` +
    "VOICE_SERVER_ALLOWED_ORIGINS)", { recoverable: false });
}

/**
 * Ping every `intervalMs` (spec: "ping"); call `lost` once nothing arrived for `deadAfterMs`.
 * Runs on `scope`'s timers, so it stops with its epoch.
 * @param {import("./scope.js").ConnectionScope} scope @param {number} epoch
 * @param {{intervalMs: number, deadAfterMs: number, lastInbound: () => number,
 *   ping: (text: string) => void, lost: (reason: string) => void}} opts
 */
export function startHeartbeat(scope, epoch, opts) {
  const beat = () => {
    if (!scope.current(epoch)) return;
    if (Date.now() - opts.lastInbound() > opts.deadAfterMs) {
      opts.lost("no message from the server");
      return;
    }
    opts.ping(JSON.stringify({ type: "ping", timestamp: Date.now() }));
    scope.later(beat, opts.intervalMs);
  };
  scope.later(beat, opts.intervalMs);
}
