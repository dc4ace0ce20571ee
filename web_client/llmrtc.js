// llmrtc.js: embeddable browser client for voice_server (llmrtc wire protocol v1).
// One ES module, no build step, no dependencies. Served by the server at GET /client/llmrtc.js.
//
//   import { VoiceClient } from "/client/llmrtc.js";
//   const c = new VoiceClient({ url: "ws://127.0.0.1:8787/ws" });
//   c.addEventListener("transcript", (e) => console.log(e.detail.text));
//   await c.connect();
//   await c.startMic();
//
// Spec references below ("spec: ...") name sections of the llmrtc wire protocol v1.
// The pure parts (state machine, backoff, payload routing/dedupe, WAV encoding, endpointing) are
// exported and unit-tested in Node; the browser APIs are injectable (see VoiceClientOptions).

/** Version of the wire protocol this client speaks (spec: "Protocol Version"). */
export const PROTOCOL_VERSION = 1;

/**
 * Connection states (spec: "Connection Lifecycle").
 * @readonly
 * @enum {string}
 */
export const State = Object.freeze({
  IDLE: "idle",
  CONNECTING: "connecting",
  CONNECTED: "connected",
  RECONNECTING: "reconnecting",
  CLOSED: "closed",
});

/**
 * What the conversation is doing, for a status indicator: the connection state folded
 * together with the turn (who is talking, or the agent thinking).
 * @readonly
 * @enum {string}
 */
export const Phase = Object.freeze({
  IDLE: "idle",
  CONNECTING: "connecting",
  LISTENING: "listening",
  USER_SPEAKING: "user-speaking",
  THINKING: "thinking",
  AGENT_SPEAKING: "agent-speaking",
  RECONNECTING: "reconnecting",
  ERROR: "error",
});

/**
 * The next phase after a connection `state` change (`{state}`) or a payload message
 * (`{message}`); pure, so it is tested without a browser.
 * @param {string} phase @param {{state?: string, failed?: boolean, message?: object}} event
 * @returns {string}
 */
export function nextPhase(phase, event) {
  if (event.state) {
    switch (event.state) {
      case State.CONNECTING: return Phase.CONNECTING;
      case State.CONNECTED: return Phase.LISTENING;
      case State.RECONNECTING: return Phase.RECONNECTING;
      case State.CLOSED: return event.failed ? Phase.ERROR : Phase.IDLE;
      default: return Phase.IDLE;
    }
  }
  const msg = event.message ?? {};
  switch (msg.type) {
    case "speech-start": return Phase.USER_SPEAKING;
    case "speech-end": return phase === Phase.USER_SPEAKING ? Phase.THINKING : phase;
    case "transcript":
      if (msg.isFinal === false) return phase;
      // a final transcript starts the answer (typed input and the WebSocket path have no
      // speech events); an empty one is not answered
      if (!String(msg.text ?? "").trim()) {
        return phase === Phase.AGENT_SPEAKING ? phase : Phase.LISTENING;
      }
      return phase === Phase.AGENT_SPEAKING ? phase : Phase.THINKING;
    case "tts-start": return Phase.AGENT_SPEAKING;
    case "tts-complete": return Phase.LISTENING;
    case "tts-cancelled": return phase === Phase.USER_SPEAKING ? phase : Phase.LISTENING;
    case "error": return phase === Phase.THINKING ? Phase.LISTENING : phase;
    default: return phase;
  }
}

/** @type {Record<string, string[]>} allowed transitions; anything may go to CLOSED. */
const TRANSITIONS = {
  idle: ["connecting", "closed"],
  connecting: ["connected", "reconnecting", "closed"],
  connected: ["reconnecting", "closed"],
  reconnecting: ["connected", "closed"],
  closed: ["connecting"],
};

/** Messages handled by the client itself (WebSocket only); everything else is payload. */
const SIGNALING_TYPES = new Set(["ready", "pong", "signal", "reconnect-ack"]);

/** Error codes that refuse a `reconnect` (spec: "Error Codes"). */
const SESSION_CODES = new Set(["SESSION_NOT_FOUND", "SESSION_EXPIRED"]);

/** Payload message types re-dispatched as events of the same name (spec: "Server → Client"). */
const EVENT_TYPES = new Set([
  "speech-start", "speech-end", "transcript", "llm-chunk", "llm", "tts-start", "tts-chunk",
  "tts", "tts-complete", "tts-cancelled", "tool-call-start", "tool-call-end", "stage-change",
  "assistant-transcript", "usage", "mode-changed", "metrics", "turn-metrics",
]);

