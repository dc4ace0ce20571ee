// page/conversation.js: the conversation as bubbles, one turn at a time: the user's words
// (interim, then final), a "thinking" placeholder, the agent's streamed answer, "interrupted"
// marks and per-turn latency. Fed by app.js with the client's events.

import { $ } from "./dom.js";

/** The phases the indicator names (others hide it). */
const PHASE_LABELS = {
  listening: "Listening", "user-speaking": "You're speaking", thinking: "Thinking…",
  "agent-speaking": "Speaking",
};

export class ConversationView {
  /** @param {() => string | undefined} phase what the conversation is doing (the client's) */
  constructor(phase) {
    this.phase = phase;
    /** {user: li|null, agent: li|null, speechEndAt, firstReplyAt, latency} */
    this.turn = null;
    /** the latest turn with an agent bubble (barge-in marks it) */
    this.agentTurn = null;
  }

  /** Forget the turns (a new session); `clear` also empties the view. */
  reset({ clear = false } = {}) {
    this.turn = null;
    this.agentTurn = null;
    if (!clear) return;
    $("conversation").replaceChildren();
    $("announce").textContent = "";
    $("empty").hidden = false;
  }

  /** The user's speech ended (for the latency measured in the page). */
  speechEnded() {
    if (this.turn) this.turn.speechEndAt = performance.now();
  }

  bubble(role) {
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

  newTurn() {
    this.turn = { user: null, agent: null, speechEndAt: null, firstReplyAt: null, latency: null };
    return this.turn;
  }

  onSpeechStart() {
    // a fresh turn begins, unless the previous user bubble is still an empty placeholder
    const t = this.turn;
    if (t && t.user && !t.agent && t.user.classList.contains("pending")) return;
    const turn = this.newTurn();
    turn.user = this.bubble("user");
    turn.user.classList.add("interim", "pending");
    turn.user.querySelector(".text").textContent = "…";
  }

  onTranscript(text, isFinal) {
    let turn = this.turn;
    if (!turn || turn.agent || !turn.user || !turn.user.classList.contains("interim")) {
      turn = this.newTurn();
      turn.user = this.bubble("user");
    }
    const li = turn.user;
    li.classList.remove("pending");
    li.classList.toggle("interim", !isFinal);
    li.querySelector(".text").textContent = text;
    if (isFinal) {
      this.announce("You", text);
      this.showThinking();
    }
    if (isFinal && !turn.speechEndAt) turn.speechEndAt = performance.now();
  }

  agentBubble() {
    let turn = this.turn ?? this.newTurn();
    if (turn.agent && turn.agent.classList.contains("done")) turn = this.newTurn();
    if (turn.user && turn.user.classList.contains("pending")) {
      turn.user.remove();
      turn.user = null;
    }
    if (!turn.agent) {
      turn.agent = this.bubble("agent");
      turn.agent.classList.add("streaming");
      turn.firstReplyAt = performance.now();
    }
    this.agentTurn = turn;
    return turn.agent;
  }

  /** Say a finished utterance once to screen readers (the bubbles themselves are not live). */
  announce(who, text) {
    if (text) $("announce").textContent = `${who}: ${text}`;
  }

  /** What the conversation is doing (llmrtc.js `phase`): an indicator, and while the agent
   * thinks a placeholder bubble that its first words replace. */
  onPhase(phase) {
    const el = $("phase");
    el.dataset.phase = phase;
    el.textContent = PHASE_LABELS[phase] ?? "";
    el.hidden = !PHASE_LABELS[phase];
    document.body.dataset.phase = phase;
    const pending = this.turn?.agent;
    if (phase === "thinking") {
      this.showThinking();
    } else if (phase !== "agent-speaking" && pending?.classList.contains("thinking")) {
      pending.remove(); // the turn ended without an answer (an error, or the user spoke on)
      this.turn.agent = null;
    }
  }

  /** The placeholder goes under the user's final words (which may arrive just after). */
  showThinking() {
    const t = this.turn;
    if (this.phase() !== "thinking" || !t?.user || t.agent
      || t.user.classList.contains("interim") || t.user.classList.contains("pending")) return;
    const li = this.agentBubble();
    li.classList.add("thinking");
    li.querySelector(".text").textContent = "…";
  }

  onAgentText(text, complete) {
    const li = this.agentBubble();
    const p = li.querySelector(".text");
    if (li.classList.contains("thinking")) {
      li.classList.remove("thinking");
      p.textContent = "";
    }
    if (complete) {
      // the full text replaces the streamed one (unless it was cut: keep what was heard)
      if (!li.classList.contains("interrupted")) p.textContent = text;
      li.classList.remove("streaming");
      this.announce("Agent", p.textContent);
    } else {
      p.textContent += text;
    }
    li.scrollIntoView({ block: "end" });
  }

  onTtsStart() {
    const li = this.agentBubble();
    li.classList.add("speaking");
    const turn = this.agentTurn;
    if (turn.speechEndAt && !turn.latency) {
      turn.latency = { clientMs: Math.round(performance.now() - turn.speechEndAt) };
      this.renderLatency(turn);
    }
  }

  finishAgent(interrupted) {
    // the user's speech-start comes before tts-cancelled (spec: "Barge-in"), so the reply to mark
    // belongs to the previous turn: the last one that had an agent bubble
    const li = this.agentTurn?.agent;
    if (!li || (li.classList.contains("done") && !interrupted)) return;
    li.classList.remove("speaking", "streaming");
    li.classList.add("done");
    if (interrupted && !li.classList.contains("interrupted")) {
      li.classList.add("interrupted");
      const mark = document.createElement("span");
      mark.className = "mark";
      mark.textContent = "interrupted";
      this.metaLine(li).append(mark);
    }
  }

  /** The small line under an agent bubble holding its latency and "interrupted" mark. */
  metaLine(li) {
    let meta = li.querySelector(".meta");
    if (!meta) {
      meta = document.createElement("div");
      meta.className = "meta";
      li.append(meta);
    }
    return meta;
  }

  onMetrics(m) {
    // server-measured per-turn latency (our additive `metrics` / `turn-metrics` message)
    const turn = this.agentTurn;
    if (!turn || !turn.agent) return;
    turn.latency = { ...(turn.latency ?? {}), server: m };
    this.renderLatency(turn);
  }

  renderLatency(turn) {
    const li = turn.agent;
    if (!li || !turn.latency) return;
    let el = li.querySelector(".latency");
    if (!el) {
      el = document.createElement("span");
      el.className = "latency";
      this.metaLine(li).prepend(el);
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
}
