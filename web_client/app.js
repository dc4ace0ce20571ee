// The bundled page (GET /): one Talk button, a text box, a mic meter, the conversation as bubbles, a timeline
// of tool calls and stage changes, connection state and per-turn latency. Uses llmrtc.js.
// This module wires the client to the page; the page's parts are modules in page/
// (conversation, timeline, notices, playbooks), served at /page/<name>.
//
// Query parameters (handy for development and tests):
//   ?ws=ws://host:port/ws   another signaling URL (default: the server that served this page)
//   ?playbook=ID            start with this playbook
//   ?transport=ws           skip WebRTC, use the WebSocket fallback
//   ?echoCancellation=0     turn the browser's echo cancellation off (tests with a fake mic)

// the server serves this page at /, app.js and style.css beside it, the client at /client/
import { State, VoiceClient } from "./client/llmrtc.js";
import { ConversationView } from "./page/conversation.js";
import { $ } from "./page/dom.js";
import { hideNotice, noticeKind, showNotice } from "./page/notices.js";
import { loadPlaybooks } from "./page/playbooks.js";
import {
  addTimeline, clearTimeline, onStageChange, onToolEnd, onToolStart,
} from "./page/timeline.js";

const params = new URLSearchParams(location.search);

/** ws(s)://<this host>/ws, relative to the page so a path prefix keeps working. */
function defaultWsUrl() {
  const url = new URL("ws", location.href);
  url.protocol = location.protocol === "https:" ? "wss:" : "ws:";
  url.search = "";
  url.hash = "";
  return url.href;
}

const STATE_LABELS = {
  idle: "Idle", connecting: "Connecting…", connected: "Connected",
  reconnecting: "Reconnecting…", closed: "Disconnected",
};

const app = {
  wsUrl: params.get("ws") || defaultWsUrl(),
  playbook: params.get("playbook") || "",
  /** @type {VoiceClient | null} */
  client: null,
  micOn: false,
  conversation: new ConversationView(() => app.client?.phase), // the bubbles and their turns
  toolItems: new Map(), // callId -> its timeline item
};
const view = app.conversation;
window.voiceApp = app; // for tests and the curious

// --- notices ----------------------------------------------------------------------------------

function showUnreachable() {
  showNotice("unreachable", "Server unreachable.",
    `Can't reach the voice server at ${app.wsUrl}. Is it running (make serve)?`, { retry: true });
}

// --- connection -------------------------------------------------------------------------------

function setConnState(state) {
  const pill = $("conn");
  pill.dataset.state = state;
  pill.textContent = STATE_LABELS[state] ?? state;
  document.body.dataset.state = state;
  updateTalkButton();
}

function setTransport(mode) {
  const t = $("transport");
  t.hidden = !mode;
  t.textContent = mode === "webrtc" ? "WebRTC" : mode === "websocket" ? "WebSocket" : "";
  t.title = mode === "websocket" ? "WebRTC is unavailable: audio goes over the WebSocket" : "";
}

async function connect() {
  if (app.client && app.client.state !== State.CLOSED) return app.client;
  hideNotice();
  const client = new VoiceClient({
    url: app.wsUrl,
    playbook: app.playbook || undefined,
    webrtc: params.get("transport") === "ws" ? false : undefined,
    audioElement: $("agent-audio"),
    turnMetrics: true, // the reply latency shown is the server's measurement
    audioConstraints: params.get("echoCancellation") === "0"
      ? { echoCancellation: false, noiseSuppression: false, autoGainControl: false }
      : undefined,
  });
  app.client = client;
  wire(client);
  try {
    await client.connect();
  } catch (err) {
    if (app.client !== client) return null;
    if (err.code === "CONNECTION_FAILED" || err.code === "TIMEOUT") showUnreachable();
    else if (err.code === "ORIGIN_REFUSED") {
      showNotice("origin-refused", "This page is not allowed.",
        `The voice server at ${app.wsUrl} runs but does not accept pages from ` +
        `${location.origin}. Add that origin to its allowed_origins ` +
        "(--allowed-origins or VOICE_SERVER_ALLOWED_ORIGINS) and restart it.");
    } else if (err.code === "REFUSED") {
      showNotice("refused", "Connection refused.",
        "The voice server runs but refused the connection: it may be full or restarting, " +
        "or need a token. Try again in a moment.", { retry: true });
    } else if (err.code !== "CLOSED") showNotice("error", "Connection failed.", err.message, { retry: true });
    return null;
  }
  return client;
}