/** An error with the server's (or this client's) error code, e.g. `SESSION_NOT_FOUND`. */
export class VoiceClientError extends Error {
  /**
   * @param {string} code spec error code, or a client code (CONNECTION_FAILED, MIC_DENIED,
   *   MIC_UNAVAILABLE, RECONNECT_FAILED, CLOSED, TIMEOUT, ORIGIN_REFUSED: the server runs but
 *   does not allow this page's origin, REFUSED: it runs and refused for another reason)
   * @param {string} message human-readable text
   * @param {{recoverable?: boolean}} [opts]
   */
  constructor(code, message, opts = {}) {
    super(message);
    this.name = "VoiceClientError";
    this.code = code;
    this.recoverable = opts.recoverable ?? false;
  }
}

/**
 * Guarded state machine: `transition()` throws on an illegal move, `history` keeps every state.
 */
export class StateMachine {
  constructor() {
    /** @type {string} */
    this.state = State.IDLE;
    /** @type {string[]} */
    this.history = [State.IDLE];
  }

  /** @param {string} to @returns {boolean} */
  can(to) {
    return to === State.CLOSED ? this.state !== State.CLOSED : TRANSITIONS[this.state].includes(to);
  }

  /** @param {string} to @returns {string} the previous state */
  transition(to) {
    if (!this.can(to)) throw new Error(`illegal state transition ${this.state} -> ${to}`);
    const from = this.state;
    this.state = to;
    this.history.push(to);
    return from;
  }
}

/**
 * Exponential backoff with jitter: delay n (from 0) is min(max, base * factor^n) plus up to
 * `jitter` of it at random. `next()` returns null once `maxRetries` delays were handed out.
 */
export class Backoff {
  /**
   * @param {{baseMs?: number, maxMs?: number, factor?: number, jitter?: number,
   *   maxRetries?: number, random?: () => number}} [opts]
   */
  constructor(opts = {}) {
    this.baseMs = opts.baseMs ?? 500;
    this.maxMs = opts.maxMs ?? 15000;
    this.factor = opts.factor ?? 2;
    this.jitter = opts.jitter ?? 0.3;
    this.maxRetries = opts.maxRetries ?? 10;
    this.random = opts.random ?? Math.random;
    this.attempt = 0;
  }

  /** @returns {number | null} the next delay in ms, or null when retries are exhausted */
  next() {
    if (this.attempt >= this.maxRetries) return null;
    const raw = Math.min(this.maxMs, this.baseMs * this.factor ** this.attempt);
    this.attempt += 1;
    return Math.round(raw + raw * this.jitter * this.random());
  }

  reset() {
    this.attempt = 0;
  }
}

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

/**
 * Resample mono float samples to a lower rate with a windowed-sinc low-pass (Blackman window,
 * cutoff just below the new Nyquist frequency), so speech keeps its clarity without aliasing.
 * @param {Float32Array} input @param {number} fromRate @param {number} toRate
 * @returns {Float32Array}
 */
export function downsample(input, fromRate, toRate) {
  if (toRate >= fromRate) return input;
  const ratio = fromRate / toRate;
  const cutoff = 0.45 / ratio; // cycles per input sample
  const half = Math.ceil(8 * ratio); // filter half-width, input samples
  const out = new Float32Array(Math.floor(input.length / ratio));
  for (let i = 0; i < out.length; i++) {
    const center = i * ratio;
    const start = Math.max(0, Math.ceil(center - half));
    const end = Math.min(input.length - 1, Math.floor(center + half));
    let acc = 0;
    let norm = 0;
    for (let j = start; j <= end; j++) {
      const x = j - center;
      const sinc = x === 0 ? 2 * cutoff : Math.sin(2 * Math.PI * cutoff * x) / (Math.PI * x);
      const w = 0.42 + 0.5 * Math.cos((Math.PI * x) / half) + 0.08 * Math.cos((2 * Math.PI * x) / half);
      acc += input[j] * sinc * w;
      norm += sinc * w;
    }
    out[i] = norm ? acc / norm : 0;
  }
  return out;
}

/**
 * Encode mono float samples in [-1, 1] as a 16-bit PCM WAV file.
 * @param {Float32Array} samples @param {number} sampleRate @returns {Uint8Array}
 */
