// VoiceClient against scripted fakes: handshake, routing, dedupe across channels, heartbeat,
// reconnect with backoff, queued sends, WebRTC negotiation and fallback, close().
import assert from "node:assert/strict";
import { test } from "node:test";

import { State, VoiceClient } from "../client/llmrtc.js";
import {
  FakeServer, fakeMicStream, nextEvent, peerFactory, recordEvents,
} from "./fakes.mjs";

const URL = "ws://127.0.0.1:8787/ws";

/** fetch() against a server that is down: every request fails, as a browser's does. */
async function unreachableFetch() {
  throw new TypeError("Failed to fetch");
}

/** A client in WebSocket-only mode (no RTCPeerConnection) wired to a FakeServer. */
function wsClient(extra = {}) {
  const server = new FakeServer();
  const client = new VoiceClient({
    url: URL, createWebSocket: server.factory, createPeerConnection: null, logger: null,
    reconnect: { baseMs: 1, maxMs: 4, jitter: 0 }, fetch: unreachableFetch, ...extra,
  });
  const states = recordEvents(client, ["state"]);
  return { server, client, states: () => states.map(([, d]) => d.state) };
}

async function connected(id = "s1", extra = {}) {
  const ctx = wsClient(extra);
  const done = ctx.client.connect();
  ctx.socket = await ctx.server.acceptReady(id);
  await done;
  return ctx;
}

test("connect waits for ready before it resolves", async () => {
  const { server, client, states } = wsClient();
  let resolved = false;
  const done = client.connect().then(() => { resolved = true; });
  const socket = await server.next();
  socket.accept();
  await new Promise((r) => setImmediate(r));
  assert.equal(resolved, false, "open alone is not connected");
  assert.equal(client.state, State.CONNECTING);
  socket.push({ type: "ready", id: "abc", protocolVersion: 1 });
  await done;
  assert.equal(client.sessionId, "abc");
  assert.equal(client.transport, "websocket");
  assert.deepEqual(states(), ["connecting", "connected"]);
  assert.equal(socket.url, URL);
  client.close();
});

test("the playbook goes in the query string", async () => {
  const { server, client } = wsClient({ playbook: "dental clinic" });
  const done = client.connect();
  const socket = await server.acceptReady("p");
  assert.equal(socket.url, `${URL}?playbook=dental%20clinic`);
  await done;
  client.close();
});

test("an unreachable server rejects with CONNECTION_FAILED and closes", async () => {
  const { server, client, states } = wsClient();
  const errors = recordEvents(client, ["error"]);
  const done = client.connect();
  (await server.next()).refuse();
  await assert.rejects(done, (err) => err.code === "CONNECTION_FAILED" && /unreachable/.test(err.message));
  assert.deepEqual(states(), ["connecting", "closed"]);
  assert.equal(errors.length, 1);
  assert.equal(errors[0][1].code, "CONNECTION_FAILED");
});

test("a server that runs but refuses this page's origin: ORIGIN_REFUSED, not unreachable", async () => {
  const asked = [];
  const { server, client } = wsClient({
    pageOrigin: "https://shop.example",
    // the server answers /health, but with CORS only to origins it allows (this one is not)
    fetch: async (url, init) => {
      asked.push([url, init.mode]);
      if (init.mode === "cors") throw new TypeError("Failed to fetch");
      return { type: "opaque", status: 0 };
    },
  });
  const done = client.connect();
  (await server.next()).refuse();
  await assert.rejects(done, (err) => err.code === "ORIGIN_REFUSED"
    && err.message.includes("https://shop.example") && err.message.includes("allowed_origins")
    && err.recoverable === false);
  assert.deepEqual(asked, [["http://127.0.0.1:8787/health", "cors"],
    ["http://127.0.0.1:8787/health", "no-cors"]]);
});

test("a server that runs and allows the origin but refuses the socket: REFUSED", async () => {
  const { server, client } = wsClient({
    fetch: async () => ({ type: "cors", status: 200, ok: true }),
  });
  const done = client.connect();
  (await server.next()).refuse();
  await assert.rejects(done, (err) => err.code === "REFUSED" && err.recoverable === true);
});

