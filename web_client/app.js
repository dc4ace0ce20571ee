// The bundled page (GET /): one Talk button, a text box, a mic meter, the conversation as bubbles, a timeline
// of tool calls and stage changes, connection state and per-turn latency. Uses llmrtc.js.
//
// Query parameters (handy for development and tests):
//   ?ws=ws://host:port/ws   another signaling URL (default: the server that served this page)
//   ?playbook=ID            start with this playbook
//   ?transport=ws           skip WebRTC, use the WebSocket fallback
//   ?echoCancellation=0     turn the browser's echo cancellation off (tests with a fake mic)

// the server serves this page at /, app.js and style.css beside it, the client at /client/
import { State, VoiceClient } from "./client/llmrtc.js";

const $ = (id) => document.getElementById(id);
const params = new URLSearchParams(location.search);

/** ws(s)://<this host>/ws, relative to the page so a path prefix keeps working. */
function defaultWsUrl() {
  const url = new URL("ws", location.href);
  url.protocol = location.protocol === "https:" ? "wss:" : "ws:";
  url.search = "";
  url.hash = "";
  return url.href;
}

const PHASE_LABELS = {
  listening: "Listening", "user-speaking": "You're speaking", thinking: "Thinking…",
  "agent-speaking": "Speaking",
};

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
  turn: null, // {user: li|null, agent: li|null, speechEndAt, firstReplyAt}
  agentTurn: null, // the latest turn with an agent bubble (barge-in marks it)
  toolItems: new Map(),
};
window.voiceApp = app; // for tests and the curious

// --- notices ----------------------------------------------------------------------------------

let noticeTimer = null;

function showNotice(kind, title, body, { retry = false, autoHideMs = 0 } = {}) {
  const n = $("notice");
  n.dataset.kind = kind;
  $("notice-title").textContent = title;
  $("notice-body").textContent = body;
  $("retry").hidden = !retry;
  n.hidden = false;
  clearTimeout(noticeTimer);
  if (autoHideMs) noticeTimer = setTimeout(hideNotice, autoHideMs);
}

