// events.js: what each payload message from the server does on the client, decided without
// side effects (unit-tested in Node): the event it becomes, an error to report, audio to play
// or to silence. Spec references ("spec: ...") name sections of the llmrtc wire protocol v1.

import { VoiceClientError } from "./errors.js";
import { SESSION_CODES } from "./router.js";

/** Payload message types re-dispatched as events of the same name (spec: "Server → Client"). */
export const EVENT_TYPES = new Set([
  "speech-start", "speech-end", "transcript", "llm-chunk", "llm", "tts-start", "tts-chunk",
  "tts", "tts-complete", "tts-cancelled", "tool-call-start", "tool-call-end", "stage-change",
  "assistant-transcript", "usage", "mode-changed", "metrics", "turn-metrics",
]);

/**
 * @typedef {object} PayloadEffects
 * @property {string | null} event dispatch an event of this name with the message as detail
 * @property {VoiceClientError | null} error dispatch an `error` event for it
 * @property {boolean} play play the message's audio (`tts-chunk` / `tts`, base64 in `data`)
 * @property {boolean} stop silence the agent's audio already queued (barge-in)
 */

/**
 * @param {{type: string, code?: unknown, message?: unknown, data?: unknown}} msg a payload
 * @param {{resuming: boolean, remoteAudio: boolean}} ctx `resuming`: a `reconnect` awaits its
 *   answer (a SESSION_* error is that answer, not a failure); `remoteAudio`: a live WebRTC
 *   track carries the agent's voice, so audio in messages is not played twice
 * @returns {PayloadEffects}
 */
export function payloadEffects(msg, ctx) {
  const effects = { event: EVENT_TYPES.has(msg.type) ? msg.type : null, error: null,
    play: false, stop: false };
  switch (msg.type) {
    case "error":
      // WEBRTC_UNAVAILABLE is handled by falling back to the WebSocket (a `transport` event)
      if ((ctx.resuming && SESSION_CODES.has(msg.code)) || msg.code === "WEBRTC_UNAVAILABLE") {
        return effects;
      }
      effects.error = new VoiceClientError(String(msg.code ?? "INTERNAL_ERROR"),
        String(msg.message ?? "server error"), { recoverable: true });
      return effects;
    case "tts-chunk":
    case "tts":
      effects.play = !ctx.remoteAudio && typeof msg.data === "string" && msg.data !== "";
      return effects;
    case "tts-cancelled":
      effects.stop = true;
      return effects;
    default:
      return effects;
  }
}
