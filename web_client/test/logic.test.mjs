// Pure logic of the client's modules: state machine, backoff, payload dedupe and effects, WAV,
// endpointing; and the names llmrtc.js exports.
import assert from "node:assert/strict";
import { test } from "node:test";

import { Backoff } from "../client/backoff.js";
import { CAPTURE_PROCESSOR, FrameBatcher } from "../client/capture-worklet.js";
import { base64ToBytes, bytesToBase64, downsample, encodeWav } from "../client/codecs.js";
import { Endpointer } from "../client/endpointer.js";
import { VoiceClientError } from "../client/errors.js";
import { payloadEffects } from "../client/events.js";
import * as llmrtc from "../client/llmrtc.js";
import { PayloadRouter, fnv1a } from "../client/router.js";
import { Phase, State, StateMachine, nextPhase } from "../client/state.js";

test("state machine follows the lifecycle and records its history", () => {
  const m = new StateMachine();
  for (const s of [State.CONNECTING, State.CONNECTED, State.RECONNECTING, State.CONNECTED,
    State.CLOSED, State.CONNECTING]) m.transition(s);
  assert.deepEqual(m.history, ["idle", "connecting", "connected", "reconnecting", "connected",
    "closed", "connecting"]);
});

test("state machine refuses illegal transitions", () => {
  const m = new StateMachine();
  assert.throws(() => m.transition(State.CONNECTED), /idle -> connected/);
  assert.throws(() => m.transition(State.RECONNECTING), /idle -> reconnecting/);
  m.transition(State.CLOSED);
  assert.throws(() => m.transition(State.CLOSED), /closed -> closed/);
  assert.equal(m.can(State.CONNECTING), true);
});

test("backoff doubles from the base up to the cap, then gives up", () => {
  const b = new Backoff({ baseMs: 100, maxMs: 1000, maxRetries: 6, random: () => 0 });
  const delays = [];
  for (let d = b.next(); d !== null; d = b.next()) delays.push(d);
  assert.deepEqual(delays, [100, 200, 400, 800, 1000, 1000]);
  assert.equal(b.next(), null);
  b.reset();
  assert.equal(b.next(), 100);
});

test("backoff jitter adds at most the jitter fraction", () => {
  const hi = new Backoff({ baseMs: 1000, jitter: 0.5, random: () => 1 });
  assert.deepEqual([hi.next(), hi.next()], [1500, 3000]);
  const mid = new Backoff({ baseMs: 1000, jitter: 0.5, random: () => 0.5 });
  assert.equal(mid.next(), 1250);
});

function msg(obj) {
  return [JSON.stringify(obj), obj];
}

test("router delivers the data-channel copy first and drops the WebSocket twin", () => {
  const r = new PayloadRouter();
  const [t, m] = msg({ type: "llm-chunk", content: "Hi", done: false });
  assert.equal(r.accept("dc", t, m), true);
  assert.equal(r.accept("ws", t, m), false);
  assert.equal(r.dropped, 1);
});

test("router delivers the WebSocket copy when it wins, and drops the late data-channel twin", () => {
  const r = new PayloadRouter();
  const [t, m] = msg({ type: "transcript", text: "Hello", isFinal: true });
  assert.equal(r.accept("ws", t, m), true);
  assert.equal(r.accept("dc", t, m), false);
});

test("router keeps legitimately repeated identical messages", () => {
  const r = new PayloadRouter();
  const [t, m] = msg({ type: "tts-start" });
  const got = [r.accept("dc", t, m), r.accept("dc", t, m), r.accept("ws", t, m),
    r.accept("ws", t, m), r.accept("ws", t, m)];
  // two sent on both channels, then a third one the server sent on the WebSocket only
  assert.deepEqual(got, [true, true, false, false, true]);
});

test("router keeps order when channels interleave", () => {
  const r = new PayloadRouter();
  const texts = ["a", "b", "c", "d"].map((c) => msg({ type: "llm-chunk", content: c, done: false }));
  const arrivals = [["dc", 0], ["ws", 0], ["ws", 1], ["ws", 2], ["dc", 1], ["dc", 2], ["dc", 3],
    ["ws", 3]];
  const delivered = [];
  for (const [ch, i] of arrivals) {
    if (r.accept(ch, ...texts[i])) delivered.push(texts[i][1].content);
  }
  assert.deepEqual(delivered, ["a", "b", "c", "d"]);
});

