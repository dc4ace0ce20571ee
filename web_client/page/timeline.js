// page/timeline.js: the side timeline: tool calls (running, then their outcome), stage changes
// and notes such as a reconnect.

import { $ } from "./dom.js";

export function addTimeline(kind, text, detail) {
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

export function onToolStart(items, { name, callId, arguments: args }) {
  const li = addTimeline("tool running", `${name}()`, short(args ?? {}));
  items.set(callId, li);
}

export function onToolEnd(items, { callId, result, error, durationMs }) {
  const li = items.get(callId) ?? addTimeline("tool", "tool call");
  items.delete(callId);
  li.classList.remove("running");
  li.classList.add(error ? "failed" : "ok");
  const out = document.createElement("span");
  out.className = "outcome";
  const took = typeof durationMs === "number" ? ` · ${Math.round(durationMs)} ms` : "";
  out.textContent = error ? `✗ ${short(error)}${took}` : `✓ ${short(result)}${took}`;
  li.append(out);
}

export function onStageChange({ from, to, reason }) {
  addTimeline("stage-change", `${from || "start"} → ${to}`, reason || "");
  const stage = $("stage");
  stage.hidden = false;
  stage.textContent = to;
}

/** Empty the timeline (a new conversation). */
export function clearTimeline() {
  $("timeline").replaceChildren();
  $("timeline-empty").hidden = false;
  $("stage").hidden = true;
}