function wire(client) {
  const on = (type, fn) => client.addEventListener(type, (ev) => {
    if (app.client === client) fn(ev.detail);
  });
  on("state", ({ state }) => {
    setConnState(state);
    if (state === State.RECONNECTING) {
      showNotice("reconnecting", "Connection lost.", "Reconnecting…");
    } else if (state === State.CONNECTED && noticeKind() === "reconnecting") {
      hideNotice();
    }
    if (state === State.CLOSED) {
      setTransport(null);
      setMic(false);
    }
  });
  on("transport", ({ mode, reason }) => {
    setTransport(mode);
    if (mode === "websocket" && reason) {
      showNotice("webrtc-blocked", "WebRTC could not connect.",
        "This network or browser blocks WebRTC (or the server has none), so audio goes over " +
        "the WebSocket instead: it works, a little slower to answer, and talking over the " +
        "agent stops it only once you finish the sentence.", { autoHideMs: 12000 });
    }
  });
  on("reconnected", ({ historyRecovered }) => addTimeline("info",
    historyRecovered ? "Reconnected — conversation restored" : "Reconnected — new conversation"));
  on("mic", ({ active }) => setMic(active));
  on("phase", ({ phase }) => view.onPhase(phase));
  on("speech-start", () => view.onSpeechStart());
  on("speech-end", () => view.speechEnded());
  on("transcript", ({ text, isFinal }) => view.onTranscript(text, isFinal !== false));
  on("llm-chunk", ({ content }) => view.onAgentText(content ?? "", false));
  on("assistant-transcript", ({ text }) => view.onAgentText(text ?? "", true));
  on("llm", ({ text }) => view.onAgentText(text ?? "", true));
  on("tts-start", () => view.onTtsStart());
  on("tts-complete", () => view.finishAgent(false));
  on("tts-cancelled", () => view.finishAgent(true));
  on("tool-call-start", (msg) => onToolStart(app.toolItems, msg));
  on("tool-call-end", (msg) => onToolEnd(app.toolItems, msg));
  on("stage-change", onStageChange);
  on("metrics", (m) => view.onMetrics(m));
  on("turn-metrics", (m) => view.onMetrics(m));
  on("error", ({ code, message }) => {
    if (code === "CONNECTION_FAILED") return; // connect() shows "server unreachable"
    if (code === "RECONNECT_FAILED") {
      showNotice("unreachable", "Connection lost.",
        `The voice server at ${app.wsUrl} stopped answering.`, { retry: true });
    } else if (code === "MIC_DENIED") {
      showNotice("mic-denied", "Microphone blocked.",
        "Allow the microphone for this site (the icon in the address bar), then press Talk again.");
    } else if (code === "MIC_UNAVAILABLE") {
      showNotice("mic-unavailable", "No microphone.", message);
    } else {
      showNotice("error", `Error ${code}.`, message, { autoHideMs: 8000 });
    }
  });
}

// --- microphone -------------------------------------------------------------------------------

function setMic(on) {
  app.micOn = on;
  document.body.classList.toggle("mic-on", on);
  updateTalkButton();
}

function updateTalkButton() {
  const talk = $("talk");
  const state = app.client?.state ?? "idle";
  const busy = state === State.CONNECTING;
  talk.disabled = busy;
  talk.setAttribute("aria-pressed", String(app.micOn));
  $("talk-label").textContent = app.micOn ? "Stop" : busy ? "Connecting…" : "Talk";
  $("hint").textContent = app.micOn
    ? "Listening — just speak. Interrupt the agent whenever you like."
    : "Your microphone is only used while Talk is on.";
}

async function toggleTalk() {
  if (app.micOn) {
    app.client?.stopMic();
    return;
  }
  const client = await connect();
  if (!client) return;
  try {
    await client.startMic();
    if (noticeKind()?.startsWith("mic")) hideNotice();
  } catch {
    // the client's `error` event has already shown the message
  }
}

function meterLoop() {
  const level = app.micOn && app.client ? app.client.micLevel : 0;
  $("meter-fill").style.transform = `scaleX(${Math.min(1, level).toFixed(3)})`;
  requestAnimationFrame(meterLoop);
}

/** A typed message: a user turn like a spoken one (no microphone needed). */
async function sendTyped(event) {
  event.preventDefault();
  const input = $("typed");
  const text = input.value.trim();
  if (!text) return;
  const client = await connect();
  if (!client) return;
  try {
    client.sendText(text);
    input.value = "";
  } catch (err) {
    showNotice("error", "Not sent.", err.message, { autoHideMs: 8000 });
  }
}

// --- sessions ---------------------------------------------------------------------------------

/** Clear the view and start a fresh session (the old one is left to expire on the server). */
async function newConversation() {
  const wasTalking = app.micOn;
  app.client?.close();
  app.client = null;
  view.reset({ clear: true });
  app.toolItems.clear();
  clearTimeline();
  hideNotice();
  const client = await connect();
  if (client && wasTalking) await toggleTalk();
}

/** Another playbook was picked: a new session with it (the view is kept). */
async function switchPlaybook(id, label) {
  app.playbook = id;
  const wasTalking = app.micOn;
  app.client?.close();
  app.client = null;
  view.reset();
  addTimeline("info", `Playbook: ${label}`);
  const client = await connect();
  if (client && wasTalking) await toggleTalk();
}

// --- start ------------------------------------------------------------------------------------

app.connect = connect;
app.toggleTalk = toggleTalk;
$("talk").addEventListener("click", toggleTalk);
$("type-form").addEventListener("submit", sendTyped);
$("new-chat").addEventListener("click", newConversation);
app.newConversation = newConversation;
$("retry").addEventListener("click", () => {
  hideNotice();
  connect();
});
$("notice-close").addEventListener("click", hideNotice);
if (matchMedia("(max-width: 760px)").matches) $("timeline-box").open = false;
window.addEventListener("pagehide", () => app.client?.close());
setConnState("idle");
requestAnimationFrame(meterLoop);
app.ready = loadPlaybooks(app.playbook, switchPlaybook).then((playbook) => {
  app.playbook = playbook;
  return connect();
});
