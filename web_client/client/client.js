// client.js: VoiceClient, the one object an embedding page uses: its public API, the
// connection's life (handshake, reconnect with backoff, queued sends) and the payload events.
// One connection attempt is a Connection (connection.js: the WebSocket, then WebRTC in peer.js);
// the microphone is in capture.js.
// Spec references ("spec: ...") name sections of the llmrtc wire protocol v1.

import { Backoff } from "./backoff.js";
import { Microphone } from "./capture.js";
import { base64ToBytes, bytesToBase64 } from "./codecs.js";
import { Connection } from "./connection.js";
import { VoiceClientError, toClientError } from "./errors.js";
import { payloadEffects } from "./events.js";
import { ChunkPlayer, playStream } from "./playback.js";
import { PayloadRouter, SIGNALING_TYPES } from "./router.js";
import { ConnectionScope } from "./scope.js";
import { PROTOCOL_VERSION, Phase, State, StateMachine, nextPhase } from "./state.js";

/**
 * @typedef {object} VoiceClientOptions
 * @property {string} url WebSocket URL of the server, e.g. "ws://127.0.0.1:8787/ws"
 * @property {RTCIceServer[]} [iceServers] overrides the `iceServers` the server sends in `ready`
 * @property {string} [playbook] playbook id, sent as the `playbook` query parameter
 * @property {boolean} [turnMetrics] ask the server for `turn-metrics` after each turn (its
 *   own measurements: STT, first token, first audio; a voice_server extension)
 * @property {boolean} [webrtc] false forces the WebSocket-only fallback (default: auto)
 * @property {MediaTrackConstraints} [audioConstraints] getUserMedia audio constraints
 * @property {HTMLAudioElement} [audioElement] where the agent's WebRTC audio plays
 * @property {number} [pingIntervalMs] heartbeat period (default 15000, spec: "ping")
 * @property {number} [deadAfterMs] reconnect when nothing arrived for this long (default 40000)
 * @property {number} [timeoutMs] wait for `ready`, answers and the data channel (default 10000)
 * @property {{baseMs?: number, maxMs?: number, maxRetries?: number, jitter?: number,
 *   random?: () => number}} [reconnect] backoff policy
 * @property {number} [maxQueued] sends kept while reconnecting (default 100)
 * @property {(url: string) => WebSocket} [createWebSocket] injectable for tests
 * @property {typeof fetch} [fetch] injectable for tests (tells "refused" from "unreachable")
 * @property {((config: RTCConfiguration) => RTCPeerConnection) | null} [createPeerConnection]
 *   injectable; null means WebRTC is unavailable
 * @property {(c: MediaStreamConstraints) => Promise<MediaStream>} [getUserMedia] injectable
 * @property {() => AudioContext} [createAudioContext] injectable
 * @property {Pick<Console, "warn" | "info"> | null} [logger] default: console.warn only
 */

/**
 * The voice client. Events (all `CustomEvent`, payload in `detail`): `state` {state, previous},
 * `phase` {phase, previous} (a `Phase`: connecting, listening, user-speaking, thinking,
 * agent-speaking, reconnecting, error, idle), `ready` {sessionId, protocolVersion},
 * `reconnected` {sessionId, historyRecovered},
 * `transport` {mode: "webrtc" | "websocket", reason}, `remote-track` {stream}, `mic` {active},
 * `error` {code, message, recoverable, error}, `message` (every payload), and one event per
 * payload type with the message as detail: `speech-start`, `speech-end`, `transcript`,
 * `llm-chunk`, `llm`, `tts-start`, `tts-chunk`, `tts`, `tts-complete`, `tts-cancelled`,
 * `tool-call-start`, `tool-call-end`, `stage-change`, `assistant-transcript`, `usage`,
 * `mode-changed`, `metrics` / `turn-metrics`.
 */