export function encodeWav(samples, sampleRate) {
  const bytes = new Uint8Array(44 + samples.length * 2);
  const view = new DataView(bytes.buffer);
  const ascii = (offset, s) => {
    for (let i = 0; i < s.length; i++) bytes[offset + i] = s.charCodeAt(i);
  };
  ascii(0, "RIFF");
  view.setUint32(4, 36 + samples.length * 2, true);
  ascii(8, "WAVE");
  ascii(12, "fmt ");
  view.setUint32(16, 16, true); // fmt chunk size
  view.setUint16(20, 1, true); // PCM
  view.setUint16(22, 1, true); // mono
  view.setUint32(24, sampleRate, true);
  view.setUint32(28, sampleRate * 2, true); // byte rate
  view.setUint16(32, 2, true); // block align
  view.setUint16(34, 16, true); // bits per sample
  ascii(36, "data");
  view.setUint32(40, samples.length * 2, true);
  for (let i = 0; i < samples.length; i++) {
    const s = Math.max(-1, Math.min(1, samples[i]));
    view.setInt16(44 + i * 2, s < 0 ? Math.round(s * 0x8000) : Math.round(s * 0x7fff), true);
  }
  return bytes;
}

/** @param {Uint8Array} bytes @returns {string} base64 */
export function bytesToBase64(bytes) {
  let binary = "";
  for (let i = 0; i < bytes.length; i += 0x8000) {
    binary += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  }
  return btoa(binary);
}

/** @param {string} b64 @returns {Uint8Array} */
export function base64ToBytes(b64) {
  const binary = atob(b64);
  const out = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i++) out[i] = binary.charCodeAt(i);
  return out;
}

/** @param {Float32Array} frame @returns {number} root mean square */
export function rms(frame) {
  let sum = 0;
  for (let i = 0; i < frame.length; i++) sum += frame[i] * frame[i];
  return Math.sqrt(sum / Math.max(1, frame.length));
}

/**
 * Energy endpointer for the WebSocket fallback: cuts the mic into utterances. An utterance
 * starts at the first frame louder than `threshold` (with `preRollMs` of audio before it) and
 * ends after `silenceMs` of quiet frames or at `maxMs`. `push()` returns a finished utterance.
 */
export class Endpointer {
  /**
   * @param {{sampleRate: number, threshold?: number, silenceMs?: number, preRollMs?: number,
   *   maxMs?: number, minSpeechMs?: number}} opts
   */
  constructor(opts) {
    this.sampleRate = opts.sampleRate;
    this.threshold = opts.threshold ?? 0.015;
    this.silenceMs = opts.silenceMs ?? 700;
    this.preRollMs = opts.preRollMs ?? 300;
    this.maxMs = opts.maxMs ?? 15000;
    this.minSpeechMs = opts.minSpeechMs ?? 150;
    this._reset();
    /** @type {Float32Array[]} */
    this.preRoll = [];
  }

  _reset() {
    this.frames = /** @type {Float32Array[]} */ ([]);
    this.active = false;
    this.totalMs = 0;
    this.speechMs = 0;
    this.quietMs = 0;
  }

  /** @param {Float32Array} frame @returns {Float32Array | null} a finished utterance */
  push(frame) {
    const ms = (frame.length / this.sampleRate) * 1000;
    const loud = rms(frame) >= this.threshold;
    if (!this.active) {
      if (!loud) {
        this.preRoll.push(frame);
        let keep = this.preRoll.reduce((n, f) => n + f.length, 0);
        const limit = (this.preRollMs / 1000) * this.sampleRate;
        while (this.preRoll.length && keep > limit) keep -= this.preRoll.shift().length;
        return null;
      }
      this.active = true;
      this.frames = [...this.preRoll, frame];
      this.preRoll = [];
      this.totalMs = 0;
      for (const f of this.frames) this.totalMs += (f.length / this.sampleRate) * 1000;
      this.speechMs = ms;
      this.quietMs = 0;
      return null;
    }
    this.frames.push(frame);
    this.totalMs += ms;
    if (loud) {
      this.speechMs += ms;
      this.quietMs = 0;
    } else {
      this.quietMs += ms;
    }
    if (this.quietMs >= this.silenceMs || this.totalMs >= this.maxMs) return this.flush();
    return null;
  }

  /** End the current utterance now. @returns {Float32Array | null} */
  flush() {
    const enough = this.active && this.speechMs >= this.minSpeechMs;
    const frames = this.frames;
    this._reset();
    if (!enough) return null;
    const total = frames.reduce((n, f) => n + f.length, 0);
    const out = new Float32Array(total);
    let at = 0;
    for (const f of frames) {
      out.set(f, at);
      at += f.length;
    }
    return out;
  }
}