test("a socket that closes before ready fails fast", async () => {
  const { server, client } = wsClient({ timeoutMs: 60000 });
  const done = client.connect();
  const socket = await server.next();
  socket.accept();
  socket.drop();
  await assert.rejects(done, (err) => err.code === "CONNECTION_FAILED");
  assert.equal(client.state, State.CLOSED);
});

test("no ready within the timeout is a TIMEOUT", async () => {
  const { server, client } = wsClient({ timeoutMs: 20 });
  const done = client.connect();
  (await server.next()).accept();
  await assert.rejects(done, (err) => err.code === "TIMEOUT");
  assert.equal(client.state, State.CLOSED);
});

test("payload messages become events with the message as detail", async () => {
  const { client, socket } = await connected();
  const types = ["speech-start", "speech-end", "transcript", "llm-chunk", "llm", "tts-start",
    "tts-complete", "tts-cancelled", "tool-call-start", "tool-call-end", "stage-change"];
  const seen = recordEvents(client, [...types, "error"]);
  const sent = [
    { type: "speech-start" }, { type: "speech-end" },
    { type: "transcript", text: "Book a table", isFinal: true },
    { type: "llm-chunk", content: "Sure", done: false }, { type: "llm", text: "Sure." },
    { type: "tts-start" }, { type: "tts-complete" }, { type: "tts-cancelled" },
    { type: "tool-call-start", name: "book", callId: "c1", arguments: { n: 2 } },
    { type: "tool-call-end", callId: "c1", result: { ok: true }, durationMs: 12 },
    { type: "stage-change", from: "greeting", to: "booking", reason: "tool_result" },
  ];
  for (const m of sent) socket.push(m);
  socket.push("not json");
  socket.push({ type: "from-the-future", x: 1 });
  socket.push({ notype: true });
  socket.push({ type: "error", code: "LLM_TIMEOUT", message: "the model took too long" });
  assert.deepEqual(seen.slice(0, sent.length), sent.map((m) => [m.type, m]));
  assert.equal(seen.length, sent.length + 1);
  const [kind, err] = seen.at(-1);
  assert.equal(kind, "error");
  assert.equal(err.code, "LLM_TIMEOUT");
  assert.equal(err.message, "the model took too long");
  assert.equal(err.error.code, "LLM_TIMEOUT");
  assert.equal(client.state, State.CONNECTED);
  client.close();
});

test("pings carry a timestamp on the heartbeat period", async () => {
  const { client, socket } = await connected("s1", { pingIntervalMs: 5 });
  const ping = await socket.receive((m) => m.type === "ping");
  assert.equal(typeof ping.timestamp, "number");
  assert.ok(Math.abs(ping.timestamp - Date.now()) < 5000);
  socket.push({ type: "pong", timestamp: ping.timestamp });
  await socket.receive((m) => m.type === "ping");
  client.close();
});

test("silence from the server past deadAfterMs triggers a reconnect", async () => {
  const { client, server } = await connected("s1", { pingIntervalMs: 5, deadAfterMs: 1 });
  await nextEvent(client, "state", (d) => d.state === "reconnecting");
  await server.next();
  client.close();
});

test("reconnect: backoff, reconnect{sessionId} right after ready, queued sends after", async () => {
  const { client, server, socket, states } = await connected("first");
  const reconnected = nextEvent(client, "reconnected");
  socket.drop();
  assert.equal(client.state, State.RECONNECTING);
  client.sendAttachments([{ data: "data:image/png;base64,AAAA", mimeType: "image/png" }]);
  const again = await server.next();
  again.accept();
  assert.deepEqual(again.sent, [], "nothing is sent before ready");
  again.push({ type: "ready", id: "second", protocolVersion: 1 });
  const first = await again.receive();
  assert.deepEqual(first, { type: "reconnect", sessionId: "first" });
  again.push({ type: "reconnect-ack", success: true, sessionId: "first", historyRecovered: true });
  assert.deepEqual(await reconnected, { sessionId: "first", historyRecovered: true });
  await waitFor(() => client.state === State.CONNECTED);
  assert.equal(client.sessionId, "first");
  assert.deepEqual(again.sent.map((m) => m.type), ["reconnect", "attachments"]);
  assert.deepEqual(states(), ["connecting", "connected", "reconnecting", "connected"]);
  client.close();
});