export class VoiceClient extends EventTarget {
  /** @param {VoiceClientOptions} options */
  constructor(options) {
    super();
    if (!options || !options.url) throw new TypeError("VoiceClient needs options.url");
    this.options = options;
    const g = globalThis;
    this._createWebSocket = options.createWebSocket ?? ((url) => new g.WebSocket(url));
    this._fetch = options.fetch ?? (g.fetch ? (...a) => g.fetch(...a) : null);
    this._pageOrigin = options.pageOrigin ?? g.location?.origin ?? null;
    this._createPeerConnection = options.createPeerConnection !== undefined
      ? options.createPeerConnection
      : typeof g.RTCPeerConnection === "function" ? (cfg) => new g.RTCPeerConnection(cfg) : null;
    this._getUserMedia = options.getUserMedia
      ?? (g.navigator?.mediaDevices?.getUserMedia
        ? (c) => g.navigator.mediaDevices.getUserMedia(c) : null);
    this._createAudioContext = options.createAudioContext
      ?? (() => new (g.AudioContext || g.webkitAudioContext)());
    this._log = options.logger === undefined ? { warn: (...a) => console.warn(...a), info() {} }
      : options.logger;
    this.pingIntervalMs = options.pingIntervalMs ?? 15000;
    this.deadAfterMs = options.deadAfterMs ?? 40000;
    this.timeoutMs = options.timeoutMs ?? 10000;
    this.maxQueued = options.maxQueued ?? 100;

    this.machine = new StateMachine();
    /** What the conversation is doing now (a `Phase`); each change is a `phase` event. */
    this.phase = Phase.IDLE;
    this._closing = false; // close() was called: CLOSED is not a failure
    this.backoff = new Backoff(options.reconnect);
    this.router = new PayloadRouter();
    this.player = new ChunkPlayer(() => this._audioContext());
    /** @type {string | null} */
    this.sessionId = null;
    /** @type {"webrtc" | "websocket" | null} */
    this.transport = null;
    /** @type {RTCIceServer[] | null} */
    this.serverIceServers = null;
    this.protocolVersion = null;
    /** @type {string[]} */
    this._queue = [];
    this._scope = new ConnectionScope({ timeoutMs: this.timeoutMs });
    /** @type {Connection | null} the current connection attempt */
    this._conn = null;
    /** @type {import("./connection.js").ConnectionHost} */
    this._host = {
      scope: this._scope,
      onText: (text, channel, epoch) => this._onText(text, channel, epoch),
      sendSignal: (text) => this._wsSend(text),
      onRemoteStream: (stream) => {
        this._playRemote(stream);
        this._emit("remote-track", { stream });
      },
      onLost: (reason) => this._lost(reason),
    };
    /** @type {Microphone | null} */
    this._mic = null;
    this._ctx = null;
    this._audioEl = null;
    this._connectPromise = null;
    this._micStarting = null;
  }

  /** @returns {string} the current State */
  get state() {
    return this.machine.state;
  }

  /** @returns {boolean} whether the data channel is open */
  get dataChannelOpen() {
    return Boolean(this._conn?.peer?.dataChannelOpen);
  }

  /** @returns {MediaStream | null} */
  get micStream() {
    return this._mic?.stream ?? null;
  }

  /** @returns {MediaStream | null} the agent's audio stream (WebRTC) */
  get remoteStream() {
    return this._conn?.peer?.remoteStream ?? null;
  }

  /** @returns {RTCPeerConnection | null} for stats */
  get peerConnection() {
    return this._conn?.peer?.pc ?? null;
  }

  /** @returns {number} the microphone level, 0..1 (0 when the mic is off) */
  get micLevel() {
    return this._mic?.level ?? 0;
  }

  /**
   * Connect and wait for `ready` (then WebRTC, or the WebSocket fallback). Rejects with
   * VoiceClientError(CONNECTION_FAILED) when the server cannot be reached.
   * @returns {Promise<void>}
   */
  connect() {
    if (this._connectPromise) return this._connectPromise;
    if (this.state === State.CONNECTED || this.state === State.RECONNECTING) {
      return Promise.resolve();
    }
    this._setState(State.CONNECTING);
    this.backoff.reset();
    this._connectPromise = this._open(null).then(
      () => {
        this._connectPromise = null;
        return this._connected();
      },
      (err) => {
        this._connectPromise = null;
        const error = toClientError(err, "CONNECTION_FAILED");
        if (this.state !== State.CLOSED) {
          this._teardown();
          this._setState(State.CLOSED);
          this._emitError(error);
        }
        throw error;
      },
    );
    return this._connectPromise;
  }

  /**
   * Start the microphone and send it to the server: as a WebRTC track (re-offering), or in the
   * fallback as one `audio` message (base64 WAV) per utterance. Rejects with MIC_DENIED or
   * MIC_UNAVAILABLE.
   */
  startMic() {
    if (this._mic) return Promise.resolve();
    // a second call while the permission prompt is open shares the first one
    this._micStarting ??= this._startMic().finally(() => { this._micStarting = null; });
    return this._micStarting;
  }

  async _startMic() {
    try {
      this._mic = await Microphone.open(this._getUserMedia, this.options.audioConstraints,
        () => this._audioContext(), this._log);
    } catch (err) {
      throw this._emitError(toClientError(err, "MIC_UNAVAILABLE"));
    }
    this._emit("mic", { active: true });
    if (this.state === State.CONNECTED) await this._attachMic();
  }

  /** Stop the microphone (an utterance in progress in the fallback is sent). */
  stopMic() {
    if (!this._mic) return;
    this._conn?.peer?.detachMic();
    this._mic.close();
    this._mic = null;
    this._emit("mic", { active: false });
  }