test("router matches twins by seq when the server stamps one", () => {
  const r = new PayloadRouter();
  assert.equal(r.accept("ws", '{"type":"llm","text":"x","seq":7}', { type: "llm", seq: 7 }), true);
  // same seq, text serialised differently on the other channel
  assert.equal(r.accept("dc", '{"seq":7,"type":"llm","text":"x"}', { type: "llm", seq: 7 }), false);
  assert.equal(r.accept("dc", '{"type":"llm","text":"x","seq":8}', { type: "llm", seq: 8 }), true);
});

test("router forgets unmatched messages after its window", () => {
  let now = 0;
  const r = new PayloadRouter({ windowMs: 1000, now: () => now });
  const [t, m] = msg({ type: "speech-start" });
  assert.equal(r.accept("ws", t, m), true);
  now = 1500;
  assert.equal(r.accept("dc", t, m), true, "a twin this late is a new message");
  assert.equal(r.counts.ws, 0);
});

test("router bounds its memory", () => {
  const r = new PayloadRouter({ maxEntries: 3 });
  for (let i = 0; i < 10; i++) r.accept("ws", ...msg({ type: "llm-chunk", content: String(i) }));
  assert.equal(r.counts.ws, 3);
  // the oldest were evicted: their twins are now taken as new, the newest still match
  assert.equal(r.accept("dc", ...msg({ type: "llm-chunk", content: "0" })), true);
  assert.equal(r.accept("dc", ...msg({ type: "llm-chunk", content: "9" })), false);
});

test("fnv1a is the standard 32-bit FNV-1a", () => {
  assert.equal(fnv1a(""), "811c9dc5");
  assert.equal(fnv1a("a"), "e40c292c");
  assert.equal(fnv1a("foobar"), "bf9cf968");
});

test("encodeWav writes a 16-bit mono PCM header and clamped samples", () => {
  const wav = encodeWav(new Float32Array([0, 1, -1, 2, -0.5]), 16000);
  assert.equal(wav.length, 44 + 10);
  assert.equal(Buffer.from(wav.subarray(0, 4)).toString(), "RIFF");
  assert.equal(Buffer.from(wav.subarray(8, 16)).toString(), "WAVEfmt ");
  const v = new DataView(wav.buffer);
  assert.equal(v.getUint32(4, true), 36 + 10);
  assert.equal(v.getUint16(20, true), 1);
  assert.equal(v.getUint16(22, true), 1);
  assert.equal(v.getUint32(24, true), 16000);
  assert.equal(v.getUint32(28, true), 32000);
  assert.equal(v.getUint16(34, true), 16);
  assert.equal(Buffer.from(wav.subarray(36, 40)).toString(), "data");
  assert.equal(v.getUint32(40, true), 10);
  const samples = [0, 1, 2, 3, 4].map((i) => v.getInt16(44 + 2 * i, true));
  assert.deepEqual(samples, [0, 32767, -32768, 32767, -16384]);
});

function tone(freq, rate, seconds) {
  return Float32Array.from({ length: Math.round(rate * seconds) },
    (_, i) => Math.sin((2 * Math.PI * freq * i) / rate));
}

function peak(samples) {
  // ignore the filter's edges
  return Math.max(...samples.slice(200, -200).map(Math.abs));
}

test("downsample keeps speech frequencies and the length ratio", () => {
  const out = downsample(tone(1000, 48000, 0.5), 48000, 16000);
  assert.equal(out.length, 8000);
  assert.ok(Math.abs(peak(out) - 1) < 0.02, `1 kHz passes (peak ${peak(out)})`);
  const dc = downsample(new Float32Array(4800).fill(0.25), 48000, 16000);
  assert.ok(dc.every((v) => Math.abs(v - 0.25) < 1e-6), "DC gain is one");
  const odd = downsample(tone(440, 44100, 0.5), 44100, 16000);
  assert.equal(odd.length, Math.floor(22050 / (44100 / 16000)));
  assert.ok(Math.abs(peak(odd) - 1) < 0.02);
});