test("a failed reconnect keeps the new session id", async () => {
  const { client, server, socket } = await connected("old");
  socket.drop();
  const again = await server.acceptReady("new");
  await again.receive((m) => m.type === "reconnect");
  again.push({ type: "reconnect-ack", success: false, sessionId: "old", historyRecovered: false });
  const info = await nextEvent(client, "reconnected");
  assert.deepEqual(info, { sessionId: "new", historyRecovered: false });
  client.close();
});

test("a reconnect refused with SESSION_NOT_FOUND goes on with the new session, quietly", async () => {
  const { client, server, socket } = await connected("old");
  const errors = recordEvents(client, ["error"]);
  socket.drop();
  const again = await server.acceptReady("new");
  await again.receive((m) => m.type === "reconnect");
  again.push({ type: "error", code: "SESSION_NOT_FOUND", message: "unknown session" });
  const info = await nextEvent(client, "reconnected");
  assert.deepEqual(info, { sessionId: "new", historyRecovered: false });
  await waitFor(() => client.state === State.CONNECTED);
  assert.deepEqual(errors, []);
  again.push({ type: "error", code: "SESSION_EXPIRED", message: "later, it is an error" });
  assert.equal(errors.length, 1);
  client.close();
});

test("reconnect retries with backoff, then gives up with RECONNECT_FAILED", async () => {
  const { client, server, socket, states } = await connected("s", {
    reconnect: { baseMs: 1, maxMs: 2, jitter: 0, maxRetries: 3 },
  });
  const failed = nextEvent(client, "error", (d) => d.code === "RECONNECT_FAILED");
  socket.drop();
  for (let i = 0; i < 3; i++) (await server.next()).refuse();
  await failed;
  assert.equal(server.sockets.length, 4);
  assert.deepEqual(states(), ["connecting", "connected", "reconnecting", "closed"]);
});

test("a reconnect attempt that fails is retried and then succeeds", async () => {
  const { client, server, socket } = await connected("s");
  socket.drop();
  (await server.next()).refuse();
  const third = await server.acceptReady("t");
  await third.receive((m) => m.type === "reconnect" && m.sessionId === "s");
  third.push({ type: "reconnect-ack", success: true, sessionId: "s", historyRecovered: true });
  await waitFor(() => client.state === State.CONNECTED);
  assert.equal(client.backoff.attempt, 0, "backoff resets once connected");
  client.close();
});

test("close() is idempotent and stops everything", async () => {
  const { client, socket, states, server } = await connected("s", { pingIntervalMs: 1 });
  client.close();
  client.close();
  assert.deepEqual(states(), ["connecting", "connected", "closed"]);
  assert.equal(socket.closedByClient, 1000);
  assert.throws(() => client.send({ type: "ping", timestamp: 1 }), (e) => e.code === "CLOSED");
  assert.equal(server.sockets.length, 1, "no reconnect after close");
});

test("close() during a reconnect backoff cancels it", async () => {
  const { client, socket, server } = await connected("s", {
    reconnect: { baseMs: 10, maxMs: 10, jitter: 0 },
  });
  socket.drop();
  client.close();
  assert.equal(client.state, State.CLOSED);
  const late = await Promise.race([server.next().then(() => "opened"),
    new Promise((r) => setTimeout(r, 40, "nothing"))]);
  assert.equal(late, "nothing");
});

test("startMic reports MIC_DENIED when permission is refused", async () => {
  const denied = Object.assign(new Error("Permission denied"), { name: "NotAllowedError" });
  const { client } = await connected("s", { getUserMedia: async () => { throw denied; } });
  const error = nextEvent(client, "error");
  await assert.rejects(client.startMic(), (e) => e.code === "MIC_DENIED");
  assert.equal((await error).code, "MIC_DENIED");
  client.close();
});

test("two startMic calls at once ask for the microphone once", async () => {
  let asked = 0;
  const mic = fakeMicStream();
  const { client } = await connected("s", {
    getUserMedia: async () => { asked += 1; return mic; },
    createAudioContext: () => { throw new Error("no audio in node"); },
  });
  const seen = recordEvents(client, ["mic", "error"]);
  await Promise.all([client.startMic(), client.startMic()]);
  assert.equal(asked, 1);
  assert.equal(client.micStream, mic);
  assert.deepEqual(seen.map(([t, d]) => [t, d.active ?? d.code]),
    [["mic", true], ["error", "MIC_UNAVAILABLE"]], "no Web Audio: the fallback cannot record");
  client.close();
  assert.equal(mic.track.stopped, true, "close() releases the microphone");
});

