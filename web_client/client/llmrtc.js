// llmrtc.js: embeddable browser client for voice_server (llmrtc wire protocol v1). The one URL
// an embedding page imports, GET /client/llmrtc.js; ES modules beside it, no build step, no
// dependencies.
//
//   import { VoiceClient } from "/client/llmrtc.js";
//   const c = new VoiceClient({ url: "ws://127.0.0.1:8787/ws" });
//   c.addEventListener("transcript", (e) => console.log(e.detail.text));
//   await c.connect();
//   await c.startMic();
//
// The modules, each one concept (the pure ones are unit-tested in Node; the browser APIs are
// injectable, see VoiceClientOptions in client.js):
//   client.js      VoiceClient: the public API, reconnects, queued sends, payload events
//   connection.js  one connection attempt: WebSocket, ready, resume, heartbeat, media
//   signaling.js   the WebSocket: opening it (and why it did not open), the heartbeat
//   peer.js        WebRTC: peer connection, data channel, offer/answer, the mic as a track
//   capture.js     the microphone: level meter, the fallback's recorder (an AudioWorklet,
//                  capture-worklet.js)
//   playback.js    the agent's audio sent in messages (the fallback), the WebRTC track
//   events.js      what each payload message does: its event, an error, audio to play or stop
//   router.js      signaling vs payload, each payload once from two channels
//   state.js       connection State machine, conversation Phase
//   scope.js       timers and waiters of one connection attempt
//   backoff.js, codecs.js (WAV, base64, resampling), endpointer.js, errors.js

export { Backoff } from "./backoff.js";
export { base64ToBytes, bytesToBase64, downsample, encodeWav, rms } from "./codecs.js";
export { Endpointer } from "./endpointer.js";
export { VoiceClientError } from "./errors.js";
export { ChunkPlayer } from "./playback.js";
export { PayloadRouter, fnv1a } from "./router.js";
export { PROTOCOL_VERSION, Phase, State, StateMachine, nextPhase } from "./state.js";
export { VoiceClient } from "./client.js";