test("downsample removes what would alias instead of folding it down", () => {
  // 12 kHz is above the 8 kHz Nyquist of 16 kHz: averaging would fold it to 4 kHz
  const out = downsample(tone(12000, 48000, 0.5), 48000, 16000);
  assert.ok(peak(out) < 0.01, `12 kHz is filtered out (peak ${peak(out)})`);
  const same = new Float32Array([1, 2]);
  assert.equal(downsample(same, 16000, 16000), same);
});

test("base64 round trip of binary bytes", () => {
  const bytes = new Uint8Array(70000).map((_, i) => (i * 7) & 0xff);
  const b64 = bytesToBase64(bytes);
  assert.equal(b64, Buffer.from(bytes).toString("base64"));
  assert.deepEqual(base64ToBytes(b64), bytes);
});

test("endpointer cuts one utterance with pre-roll after trailing silence", () => {
  const rate = 1000; // 10 ms frames of 10 samples
  const e = new Endpointer({ sampleRate: rate, silenceMs: 50, preRollMs: 20, minSpeechMs: 20 });
  const quiet = () => new Float32Array(10);
  const loud = () => new Float32Array(10).fill(0.5);
  const results = [];
  const feed = (frame) => {
    const u = e.push(frame);
    if (u) results.push(u);
  };
  for (let i = 0; i < 10; i++) feed(quiet());
  for (let i = 0; i < 5; i++) feed(loud());
  for (let i = 0; i < 5; i++) feed(quiet());
  assert.equal(results.length, 1);
  // 2 pre-roll frames + 5 loud + 5 quiet
  assert.equal(results[0].length, 120);
  assert.equal(results[0][0], 0);
  assert.equal(results[0][20], 0.5);
  for (let i = 0; i < 10; i++) feed(quiet());
  assert.equal(results.length, 1, "silence alone makes no utterance");
});

test("endpointer ignores a click shorter than the minimum speech", () => {
  const e = new Endpointer({ sampleRate: 1000, silenceMs: 30, minSpeechMs: 50 });
  e.push(new Float32Array(10).fill(0.5));
  let out = null;
  for (let i = 0; i < 5 && !out; i++) out = e.push(new Float32Array(10));
  assert.equal(out, null);
  assert.equal(e.flush(), null);
});

test("endpointer flush hands over a running utterance", () => {
  const e = new Endpointer({ sampleRate: 1000, minSpeechMs: 10 });
  e.push(new Float32Array(10).fill(0.5));
  e.push(new Float32Array(10).fill(0.5));
  assert.equal(e.flush().length, 20);
});

test("phase follows the connection and the turn", () => {
  const walk = (events) => events.reduce((acc, e) => [...acc, nextPhase(acc.at(-1), e)],
    [Phase.IDLE]).slice(1);
  const m = (type, extra = {}) => ({ message: { type, ...extra } });
  assert.deepEqual(walk([
    { state: "connecting" }, { state: "connected" },
    m("speech-start"), m("transcript", { text: "What is", isFinal: false }), m("speech-end"),
    m("transcript", { text: "What is the time?", isFinal: true }), m("llm-chunk"),
    m("tts-start"), m("speech-start"), m("tts-cancelled"), m("speech-end"),
    m("transcript", { text: "Stop.", isFinal: true }), m("llm"), m("tts-start"),
    m("tts-complete"),
  ]), ["connecting", "listening", "user-speaking", "user-speaking", "thinking", "thinking",
    "thinking", "agent-speaking", "user-speaking", "user-speaking", "thinking", "thinking",
    "thinking", "agent-speaking", "listening"]);
  // typed input and the WebSocket path: a final transcript starts the thinking
  assert.equal(nextPhase(Phase.LISTENING, m("transcript", { text: "Hi", isFinal: true })),
    Phase.THINKING);
  // an empty transcript is not answered; a failed turn goes back to listening
  assert.equal(nextPhase(Phase.THINKING, m("transcript", { text: " ", isFinal: true })),
    Phase.LISTENING);
  assert.equal(nextPhase(Phase.AGENT_SPEAKING, m("transcript", { text: "", isFinal: true })),
    Phase.AGENT_SPEAKING);
  assert.equal(nextPhase(Phase.USER_SPEAKING, m("transcript", { text: "", isFinal: true })),
    Phase.LISTENING);
  assert.equal(nextPhase(Phase.THINKING, m("error", { code: "LLM_ERROR" })), Phase.LISTENING);
  assert.equal(nextPhase(Phase.LISTENING, { state: "reconnecting" }), Phase.RECONNECTING);
  assert.equal(nextPhase(Phase.RECONNECTING, { state: "closed", failed: true }), Phase.ERROR);
  assert.equal(nextPhase(Phase.LISTENING, { state: "closed" }), Phase.IDLE);
});