test("startMic without mediaDevices reports MIC_UNAVAILABLE", async () => {
  const { client } = await connected("s", { getUserMedia: null });
  client._getUserMedia = null;
  await assert.rejects(client.startMic(), (e) => e.code === "MIC_UNAVAILABLE");
  client.close();
});

// --- WebRTC path ----------------------------------------------------------------------------

function rtcClient(extra = {}) {
  const server = new FakeServer();
  const peers = peerFactory();
  const mic = fakeMicStream();
  const client = new VoiceClient({
    url: URL, createWebSocket: server.factory, createPeerConnection: peers.create, logger: null,
    getUserMedia: async () => mic, createAudioContext: () => { throw new Error("no audio"); },
    reconnect: { baseMs: 1, maxMs: 4, jitter: 0 }, fetch: unreachableFetch, ...extra,
  });
  return { server, peers, mic, client };
}

/** Play the server's side of the handshake: ready, answer the offer, open the channel. */
async function rtcHandshake(server, peers, id, iceServers) {
  const socket = await server.acceptReady(id, iceServers ? { iceServers } : {});
  const offer = await socket.receive((m) => m.type === "offer");
  const pc = await peers.next();
  socket.push({ type: "signal", signal: { type: "answer", sdp: "v=0 answer" } });
  const dc = pc.channels[0];
  await waitFor(() => pc.remoteDescription !== null);
  dc.open();
  return { socket, offer, pc, dc };
}

async function waitFor(cond, timeoutMs = 2000) {
  const start = Date.now();
  while (!cond()) {
    if (Date.now() - start > timeoutMs) throw new Error("condition not met");
    await new Promise((r) => setImmediate(r));
  }
}

test("WebRTC: server iceServers, non-trickle offer, data channel 'data', transport webrtc", async () => {
  const { server, peers, client } = rtcClient();
  const done = client.connect();
  const ice = [{ urls: "stun:127.0.0.1:3478" }];
  const { offer, pc, dc } = await rtcHandshake(server, peers, "r1", ice);
  await done;
  assert.deepEqual(pc.config, { iceServers: ice });
  assert.deepEqual(offer, { type: "offer", signal: { type: "offer", sdp: "v=0 offer 1 tracks=0" } });
  assert.equal(dc.label, "data");
  assert.equal(client.transport, "webrtc");
  assert.deepEqual(pc.remoteDescription, { type: "answer", sdp: "v=0 answer" });
  client.close();
  assert.equal(pc.closed, true);
});

test("WebRTC: configured iceServers win over the server's", async () => {
  const mine = [{ urls: "turn:127.0.0.1:3478", username: "u", credential: "p" }];
  const { server, peers, client } = rtcClient({ iceServers: mine });
  const done = client.connect();
  const { pc } = await rtcHandshake(server, peers, "r1", [{ urls: "stun:127.0.0.1:1" }]);
  await done;
  assert.deepEqual(pc.config.iceServers, mine);
  client.close();
});

test("WebRTC: messages on both channels are delivered exactly once, in order", async () => {
  const { server, peers, client } = rtcClient();
  const done = client.connect();
  const { socket, dc } = await rtcHandshake(server, peers, "r1");
  await done;
  const seen = [];
  client.addEventListener("message", (e) => seen.push(e.detail));
  const msgs = [{ type: "speech-start" }, { type: "transcript", text: "hi", isFinal: true },
    { type: "llm-chunk", content: "Hel", done: false }, { type: "llm-chunk", content: "lo", done: true },
    { type: "tts-start" }, { type: "tts-start" }];
  // the data channel leads on some, the WebSocket on others
  dc.push(msgs[0]); socket.push(msgs[0]);
  socket.push(msgs[1]); socket.push(msgs[2]); dc.push(msgs[1]); dc.push(msgs[2]);
  dc.push(msgs[3]); dc.push(msgs[4]); dc.push(msgs[5]);
  socket.push(msgs[3]); socket.push(msgs[4]); socket.push(msgs[5]);
  assert.deepEqual(seen, msgs);
  client.close();
});