  /**
   * Send vision attachments for the next utterance (spec: "attachments"); data channel first.
   * @param {{data: string, mimeType?: string, alt?: string}[]} attachments
   */
  sendAttachments(attachments) {
    if (!Array.isArray(attachments) || !attachments.every((a) => a && typeof a.data === "string")) {
      throw new TypeError("attachments must be a list of {data, mimeType?, alt?}");
    }
    this.send({ type: "attachments", attachments }, { preferDataChannel: true });
  }

  /**
   * Send a typed user turn (extension message `user-text`, docs/protocol.md): the server
   * answers it like a spoken one, in text and speech, and echoes it as the final `transcript`.
   * @param {string} text at most 4000 characters
   */
  sendText(text) {
    if (typeof text !== "string" || !text.trim()) {
      throw new TypeError("text must be a non-empty string");
    }
    if (text.length > 4000) throw new TypeError("text is limited to 4000 characters");
    this.send({ type: "user-text", text });
  }

  /**
   * Send one recorded utterance (spec: "audio", the fallback path).
   * @param {Uint8Array | string} wav WAV bytes or their base64
   */
  sendAudio(wav, attachments) {
    const data = typeof wav === "string" ? wav : bytesToBase64(wav);
    this.send(attachments ? { type: "audio", data, attachments } : { type: "audio", data });
  }

  /**
   * Send a message: now if connected, queued while connecting or reconnecting.
   * @param {object} msg @param {{preferDataChannel?: boolean}} [opts]
   */
  send(msg, opts = {}) {
    if (this.state === State.CLOSED || this.state === State.IDLE) {
      throw new VoiceClientError("CLOSED", "the client is not connected");
    }
    const text = JSON.stringify(msg);
    if (this.state !== State.CONNECTED) {
      this._enqueue(text);
      return;
    }
    if (opts.preferDataChannel && this.dataChannelOpen) this._conn.peer.send(text);
    else this._wsSend(text);
  }

  /** Close everything; idempotent. */
  close() {
    if (this.state === State.CLOSED) return;
    this._teardown();
    this.stopMic();
    this.player.stop();
    this._queue = [];
    this._closing = true;
    this._setState(State.CLOSED);
    this._closing = false;
    try {
      this._ctx?.close();
    } catch {
      // already closed
    }
    this._ctx = null;
  }

  // --- connection --------------------------------------------------------------------------

  /** One connection attempt: WebSocket, `ready`, optional `reconnect`, then media. */
  async _open(resumeSessionId) {
    this.router.reset();
    const conn = new Connection(this._host, {
      url: this.options.url, playbook: this.options.playbook,
      createWebSocket: this._createWebSocket, fetch: this._fetch, pageOrigin: this._pageOrigin,
      createPeerConnection: this.options.webrtc === false ? null : this._createPeerConnection,
      pingIntervalMs: this.pingIntervalMs, deadAfterMs: this.deadAfterMs, log: this._log,
    });
    this._conn = conn;
    const ready = await conn.open();
    this.serverIceServers = Array.isArray(ready.iceServers) ? ready.iceServers : null;
    this.protocolVersion = ready.protocolVersion ?? null;
    if (ready.protocolVersion !== PROTOCOL_VERSION) {
      this._log?.warn(`llmrtc: server speaks protocol ${ready.protocolVersion}, client ${
        PROTOCOL_VERSION}`);
    }
    this.sessionId = ready.id;
    this._emit("ready", { sessionId: ready.id, protocolVersion: ready.protocolVersion });
    if (resumeSessionId) {
      const ack = await conn.resume(resumeSessionId);
      if (ack?.success && ack.sessionId) this.sessionId = ack.sessionId;
      this._emit("reconnected", {
        sessionId: this.sessionId, historyRecovered: Boolean(ack?.success && ack.historyRecovered),
      });
    }
    conn.startHeartbeat();
    const { mode, reason } = await conn.startMedia(
      this.options.iceServers ?? this.serverIceServers ?? []);
    this._scope.check(conn.epoch);
    this._setTransport(mode, reason);
  }

  /** Inbound text from either channel. */
  _onText(text, channel, epoch) {
    let msg;
    try {
      msg = JSON.parse(text);
    } catch {
      this._log?.warn("llmrtc: ignoring a non-JSON message");
      return;
    }
    if (!msg || typeof msg.type !== "string") return;
    this._scope.deliver(msg, epoch);
    if (SIGNALING_TYPES.has(msg.type)) {
      if (channel === "ws" && msg.type === "reconnect-ack" && msg.success && msg.sessionId) {
        this.sessionId = msg.sessionId;
      }
      return;
    }
    if (!this.router.accept(channel, text, msg)) return;
    this._dispatchPayload(msg);
  }