/**
 * Plays `tts-chunk` / `tts` audio with Web Audio when no WebRTC audio track carries the agent's
 * voice (spec: "tts-chunk"). PCM is 16-bit little-endian mono; other formats go through
 * `decodeAudioData`. `stop()` silences everything scheduled (barge-in).
 */
export class ChunkPlayer {
  /** @param {() => AudioContext} getContext */
  constructor(getContext) {
    this.getContext = getContext;
    this.nextTime = 0;
    /** @type {Set<AudioBufferSourceNode>} */
    this.sources = new Set();
    this.chain = Promise.resolve();
    this.generation = 0;
  }

  /** @param {Uint8Array} bytes @param {string} format @param {number} [sampleRate] */
  enqueue(bytes, format, sampleRate) {
    const gen = this.generation;
    this.chain = this.chain.then(async () => {
      const ctx = this.getContext();
      let buffer;
      if (/^(pcm|s16|l16|raw)/i.test(format || "pcm")) {
        const count = Math.floor(bytes.byteLength / 2);
        const view = new DataView(bytes.buffer, bytes.byteOffset, count * 2);
        buffer = ctx.createBuffer(1, Math.max(1, count), sampleRate || 24000);
        const data = buffer.getChannelData(0);
        for (let i = 0; i < count; i++) data[i] = view.getInt16(i * 2, true) / 0x8000;
      } else {
        buffer = await ctx.decodeAudioData(bytes.slice().buffer);
      }
      if (gen !== this.generation) return;
      const src = ctx.createBufferSource();
      src.buffer = buffer;
      src.connect(ctx.destination);
      const at = Math.max(ctx.currentTime + 0.02, this.nextTime);
      src.start(at);
      this.nextTime = at + buffer.duration;
      this.sources.add(src);
      src.onended = () => this.sources.delete(src);
    }).catch(() => {});
  }