function hideNotice() {
  $("notice").hidden = true;
  delete $("notice").dataset.kind;
}

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
    } else if (state === State.CONNECTED && $("notice").dataset.kind === "reconnecting") {
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
  on("phase", ({ phase }) => onPhase(phase));
  on("speech-start", onSpeechStart);
  on("speech-end", () => {
    if (app.turn) app.turn.speechEndAt = performance.now();
  });
  on("transcript", ({ text, isFinal }) => onTranscript(text, isFinal !== false));
  on("llm-chunk", ({ content }) => onAgentText(content ?? "", false));
  on("assistant-transcript", ({ text }) => onAgentText(text ?? "", true));
  on("llm", ({ text }) => onAgentText(text ?? "", true));
  on("tts-start", onTtsStart);
  on("tts-complete", () => finishAgent(false));
  on("tts-cancelled", () => finishAgent(true));
  on("tool-call-start", onToolStart);
  on("tool-call-end", onToolEnd);
  on("stage-change", onStageChange);
  on("metrics", onMetrics);
  on("turn-metrics", onMetrics);
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
    if ($("notice").dataset.kind?.startsWith("mic")) hideNotice();
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

// --- conversation -----------------------------------------------------------------------------

function bubble(role) {
  $("empty").hidden = true;
  const li = document.createElement("li");
  li.className = `bubble ${role}`;
  const text = document.createElement("p");
  text.className = "text";
  li.append(text);
  $("conversation").append(li);
  li.scrollIntoView({ block: "end", behavior: "smooth" });
  return li;
}

function newTurn() {
  app.turn = { user: null, agent: null, speechEndAt: null, firstReplyAt: null, latency: null };
  return app.turn;
}

function onSpeechStart() {
  // a fresh turn begins, unless the previous user bubble is still an empty placeholder
  const t = app.turn;
  if (t && t.user && !t.agent && t.user.classList.contains("pending")) return;
  const turn = newTurn();
  turn.user = bubble("user");
  turn.user.classList.add("interim", "pending");
  turn.user.querySelector(".text").textContent = "…";
}

function onTranscript(text, isFinal) {
  let turn = app.turn;
  if (!turn || turn.agent || !turn.user || !turn.user.classList.contains("interim")) {
    turn = newTurn();
    turn.user = bubble("user");
  }
  const li = turn.user;
  li.classList.remove("pending");
  li.classList.toggle("interim", !isFinal);
  li.querySelector(".text").textContent = text;
  if (isFinal) {
    announce("You", text);
    showThinking();
  }
  if (isFinal && !turn.speechEndAt) turn.speechEndAt = performance.now();
}

function agentBubble() {
  let turn = app.turn ?? newTurn();
  if (turn.agent && turn.agent.classList.contains("done")) turn = newTurn();
  if (turn.user && turn.user.classList.contains("pending")) {
    turn.user.remove();
    turn.user = null;
  }
  if (!turn.agent) {
    turn.agent = bubble("agent");
    turn.agent.classList.add("streaming");
    turn.firstReplyAt = performance.now();
  }
  app.agentTurn = turn;
  return turn.agent;
}

/** Say a finished utterance once to screen readers (the bubbles themselves are not live). */
function announce(who, text) {
  if (text) $("announce").textContent = `${who}: ${text}`;
}

/** What the conversation is doing (llmrtc.js `phase`): an indicator, and while the agent
 * thinks a placeholder bubble that its first words replace. */
function onPhase(phase) {
  const el = $("phase");
  el.dataset.phase = phase;
  el.textContent = PHASE_LABELS[phase] ?? "";
  el.hidden = !PHASE_LABELS[phase];
  document.body.dataset.phase = phase;
  const pending = app.turn?.agent;
  if (phase === "thinking") {
    showThinking();
  } else if (phase !== "agent-speaking" && pending?.classList.contains("thinking")) {
    pending.remove(); // the turn ended without an answer (an error, or the user spoke on)
    app.turn.agent = null;
  }
}

/** The placeholder goes under the user's final words (which may arrive just after). */
function showThinking() {
  const t = app.turn;
  if (app.client?.phase !== "thinking" || !t?.user || t.agent
    || t.user.classList.contains("interim") || t.user.classList.contains("pending")) return;
  const li = agentBubble();
  li.classList.add("thinking");
  li.querySelector(".text").textContent = "…";
}

function onAgentText(text, complete) {
  const li = agentBubble();
  const p = li.querySelector(".text");
  if (li.classList.contains("thinking")) {
    li.classList.remove("thinking");
    p.textContent = "";
  }
  if (complete) {
    // the full text replaces the streamed one (unless it was cut: keep what was heard)
    if (!li.classList.contains("interrupted")) p.textContent = text;
    li.classList.remove("streaming");
    announce("Agent", p.textContent);
  } else {
    p.textContent += text;
  }
  li.scrollIntoView({ block: "end" });
}

function onTtsStart() {
  const li = agentBubble();
  li.classList.add("speaking");
  const turn = app.agentTurn;
  if (turn.speechEndAt && !turn.latency) {
    turn.latency = { clientMs: Math.round(performance.now() - turn.speechEndAt) };
    renderLatency(turn);
  }
}

function finishAgent(interrupted) {
  // the user's speech-start comes before tts-cancelled (spec: "Barge-in"), so the reply to mark
  // belongs to the previous turn: the last one that had an agent bubble
  const li = app.agentTurn?.agent;
  if (!li || (li.classList.contains("done") && !interrupted)) return;
  li.classList.remove("speaking", "streaming");
  li.classList.add("done");
  if (interrupted && !li.classList.contains("interrupted")) {
    li.classList.add("interrupted");
    const mark = document.createElement("span");
    mark.className = "mark";
    mark.textContent = "interrupted";
    metaLine(li).append(mark);
  }
}

/** The small line under an agent bubble holding its latency and "interrupted" mark. */
function metaLine(li) {
  let meta = li.querySelector(".meta");
  if (!meta) {
    meta = document.createElement("div");
    meta.className = "meta";
    li.append(meta);
  }
  return meta;
}

function onMetrics(m) {
  // server-measured per-turn latency (our additive `metrics` / `turn-metrics` message)
  const turn = app.agentTurn;
  if (!turn || !turn.agent) return;
  turn.latency = { ...(turn.latency ?? {}), server: m };
  renderLatency(turn);
}

function renderLatency(turn) {
  const li = turn.agent;
  if (!li || !turn.latency) return;
  let el = li.querySelector(".latency");
  if (!el) {
    el = document.createElement("span");
    el.className = "latency";
    metaLine(li).prepend(el);
  }
  const s = turn.latency.server;
  const ms = (v) => (typeof v === "number" ? `${Math.round(v)} ms` : null);
  if (s) {
    const parts = [
      ms(s.firstAudioMs ?? s.voiceToVoiceMs) && `reply ${ms(s.firstAudioMs ?? s.voiceToVoiceMs)}`,
      ms(s.endOfTurnMs) && `turn end ${ms(s.endOfTurnMs)}`,
      ms(s.sttMs) && `STT ${ms(s.sttMs)}`,
      ms(s.llmTtftMs) && `LLM ${ms(s.llmTtftMs)}`,
      ms(s.ttsFirstAudioMs) && `TTS ${ms(s.ttsFirstAudioMs)}`,
    ].filter(Boolean);
    el.textContent = parts.join(" · ");
    el.title = "measured by the server" +
      (s.endOfTurn ? `; your turn was judged over: ${s.endOfTurn}` : "");
  } else {
    el.textContent = `reply ≈ ${turn.latency.clientMs} ms`;
    el.title = "from the end of your speech to the agent's first audio, measured in this page";
  }
}

// --- timeline ---------------------------------------------------------------------------------

function addTimeline(kind, text, detail) {
  $("timeline-empty").hidden = true;
  const li = document.createElement("li");
  li.className = `event ${kind}`;
  const time = document.createElement("time");
  time.textContent = new Date().toLocaleTimeString([], { hour: "2-digit", minute: "2-digit",
    second: "2-digit" });
  const label = document.createElement("span");
  label.className = "label";
  label.textContent = text;
  li.append(time, label);
  if (detail) {
    const d = document.createElement("code");
    d.className = "detail";
    d.textContent = detail;
    li.append(d);
  }
  $("timeline").append(li);
  li.scrollIntoView({ block: "nearest" });
  return li;
}

function short(value, max = 80) {
  let s;
  try {
    s = typeof value === "string" ? value : JSON.stringify(value);
  } catch {
    s = String(value);
  }
  return s && s.length > max ? `${s.slice(0, max - 1)}…` : s ?? "";
}

function onToolStart({ name, callId, arguments: args }) {
  const li = addTimeline("tool running", `${name}()`, short(args ?? {}));
  app.toolItems.set(callId, li);
}

function onToolEnd({ callId, result, error, durationMs }) {
  const li = app.toolItems.get(callId) ?? addTimeline("tool", "tool call");
  app.toolItems.delete(callId);
  li.classList.remove("running");
  li.classList.add(error ? "failed" : "ok");
  const out = document.createElement("span");
  out.className = "outcome";
  const took = typeof durationMs === "number" ? ` · ${Math.round(durationMs)} ms` : "";
  out.textContent = error ? `✗ ${short(error)}${took}` : `✓ ${short(result)}${took}`;
  li.append(out);
}

function onStageChange({ from, to, reason }) {
  addTimeline("stage-change", `${from || "start"} → ${to}`, reason || "");
  const stage = $("stage");
  stage.hidden = false;
  stage.textContent = to;
}

// --- playbooks --------------------------------------------------------------------------------

/** Fill the picker from GET /playbooks; hidden on 404 or with fewer than two playbooks. */
async function loadPlaybooks() {
  let list;
  let serverDefault;
  try {
    const res = await fetch(new URL("playbooks", location.href), {
      headers: { accept: "application/json" },
    });
    if (!res.ok) return;
    const body = await res.json();
    // voice_server answers {default, playbooks: [{id, description, ...}]}; a bare list works too
    list = Array.isArray(body) ? body : Array.isArray(body?.playbooks) ? body.playbooks : [];
    serverDefault = Array.isArray(body) ? undefined : body?.default;
  } catch {
    return;
  }
  const items = list.map((p) => (typeof p === "string" ? { id: p, name: p }
    : { id: String(p.id ?? p.name ?? ""), name: String(p.name ?? p.title ?? p.id ?? ""),
      description: p.description ?? "" })).filter((p) => p.id);
  if (items.length < 2) return;
  const select = $("playbook");
  if (serverDefault === null) {
    // the server runs without a playbook unless asked: offer that too
    items.unshift({ id: "", name: "No playbook", description: "the plain assistant" });
  }
  for (const p of items) {
    const opt = document.createElement("option");
    opt.value = p.id;
    opt.textContent = p.name;
    if (p.description) opt.title = p.description;
    select.append(opt);
  }
  if (app.playbook && items.some((p) => p.id === app.playbook)) select.value = app.playbook;
  else if (serverDefault && items.some((p) => p.id === serverDefault)) select.value = serverDefault;
  app.playbook = select.value;
  $("playbook-picker").hidden = false;
  select.addEventListener("change", async () => {
    app.playbook = select.value;
    const wasTalking = app.micOn;
    app.client?.close();
    app.client = null;
    app.turn = null;
    app.agentTurn = null;
    addTimeline("info", `Playbook: ${select.selectedOptions[0]?.textContent ?? app.playbook}`);
    const client = await connect();
    if (client && wasTalking) await toggleTalk();
  });
}

/** Clear the view and start a fresh session (the old one is left to expire on the server). */
async function newConversation() {
  const wasTalking = app.micOn;
  app.client?.close();
  app.client = null;
  app.turn = null;
  app.agentTurn = null;
  app.toolItems.clear();
  $("conversation").replaceChildren();
  $("timeline").replaceChildren();
  $("timeline-empty").hidden = false;
  $("stage").hidden = true;
  $("announce").textContent = "";
  $("empty").hidden = false;
  hideNotice();
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
app.ready = loadPlaybooks().then(connect);