test("WebRTC: the mic is added as a track and re-offered", async () => {
  const { server, peers, client, mic } = rtcClient();
  const done = client.connect();
  const { socket, pc } = await rtcHandshake(server, peers, "r1");
  await done;
  const started = client.startMic();
  const reoffer = await socket.receive((m) => m.type === "offer");
  assert.equal(reoffer.signal.sdp, "v=0 offer 2 tracks=1");
  socket.push({ type: "signal", signal: { type: "answer", sdp: "v=0 answer 2" } });
  await started;
  assert.equal(pc.senders[0].track, mic.track);
  client.stopMic();
  assert.equal(mic.track.stopped, true);
  assert.equal(pc.senders.length, 0);
  client.close();
});

test("WebRTC: after a reconnect the session is resumed, then re-offered and the mic re-attached", async () => {
  const { server, peers, client, mic } = rtcClient();
  const done = client.connect();
  const first = await rtcHandshake(server, peers, "r1");
  await done;
  const micOn = client.startMic();
  await first.socket.receive((m) => m.type === "offer");
  first.socket.push({ type: "signal", signal: { type: "answer", sdp: "a2" } });
  await micOn;

  first.socket.drop();
  const socket = await server.acceptReady("r2");
  const resume = await socket.receive();
  assert.deepEqual(resume, { type: "reconnect", sessionId: "r1" });
  socket.push({ type: "reconnect-ack", success: true, sessionId: "r1", historyRecovered: true });
  const offer1 = await socket.receive((m) => m.type === "offer");
  assert.equal(offer1.signal.sdp, "v=0 offer 1 tracks=0", "a fresh peer connection offers first");
  const pc = await peers.next();
  socket.push({ type: "signal", signal: { type: "answer", sdp: "b1" } });
  await waitFor(() => pc.remoteDescription !== null);
  pc.channels[0].open();
  const offer2 = await socket.receive((m) => m.type === "offer");
  assert.equal(offer2.signal.sdp, "v=0 offer 2 tracks=1", "then the mic comes back");
  socket.push({ type: "signal", signal: { type: "answer", sdp: "b2" } });
  await waitFor(() => pc.remoteDescription?.sdp === "b2");
  assert.equal(pc.senders[0].track, mic.track);
  assert.equal(first.pc.closed, true);
  assert.deepEqual(socket.sent.map((m) => m.type), ["reconnect", "offer", "offer"]);
  client.close();
});

test("WebRTC: WEBRTC_UNAVAILABLE from the server falls back to the WebSocket quietly", async () => {
  const { server, peers, client } = rtcClient();
  const errors = recordEvents(client, ["error"]);
  const transports = recordEvents(client, ["transport"]);
  const done = client.connect();
  const socket = await server.acceptReady("r1");
  await socket.receive((m) => m.type === "offer");
  socket.push({ type: "error", code: "WEBRTC_UNAVAILABLE", message: "no aiortc" });
  await done;
  assert.equal(client.transport, "websocket");
  assert.equal(peers.peers[0].closed, true);
  assert.deepEqual(errors, []);
  // the page says why audio goes over the WebSocket
  assert.equal(transports.at(-1)[1].mode, "websocket");
  assert.match(transports.at(-1)[1].reason, /WebRTC could not connect/);
  const seen = recordEvents(client, ["transcript"]);
  socket.push({ type: "transcript", text: "over the socket", isFinal: true });
  assert.equal(seen.length, 1);
  client.close();
});

test("WebRTC: a data channel that closes while connected triggers a reconnect", async () => {
  const { server, peers, client } = rtcClient();
  const done = client.connect();
  const { dc } = await rtcHandshake(server, peers, "r1");
  await done;
  dc.close();
  assert.equal(client.state, State.RECONNECTING);
  await server.next();
  client.close();
});

test("attachments prefer the data channel", async () => {
  const { server, peers, client } = rtcClient();
  const done = client.connect();
  const { dc, socket } = await rtcHandshake(server, peers, "r1");
  await done;
  const att = [{ data: "data:image/jpeg;base64,AA==", mimeType: "image/jpeg", alt: "cam" }];
  client.sendAttachments(att);
  assert.deepEqual(dc.sent, [{ type: "attachments", attachments: att }]);
  assert.equal(socket.sent.filter((m) => m.type === "attachments").length, 0);
  assert.throws(() => client.sendAttachments([{ nodata: 1 }]), TypeError);
  client.close();
});