  stop() {
    this.generation += 1;
    for (const src of this.sources) {
      try {
        src.stop();
      } catch {
        // already stopped
      }
    }
    this.sources.clear();
    this.nextTime = 0;
  }
}

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
 * agent-speaking, reconnecting, error, idle), `ready` {sessionId, protocolVersion}, `reconnected` {sessionId, historyRecovered},
 * `transport` {mode: "webrtc" | "websocket"}, `remote-track` {stream}, `mic` {active},
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
    this._epoch = 0;
    this._ws = null;
    this._pc = null;
    this._dc = null;
    this._micStream = null;
    this._micSender = null;
    this._remoteStream = null;
    this._ctx = null;
    this._analyser = null;
    this._recorder = null;
    this._timers = new Set();
    this._waiters = new Set();
    this._lastInbound = 0;
    this._connectPromise = null;
    this._negotiation = Promise.resolve();
    this._resuming = false;
    this._micStarting = null;
  }

  /** @returns {string} the current State */
  get state() {
    return this.machine.state;
  }

  /** @returns {boolean} whether the data channel is open */
  get dataChannelOpen() {
    return this._dc?.readyState === "open";
  }

  /** @returns {MediaStream | null} */
  get micStream() {
    return this._micStream;
  }

  /** @returns {MediaStream | null} the agent's audio stream (WebRTC) */
  get remoteStream() {
    return this._remoteStream;
  }

  /** @returns {RTCPeerConnection | null} for stats */
  get peerConnection() {
    return this._pc;
  }

  /** @returns {number} the microphone level, 0..1 (0 when the mic is off) */
  get micLevel() {
    if (!this._analyser) return 0;
    const buf = new Float32Array(this._analyser.fftSize);
    this._analyser.getFloatTimeDomainData(buf);
    return Math.min(1, rms(buf) * 4);
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
    if (this._micStream) return Promise.resolve();
    // a second call while the permission prompt is open shares the first one
    this._micStarting ??= this._startMic().finally(() => { this._micStarting = null; });
    return this._micStarting;
  }

  async _startMic() {
    if (!this._getUserMedia) {
      throw this._emitError(new VoiceClientError("MIC_UNAVAILABLE",
        "This browser gives no microphone access here (a secure https:// origin is needed)."));
    }
    let stream;
    try {
      stream = await this._getUserMedia({
        audio: this.options.audioConstraints
          ?? { echoCancellation: true, noiseSuppression: true, autoGainControl: true },
      });
    } catch (err) {
      const denied = err && (err.name === "NotAllowedError" || err.name === "SecurityError");
      throw this._emitError(new VoiceClientError(denied ? "MIC_DENIED" : "MIC_UNAVAILABLE",
        denied ? "Microphone access was denied." : `No usable microphone: ${err?.message ?? err}`));
    }
    this._micStream = stream;
    try {
      const ctx = this._audioContext();
      if (ctx.state === "suspended") await ctx.resume();
      const source = ctx.createMediaStreamSource(stream);
      this._analyser = ctx.createAnalyser();
      this._analyser.fftSize = 1024;
      source.connect(this._analyser);
      this._micSource = source;
    } catch (err) {
      this._log?.warn("llmrtc: no mic level meter", err);
    }
    this._emit("mic", { active: true });
    if (this.state === State.CONNECTED) await this._attachMic();
  }

  /** Stop the microphone (an utterance in progress in the fallback is sent). */
  stopMic() {
    if (!this._micStream) return;
    this._detachMic(true);
    for (const t of this._micStream.getTracks()) t.stop();
    this._micStream = null;
    try {
      this._micSource?.disconnect();
    } catch {
      // already disconnected
    }
    this._micSource = null;
    this._analyser = null;
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
      if (this._queue.length >= this.maxQueued) this._queue.shift();
      this._queue.push(text);
      return;
    }
    if (opts.preferDataChannel && this.dataChannelOpen) this._dc.send(text);
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
    const epoch = ++this._epoch;
    this.router.reset();
    // wait for `ready` from the start: it may arrive in the same task as `open`
    const readyP = this._waitFor(epoch, (m) => m.type === "ready", "ready");
    readyP.catch(() => {});
    const ws = await this._openSocket(epoch);
    const ready = await readyP;
    this.serverIceServers = Array.isArray(ready.iceServers) ? ready.iceServers : null;
    this.protocolVersion = ready.protocolVersion ?? null;
    if (ready.protocolVersion !== PROTOCOL_VERSION) {
      this._log?.warn(`llmrtc: server speaks protocol ${ready.protocolVersion}, client ${
        PROTOCOL_VERSION}`);
    }
    this.sessionId = ready.id;
    this._emit("ready", { sessionId: ready.id, protocolVersion: ready.protocolVersion });
    if (resumeSessionId) {
      // spec: "Session Reconnection": reconnect{sessionId} right after the new ready
      ws.send(JSON.stringify({ type: "reconnect", sessionId: resumeSessionId }));
      // an unknown or expired session may be refused with an error instead of an ack: the
      // connection then simply goes on with the new session (no error event for it)
      let ack = null;
      this._resuming = true;
      try {
        ack = await this._waitFor(epoch, (m) => m.type === "reconnect-ack"
          || (m.type === "error" && SESSION_CODES.has(m.code)), "reconnect-ack");
      } catch (err) {
        if (epoch !== this._epoch) throw err;
      } finally {
        this._resuming = false;
      }
      if (ack?.type !== "reconnect-ack") ack = null;
      if (ack?.success && ack.sessionId) this.sessionId = ack.sessionId;
      this._emit("reconnected", {
        sessionId: this.sessionId, historyRecovered: Boolean(ack?.success && ack.historyRecovered),
      });
    }
    this._startHeartbeat(epoch);
    await this._startMedia(epoch);
    this._check(epoch);
  }

  _openSocket(epoch) {
    return new Promise((resolve, reject) => {
      let url = this.options.url;
      if (this.options.playbook) {
        url += (url.includes("?") ? "&" : "?") + "playbook=" + encodeURIComponent(this.options.playbook);
      }
      let ws;
      try {
        ws = this._createWebSocket(url);
      } catch (err) {
        reject(new VoiceClientError("CONNECTION_FAILED", `cannot open ${url}: ${err?.message}`));
        return;
      }
      this._ws = ws;
      let opened = false;
      ws.addEventListener("open", () => {
        opened = true;
        this._lastInbound = Date.now();
        resolve(ws);
      });
      ws.addEventListener("message", (ev) => {
        if (epoch === this._epoch) this._onText(String(ev.data), "ws", epoch);
      });
      let failed = false;
      const notOpened = () => {
        if (failed) return;
        failed = true;
        this._whyNotOpened(url).then(reject);
      };
      ws.addEventListener("close", (ev) => {
        if (!opened) {
          notOpened();
        } else if (epoch === this._epoch) {
          const error = new VoiceClientError("CONNECTION_FAILED",
            `the server closed the connection (${ev?.code ?? "?"})`, { recoverable: true });
          for (const w of [...this._waiters]) {
            if (w.epoch === epoch) {
              this._waiters.delete(w);
              w.reject(error);
            }
          }
          this._lost(`WebSocket closed (${ev?.code ?? "?"})`);
        }
      });
      ws.addEventListener("error", () => {
        if (!opened) notOpened();
      });
    });
  }

  /**
   * A WebSocket that never opened: was the server down, or did it refuse this page? A browser
   * tells a script neither, so ask the server's /health: answered to a CORS request, the
   * server is up and this origin allowed (refused for another reason: full, shutting down, a
   * token needed); answered only without CORS, the server is up and this origin is not in its
   * allowed_origins; not answered, the server is unreachable.
   */
  async _whyNotOpened(url) {
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
    if (!this._fetch) return unreachable;
    const probe = (mode) => this._withTimeout(
      this._fetch(health, { mode, cache: "no-store", credentials: "omit" }), "server check");
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
    const origin = this._pageOrigin ?? "this page's origin";
    return new VoiceClientError("ORIGIN_REFUSED", `the voice server at ${url} does not allow ` +
      `pages from ${origin}: add it to its allowed_origins (--allowed-origins or ` +
      "VOICE_SERVER_ALLOWED_ORIGINS)", { recoverable: false });
  }

  /** Inbound text from either channel. */
  _onText(text, channel, epoch) {
    this._lastInbound = Date.now();
    let msg;
    try {
      msg = JSON.parse(text);
    } catch {
      this._log?.warn("llmrtc: ignoring a non-JSON message");
      return;
    }
    if (!msg || typeof msg.type !== "string") return;
    for (const w of [...this._waiters]) {
      if (w.epoch === epoch && w.match(msg)) {
        this._waiters.delete(w);
        w.resolve(msg);
      }
    }
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
    switch (msg.type) {
      case "error": {
        if (this._resuming && SESSION_CODES.has(msg.code)) return;
        if (msg.code === "WEBRTC_UNAVAILABLE") {
          // handled by falling back to the WebSocket transport (a `transport` event tells)
          this._log?.info?.("llmrtc: the server has no WebRTC");
          return;
        }
        this._emitError(new VoiceClientError(String(msg.code ?? "INTERNAL_ERROR"),
          String(msg.message ?? "server error"), { recoverable: true }));
        return;
      }
      case "tts-chunk":
      case "tts":
        if (!this._hasRemoteAudio() && typeof msg.data === "string" && msg.data) {
          try {
            this.player.enqueue(base64ToBytes(msg.data), msg.format ?? "pcm", msg.sampleRate);
          } catch (err) {
            this._log?.warn("llmrtc: cannot play TTS audio", err);
          }
        }
        break;
      case "tts-cancelled":
        this.player.stop();
        break;
      default:
        break;
    }
    if (EVENT_TYPES.has(msg.type)) this._emit(msg.type, msg);
  }

  _hasRemoteAudio() {
    return Boolean(this._remoteStream?.getAudioTracks?.().some((t) => t.readyState === "live"));
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
    const epoch = this._epoch;
    this._later(async () => {
      if (epoch !== this._epoch || this.state !== State.RECONNECTING) return;
      const attempt = this._open(resume);
      const attemptEpoch = this._epoch; // _open() took a new epoch synchronously
      try {
        await attempt;
        this.backoff.reset();
        await this._connected();
      } catch (err) {
        if (this.state !== State.RECONNECTING || attemptEpoch !== this._epoch) return;
        this._log?.info?.("llmrtc: reconnect attempt failed", err);
        this._lost("reconnect attempt failed");
      }
    }, delay);
  }

  /** Connected (first time or again): flush the queue, then re-attach the mic. */
  async _connected() {
    this._setState(State.CONNECTED);
    if (this.options.turnMetrics) this.send({ type: "turn-metrics-subscribe" });
    this._flushQueue();
    if (this._micStream) await this._attachMic();
  }

  _flushQueue() {
    const queued = this._queue;
    this._queue = [];
    for (const text of queued) this._wsSend(text);
  }

  _wsSend(text) {
    if (this._ws && this._ws.readyState === 1) this._ws.send(text);
    else {
      if (this._queue.length >= this.maxQueued) this._queue.shift();
      this._queue.push(text);
    }
  }

  _startHeartbeat(epoch) {
    const beat = () => {
      if (epoch !== this._epoch) return;
      if (Date.now() - this._lastInbound > this.deadAfterMs) {
        this._lost("no message from the server");
        return;
      }
      if (this._ws?.readyState === 1) {
        this._ws.send(JSON.stringify({ type: "ping", timestamp: Date.now() }));
      }
      this._later(beat, this.pingIntervalMs);
    };
    this._later(beat, this.pingIntervalMs);
  }

  // --- WebRTC ------------------------------------------------------------------------------

  /** WebRTC with the data channel, or the WebSocket fallback when it is unavailable. */
  async _startMedia(epoch) {
    if (this.options.webrtc === false || !this._createPeerConnection) {
      this._setTransport("websocket");
      return;
    }
    try {
      const pc = this._createPeerConnection({
        iceServers: this.options.iceServers ?? this.serverIceServers ?? [],
      });
      this._pc = pc;
      pc.addEventListener("track", (ev) => {
        if (epoch !== this._epoch || ev.track.kind !== "audio") return;
        const stream = ev.streams?.[0] ?? new MediaStream([ev.track]);
        this._remoteStream = stream;
        this._playRemote(stream);
        this._emit("remote-track", { stream });
      });
      pc.addEventListener("connectionstatechange", () => {
        if (epoch === this._epoch && pc.connectionState === "failed") {
          this._lost("WebRTC connection failed");
        }
      });
      const dc = pc.createDataChannel("data", { ordered: true });
      this._dc = dc;
      dc.addEventListener("message", (ev) => {
        if (epoch !== this._epoch) return;
        const text = typeof ev.data === "string" ? ev.data : new TextDecoder().decode(ev.data);
        this._onText(text, "dc", epoch);
      });
      const opened = new Promise((resolve, reject) => {
        dc.addEventListener("open", resolve, { once: true });
        dc.addEventListener("close", () => reject(new Error("data channel closed")), { once: true });
      });
      opened.catch(() => {});
      dc.addEventListener("close", () => {
        if (epoch === this._epoch && this.transport === "webrtc") this._lost("data channel closed");
      });
      await this._negotiate(epoch);
      await this._withTimeout(opened, "data channel");
      this._check(epoch);
      this._setTransport("webrtc");
    } catch (err) {
      this._check(epoch);
      this._log?.warn(`llmrtc: WebRTC unavailable (${err?.message ?? err}); using the WebSocket`);
      this._closePeer();
      this._setTransport("websocket", `WebRTC could not connect (${err?.message ?? err})`);
    }
  }

  /** Offer/answer, serialised (spec: "offer", "signal"); non-trickle: ICE is in the SDP. */
  _negotiate(epoch) {
    const run = async () => {
      this._check(epoch);
      const pc = this._pc;
      const answer = this._waitFor(epoch, (m) => m.type === "signal" && m.signal?.type === "answer"
        || (m.type === "error" && m.code === "WEBRTC_UNAVAILABLE"), "answer");
      answer.catch(() => {});
      await pc.setLocalDescription(await pc.createOffer());
      await this._iceGathered(pc);
      this._check(epoch);
      const local = pc.localDescription;
      this._wsSend(JSON.stringify({ type: "offer", signal: { type: local.type, sdp: local.sdp } }));
      const reply = await answer;
      if (reply.type === "error") throw new VoiceClientError(reply.code, reply.message ?? "");
      this._check(epoch);
      await pc.setRemoteDescription(reply.signal);
    };
    const next = this._negotiation.then(run, run);
    this._negotiation = next.catch(() => {});
    return next;
  }

  _iceGathered(pc) {
    if (pc.iceGatheringState === "complete") return Promise.resolve();
    return new Promise((resolve) => {
      const done = () => {
        if (pc.iceGatheringState !== "complete") return;
        pc.removeEventListener("icegatheringstatechange", done);
        resolve();
      };
      pc.addEventListener("icegatheringstatechange", done);
      this._later(resolve, 3000);
    });
  }

  _playRemote(stream) {
    const el = this.options.audioElement
      ?? (this._audioEl ??= typeof Audio === "function" ? new Audio() : null);
    if (!el) return;
    el.autoplay = true;
    el.srcObject = stream;
    el.play?.()?.catch?.((err) => this._log?.warn("llmrtc: remote audio blocked", err));
  }

  /** Send the mic to the server: a WebRTC track (re-offer) or the fallback recorder. */
  async _attachMic() {
    if (!this._micStream) return;
    const epoch = this._epoch;
    if (this.transport === "webrtc" && this._pc) {
      const track = this._micStream.getAudioTracks()[0];
      if (!track) return;
      if (this._micSender) await this._micSender.replaceTrack(track);
      else this._micSender = this._pc.addTrack(track, this._micStream);
      try {
        await this._negotiate(epoch); // spec: re-offer when the mic starts
      } catch (err) {
        if (epoch === this._epoch) this._lost(`renegotiation failed: ${err?.message ?? err}`);
      }
    } else if (this.transport === "websocket") {
      try {
        this._startRecorder();
      } catch (err) {
        this._emitError(new VoiceClientError("MIC_UNAVAILABLE",
          `cannot record the microphone here: ${err?.message ?? err}`));
      }
    }
  }

  _detachMic(flush) {
    if (this._micSender && this._pc && this._pc.signalingState !== "closed") {
      try {
        this._pc.removeTrack(this._micSender);
        this._negotiate(this._epoch).catch(() => {});
      } catch {
        // the peer connection is gone
      }
    }
    this._micSender = null;
    this._stopRecorder(flush);
  }

  /** Fallback: cut the mic into utterances and send each as `audio{data: base64 WAV}`. */
  _startRecorder() {
    if (this._recorder || !this._micStream) return;
    const ctx = this._audioContext();
    const source = ctx.createMediaStreamSource(this._micStream);
    const node = ctx.createScriptProcessor(4096, 1, 1);
    const mute = ctx.createGain();
    mute.gain.value = 0;
    const endpointer = new Endpointer({ sampleRate: ctx.sampleRate });
    const emit = (samples) => {
      if (!samples) return;
      const wav = encodeWav(downsample(samples, ctx.sampleRate, 16000), 16000);
      if (this.state === State.CONNECTED || this.state === State.RECONNECTING) this.sendAudio(wav);
    };
    node.onaudioprocess = (ev) => emit(endpointer.push(new Float32Array(ev.inputBuffer.getChannelData(0))));
    source.connect(node);
    node.connect(mute);
    mute.connect(ctx.destination);
    this._recorder = { source, node, mute, endpointer, emit };
  }

  _stopRecorder(flush) {
    const r = this._recorder;
    if (!r) return;
    this._recorder = null;
    r.node.onaudioprocess = null;
    for (const n of [r.source, r.node, r.mute]) {
      try {
        n.disconnect();
      } catch {
        // already disconnected
      }
    }
    if (flush) r.emit(r.endpointer.flush());
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

  _closePeer() {
    if (this._dc) {
      try {
        this._dc.close();
      } catch {
        // closed
      }
    }
    if (this._pc) {
      try {
        this._pc.close();
      } catch {
        // closed
      }
    }
    this._dc = null;
    this._pc = null;
    this._micSender = null;
    this._remoteStream = null;
  }

  /** Close sockets and timers of the current connection, keeping the mic and the queue. */
  _teardown() {
    this._epoch += 1;
    for (const t of this._timers) clearTimeout(t);
    this._timers.clear();
    for (const w of this._waiters) w.reject(new VoiceClientError("CLOSED", "connection closed"));
    this._waiters.clear();
    this._stopRecorder(false);
    this._closePeer();
    if (this._ws) {
      try {
        this._ws.close(1000);
      } catch {
        // closed
      }
    }
    this._ws = null;
    this.transport = null;
  }

  _check(epoch) {
    if (epoch !== this._epoch) throw new VoiceClientError("CLOSED", "superseded");
  }

  _later(fn, ms) {
    const t = setTimeout(() => {
      this._timers.delete(t);
      fn();
    }, ms);
    this._timers.add(t);
    return t;
  }

  /** Resolve with the next inbound message matching `match` on this connection. */
  _waitFor(epoch, match, what) {
    return new Promise((resolve, reject) => {
      const waiter = { epoch, match, resolve, reject };
      this._waiters.add(waiter);
      this._later(() => {
        if (this._waiters.delete(waiter)) {
          reject(new VoiceClientError("TIMEOUT", `timed out waiting for ${what}`,
            { recoverable: true }));
        }
      }, this.timeoutMs);
    });
  }

  _withTimeout(promise, what) {
    return new Promise((resolve, reject) => {
      this._later(() => reject(new VoiceClientError("TIMEOUT", `timed out waiting for ${what}`)),
        this.timeoutMs);
      promise.then(resolve, reject);
    });
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

/** @returns {VoiceClientError} */
function toClientError(err, code) {
  if (err instanceof VoiceClientError) return err;
  return new VoiceClientError(code, err?.message ?? String(err));
}
