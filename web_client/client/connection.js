// connection.js: one connection attempt, from the WebSocket opening to its media: `ready`, the
// session resumed after a reconnect, the heartbeat, then WebRTC (peer.js) or the WebSocket
// fallback. The client makes a new one for each attempt; `close()` ends it. Spec references
// ("spec: ...") name sections of the llmrtc wire protocol v1.

import { VoiceClientError } from "./errors.js";
import { Peer } from "./peer.js";
import { SESSION_CODES } from "./router.js";
import { openSocket, socketUrl, startHeartbeat, whyNotOpened } from "./signaling.js";

/**
 * What a connection needs from its client.
 * @typedef {object} ConnectionHost
 * @property {import("./scope.js").ConnectionScope} scope timers and waiters; the connection
 *   takes a new epoch of it
 * @property {(text: string, channel: "ws" | "dc", epoch: number) => void} onText inbound text
 * @property {(text: string) => void} sendSignal send on the WebSocket, or queue it
 * @property {(stream: MediaStream) => void} onRemoteStream the agent's WebRTC audio arrived
 * @property {(reason: string) => void} onLost the connection died
 */

/**
 * @typedef {object} ConnectionOptions
 * @property {string} url @property {string} [playbook]
 * @property {(url: string) => WebSocket} createWebSocket
 * @property {typeof fetch | null} fetch @property {string | null} pageOrigin
 * @property {((config: RTCConfiguration) => RTCPeerConnection) | null} createPeerConnection
 *   null: no WebRTC
 * @property {number} pingIntervalMs @property {number} deadAfterMs
 * @property {Pick<Console, "warn"> | null} log
 */

export class Connection {
  /** @param {ConnectionHost} host @param {ConnectionOptions} opts */
  constructor(host, opts) {
    this.host = host;
    this.opts = opts;
    this.epoch = host.scope.begin();
    /** @type {WebSocket | null} */
    this.ws = null;
    /** @type {Peer | null} */
    this.peer = null;
    this.resuming = false; // waiting for reconnect-ack: a SESSION_* error is expected
    /** @type {"webrtc" | "websocket" | null} how media goes, once `startMedia()` decided */
    this.mode = null;
    this.lastInbound = 0;
  }

  /** Open the WebSocket and wait for `ready`. @returns {Promise<object>} the ready message */
  async open() {
    const { scope } = this.host;
    const epoch = this.epoch;
    // wait for `ready` from the start: it may arrive in the same task as `open`
    const ready = scope.waitFor(epoch, (m) => m.type === "ready", "ready");
    ready.catch(() => {});
    const url = socketUrl(this.opts.url, this.opts.playbook);
    const { ws, opened } = openSocket(url, this.opts.createWebSocket, {
      onText: (text) => this._inbound(text, "ws"),
      onClosed: (code) => {
        if (!scope.current(epoch)) return;
        scope.fail(epoch, new VoiceClientError("CONNECTION_FAILED",
          `the server closed the connection (${code})`, { recoverable: true }));
        this.host.onLost(`WebSocket closed (${code})`);
      },
      whyNotOpened: () => whyNotOpened(url, {
        fetch: this.opts.fetch, pageOrigin: this.opts.pageOrigin,
        withTimeout: (p, what) => scope.withTimeout(p, what),
      }),
    });
    this.ws = ws;
    await opened;
    this.lastInbound = Date.now();
    return ready;
  }

  /**
   * spec: "Session Reconnection": reconnect{sessionId} right after the new ready. An unknown
   * or expired session may be refused with an error instead of an ack: the connection then
   * simply goes on with the new session.
   * @returns {Promise<object | null>} the reconnect-ack, or null when refused
   */
  async resume(sessionId) {
    this.ws.send(JSON.stringify({ type: "reconnect", sessionId }));
    let ack = null;
    this.resuming = true;
    try {
      ack = await this.host.scope.waitFor(this.epoch, (m) => m.type === "reconnect-ack"
        || (m.type === "error" && SESSION_CODES.has(m.code)), "reconnect-ack");
    } catch (err) {
      if (!this.host.scope.current(this.epoch)) throw err;
    } finally {
      this.resuming = false;
    }
    return ack?.type === "reconnect-ack" ? ack : null;
  }

  startHeartbeat() {
    startHeartbeat(this.host.scope, this.epoch, {
      intervalMs: this.opts.pingIntervalMs, deadAfterMs: this.opts.deadAfterMs,
      lastInbound: () => this.lastInbound,
      ping: (text) => this.send(text),
      lost: (reason) => this.host.onLost(reason),
    });
  }

  /**
   * WebRTC with the data channel, or the WebSocket fallback when it is unavailable.
   * @param {RTCIceServer[]} iceServers
   * @returns {Promise<{mode: "webrtc" | "websocket", reason: string | null}>} `reason`: why
   *   WebRTC was given up (null when it was not tried)
   */
  async startMedia(iceServers) {
    if (!this.opts.createPeerConnection) return this._media("websocket", null);
    const { scope } = this.host;
    try {
      this.peer = new Peer({
        scope,
        sendSignal: this.host.sendSignal,
        onText: (text) => this._inbound(text, "dc"),
        onRemoteStream: this.host.onRemoteStream,
        onLost: this.host.onLost,
      }, { createPeerConnection: this.opts.createPeerConnection, iceServers });
      await this.peer.start();
      return this._media("webrtc", null);
    } catch (err) {
      scope.check(this.epoch);
      this.opts.log?.warn(`llmrtc: WebRTC unavailable (${err?.message ?? err}); using the WebSocket`);
      this.peer?.close();
      this.peer = null;
      return this._media("websocket", `WebRTC could not connect (${err?.message ?? err})`);
    }
  }

  /**
   * Send the microphone: as a WebRTC track (re-offering; a failed re-offer loses the
   * connection), or in the fallback as utterances `mic` records, each handed to `onUtterance`
   * as WAV. Throws when the fallback cannot record here.
   * @param {import("./capture.js").Microphone} mic @param {(wav: Uint8Array) => void} onUtterance
   */
  async attachMic(mic, onUtterance) {
    if (this.mode === "webrtc" && this.peer) {
      try {
        await this.peer.attachMic(mic.stream);
      } catch (err) {
        if (this.host.scope.current(this.epoch)) {
          this.host.onLost(`renegotiation failed: ${err?.message ?? err}`);
        }
      }
    } else if (this.mode === "websocket") {
      await mic.startRecorder(onUtterance);
    }
  }

  /** @returns {boolean} whether `text` went out now (the WebSocket is open) */
  send(text) {
    if (this.ws?.readyState !== 1) return false;
    this.ws.send(text);
    return true;
  }

  close() {
    this.peer?.close();
    this.peer = null;
    try {
      this.ws?.close(1000);
    } catch {
      // closed
    }
    this.ws = null;
  }

  _media(mode, reason) {
    this.mode = mode;
    return { mode, reason };
  }

  _inbound(text, channel) {
    if (!this.host.scope.current(this.epoch)) return;
    this.lastInbound = Date.now();
    this.host.onText(text, channel, this.epoch);
  }
}
