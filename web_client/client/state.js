// state.js: the connection's state machine and the conversation's phase (pure).
// Spec references ("spec: ...") name sections of the llmrtc wire protocol v1.

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