test("llmrtc.js exports the public API, the names it always had", () => {
  assert.deepEqual(Object.keys(llmrtc).sort(), [
    "Backoff", "ChunkPlayer", "Endpointer", "PROTOCOL_VERSION", "PayloadRouter", "Phase",
    "State", "StateMachine", "VoiceClient", "VoiceClientError", "base64ToBytes", "bytesToBase64",
    "downsample", "encodeWav", "fnv1a", "nextPhase", "rms",
  ]);
  assert.equal(llmrtc.PROTOCOL_VERSION, 1);
});

test("payload effects: events, errors, audio played or silenced", () => {
  const idle = { resuming: false, remoteAudio: false };
  const none = { event: null, error: null, play: false, stop: false };
  assert.deepEqual(payloadEffects({ type: "transcript", text: "hi" }, idle),
    { ...none, event: "transcript" });
  assert.deepEqual(payloadEffects({ type: "something-new" }, idle), none);
  assert.deepEqual(payloadEffects({ type: "tts-chunk", data: "AAA=" }, idle),
    { ...none, event: "tts-chunk", play: true });
  assert.deepEqual(payloadEffects({ type: "tts-chunk", data: "AAA=" },
    { ...idle, remoteAudio: true }), { ...none, event: "tts-chunk" }, "WebRTC plays it already");
  assert.deepEqual(payloadEffects({ type: "tts", data: "" }, idle), { ...none, event: "tts" });
  assert.deepEqual(payloadEffects({ type: "tts-cancelled" }, idle),
    { ...none, event: "tts-cancelled", stop: true });
  const { error } = payloadEffects({ type: "error", code: "LLM_ERROR", message: "down" }, idle);
  assert.ok(error instanceof VoiceClientError);
  assert.deepEqual([error.code, error.message, error.recoverable], ["LLM_ERROR", "down", true]);
  assert.equal(payloadEffects({ type: "error" }, idle).error.code, "INTERNAL_ERROR");
  // expected answers, not failures: a refused resume, and no WebRTC (the fallback is taken)
  assert.deepEqual(payloadEffects({ type: "error", code: "SESSION_NOT_FOUND" },
    { ...idle, resuming: true }), none);
  assert.equal(payloadEffects({ type: "error", code: "SESSION_NOT_FOUND" }, idle).error.code,
    "SESSION_NOT_FOUND");
  assert.deepEqual(payloadEffects({ type: "error", code: "WEBRTC_UNAVAILABLE" }, idle), none);
});

test("the capture worklet batches 128-sample blocks into whole frames, in order", () => {
  const batcher = new FrameBatcher(300);
  const block = (start) => Float32Array.from({ length: 128 }, (_, i) => start + i);
  const frames = [];
  for (let b = 0; b < 7; b++) frames.push(...batcher.push(block(b * 128)));
  // 7 * 128 = 896 samples: two frames of 300, 296 waiting for the next block
  assert.equal(frames.length, 2);
  assert.deepEqual(frames.map((f) => [f.length, f[0], f[299]]), [[300, 0, 299], [300, 300, 599]]);
  const next = batcher.push(block(896));
  assert.deepEqual(next.map((f) => [f.length, f[0], f[299]]), [[300, 600, 899]]);
  assert.notEqual(next[0].buffer, frames[1].buffer, "each frame has its own buffer to transfer");
  assert.deepEqual(batcher.push(new Float32Array(0)), []);
  assert.throws(() => new FrameBatcher(0), RangeError);
  assert.equal(CAPTURE_PROCESSOR, "llmrtc-capture");
});

test("the capture worklet's input is copied: the audio thread may reuse its block", () => {
  const batcher = new FrameBatcher(4);
  const reused = new Float32Array([1, 2]);
  batcher.push(reused);
  reused.set([3, 4]);
  assert.deepEqual([...batcher.push(reused)[0]], [1, 2, 3, 4]);
});