  /** Route one payload message to its event (spec: "Server → Client Messages"). */
  _dispatchPayload(msg) {
    this._emit("message", msg);
    this._setPhase(nextPhase(this.phase, { message: msg }));
    const effects = payloadEffects(msg, {
      resuming: Boolean(this._conn?.resuming), remoteAudio: this._hasRemoteAudio() });
    if (effects.error) this._emitError(effects.error);
    if (effects.stop) this.player.stop();
    if (effects.play) {
      try {
        this.player.enqueue(base64ToBytes(msg.data), msg.format ?? "pcm", msg.sampleRate);
      } catch (err) {
        this._log?.warn("llmrtc: cannot play TTS audio", err);
      }
    }
    if (effects.event) this._emit(effects.event, msg);
  }

  _hasRemoteAudio() {
    return Boolean(this.remoteStream?.getAudioTracks?.().some((t) => t.readyState === "live"));
  }

  /** The connection died: schedule a reconnect (or give up). */
  _lost(reason) {
    if (this.state !== State.CONNECTED && this.state !== State.RECONNECTING) return;
    this._log?.info?.(`llmrtc: connection lost: ${reason}`);
    const resume = this.sessionId;
    this._teardown();
    if (this.state === State.CONNECTED) this._setState(State.RECONNECTING);
    const delay = this.backoff.next();
    if (delay === null) {
      this._setState(State.CLOSED);
      this._emitError(new VoiceClientError("RECONNECT_FAILED",
        "the connection was lost and reconnecting failed"));
      return;
    }
    const epoch = this._scope.epoch;
    this._scope.later(async () => {
      if (!this._scope.current(epoch) || this.state !== State.RECONNECTING) return;
      const attempt = this._open(resume);
      const attemptEpoch = this._scope.epoch; // _open() took a new epoch synchronously
      try {
        await attempt;
        this.backoff.reset();
        await this._connected();
      } catch (err) {
        if (this.state !== State.RECONNECTING || !this._scope.current(attemptEpoch)) return;
        this._log?.info?.("llmrtc: reconnect attempt failed", err);
        this._lost("reconnect attempt failed");
      }
    }, delay);
  }

  /** Connected (first time or again): flush the queue, then re-attach the mic. */
  async _connected() {
    this._setState(State.CONNECTED);
    if (this.options.turnMetrics) this.send({ type: "turn-metrics-subscribe" });
    const queued = this._queue;
    this._queue = [];
    for (const text of queued) this._wsSend(text);
    if (this._mic) await this._attachMic();
  }

  _wsSend(text) {
    if (!this._conn?.send(text)) this._enqueue(text);
  }

  _enqueue(text) {
    if (this._queue.length >= this.maxQueued) this._queue.shift();
    this._queue.push(text);
  }

  // --- media -------------------------------------------------------------------------------

  _playRemote(stream) {
    const el = this.options.audioElement
      ?? (this._audioEl ??= typeof Audio === "function" ? new Audio() : null);
    if (el) playStream(el, stream, this._log);
  }

  /** Send the mic to the server: a WebRTC track or, in the fallback, recorded utterances. */
  async _attachMic() {
    if (!this._mic || !this._conn) return;
    try {
      await this._conn.attachMic(this._mic, (wav) => {
        if (this.state === State.CONNECTED || this.state === State.RECONNECTING) this.sendAudio(wav);
      });
    } catch (err) {
      this._emitError(new VoiceClientError("MIC_UNAVAILABLE",
        `cannot record the microphone here: ${err?.message ?? err}`));
    }
  }

  _audioContext() {
    if (!this._ctx) this._ctx = this._createAudioContext();
    return this._ctx;
  }

  /** `reason`: why WebRTC was given up for the WebSocket (null when it was not tried). */
  _setTransport(mode, reason = null) {
    this.transport = mode;
    this._emit("transport", { mode, reason });
  }

  // --- plumbing ----------------------------------------------------------------------------

  /** Close sockets and timers of the current connection, keeping the mic and the queue. */
  _teardown() {
    this._scope.end();
    this._mic?.stopRecorder(false);
    this._conn?.close();
    this._conn = null;
    this.transport = null;
  }

  _setState(to) {
    if (this.state === to) return;
    const previous = this.machine.transition(to);
    this._emit("state", { state: to, previous });
    this._setPhase(nextPhase(this.phase,
      { state: to, failed: to === State.CLOSED && !this._closing }));
  }

  /** Emit `phase` when what the conversation is doing changes (see `Phase`). */
  _setPhase(to) {
    if (to === this.phase) return;
    const previous = this.phase;
    this.phase = to;
    this._emit("phase", { phase: to, previous });
  }

  _emitError(error) {
    this._emit("error", {
      code: error.code, message: error.message, recoverable: error.recoverable, error,
    });
    return error;
  }

  _emit(type, detail) {
    this.dispatchEvent(new CustomEvent(type, { detail }));
  }
}
