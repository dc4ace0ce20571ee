// Test doubles for llmrtc.js in Node: a scripted WebSocket server side, a fake
// RTCPeerConnection with a data channel, and helpers that wait on events (never sleep).

/** Make an Event carrying extra fields (Node's Event has no `data`). */
export function makeEvent(type, fields = {}) {
  const ev = new Event(type);
  for (const [k, v] of Object.entries(fields)) Object.defineProperty(ev, k, { value: v });
  return ev;
}

/** Resolve with the first `type` event of `target` whose detail passes `pred`. */
export function nextEvent(target, type, pred = () => true, timeoutMs = 2000) {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      target.removeEventListener(type, handler);
      reject(new Error(`no ${type} event within ${timeoutMs} ms`));
    }, timeoutMs);
    function handler(ev) {
      if (!pred(ev.detail)) return;
      clearTimeout(timer);
      target.removeEventListener(type, handler);
      resolve(ev.detail);
    }
    target.addEventListener(type, handler);
  });
}

/** Record every event of the given types as [type, detail] pairs. */
export function recordEvents(target, types) {
  const seen = [];
  for (const t of types) target.addEventListener(t, (ev) => seen.push([t, ev.detail]));
  return seen;
}

export class FakeSocket extends EventTarget {
  constructor(url, server) {
    super();
    this.url = url;
    this.server = server;
    this.readyState = 0;
    /** @type {object[]} parsed client messages */
    this.sent = [];
    this.waiters = [];
    this.taken = new WeakSet();
  }

  /** Server side: accept the connection. */
  accept() {
    this.readyState = 1;
    this.dispatchEvent(makeEvent("open"));
  }

  /** Server side: refuse (what a browser reports for an unreachable server). */
  refuse() {
    this.readyState = 3;
    this.dispatchEvent(makeEvent("error"));
    this.dispatchEvent(makeEvent("close", { code: 1006 }));
  }

  /** Server side: send a message (object or raw text). */
  push(msg) {
    const data = typeof msg === "string" ? msg : JSON.stringify(msg);
    this.dispatchEvent(makeEvent("message", { data }));
  }

  /** Server side: drop the connection. */
  drop(code = 1006) {
    if (this.readyState === 3) return;
    this.readyState = 3;
    this.dispatchEvent(makeEvent("close", { code }));
  }

  /** Server side: wait for the next client message matching pred. */
  receive(pred = () => true, timeoutMs = 2000) {
    const found = this.sent.find((m) => !this.taken.has(m) && pred(m));
    if (found) {
      this.taken.add(found);
      return Promise.resolve(found);
    }
    return new Promise((resolve, reject) => {
      const w = { pred, resolve };
      this.waiters.push(w);
      setTimeout(() => reject(new Error(`client sent nothing matching within ${timeoutMs} ms`)),
        timeoutMs).unref();
    });
  }

  // client side
  send(text) {
    if (this.readyState !== 1) throw new Error("socket not open");
    const msg = JSON.parse(text);
    this.sent.push(msg);
    for (const w of this.waiters) {
      if (!this.taken.has(msg) && w.pred(msg)) {
        this.taken.add(msg);
        this.waiters.splice(this.waiters.indexOf(w), 1);
        w.resolve(msg);
        break;
      }
    }
  }

  close(code = 1000) {
    if (this.readyState === 3) return;
    this.readyState = 3;
    this.closedByClient = code;
    this.dispatchEvent(makeEvent("close", { code }));
  }
}

/** Hands out FakeSockets; `next()` resolves with the next one the client opens. */
export class FakeServer {
  constructor() {
    this.sockets = [];
    this.pending = [];
    this.factory = (url) => {
      const s = new FakeSocket(url, this);
      this.sockets.push(s);
      const p = this.pending.shift();
      if (p) p(s);
      return s;
    };
  }

  next() {
    const unclaimed = this.sockets.find((s) => !s.claimed);
    if (unclaimed) {
      unclaimed.claimed = true;
      return Promise.resolve(unclaimed);
    }
    return new Promise((resolve) => this.pending.push((s) => {
      s.claimed = true;
      resolve(s);
    }));
  }

  /** Accept the next socket and greet it with `ready`. */
  async acceptReady(id, extra = {}) {
    const s = await this.next();
    s.accept();
    s.push({ type: "ready", id, protocolVersion: 1, ...extra });
    return s;
  }
}

export class FakeDataChannel extends EventTarget {
  constructor(label) {
    super();
    this.label = label;
    this.readyState = "connecting";
    this.sent = [];
  }

  open() {
    this.readyState = "open";
    this.dispatchEvent(makeEvent("open"));
  }

  push(msg) {
    const data = typeof msg === "string" ? msg : JSON.stringify(msg);
    this.dispatchEvent(makeEvent("message", { data }));
  }

  send(text) {
    this.sent.push(JSON.parse(text));
  }

  close() {
    if (this.readyState === "closed") return;
    this.readyState = "closed";
    this.dispatchEvent(makeEvent("close"));
  }
}

export class FakePeerConnection extends EventTarget {
  constructor(config) {
    super();
    this.config = config;
    this.iceGatheringState = "complete";
    this.signalingState = "stable";
    this.connectionState = "new";
    this.localDescription = null;
    this.remoteDescription = null;
    this.channels = [];
    this.senders = [];
    this.offers = 0;
    this.closed = false;
  }

  createDataChannel(label) {
    const dc = new FakeDataChannel(label);
    this.channels.push(dc);
    return dc;
  }

  async createOffer() {
    this.offers += 1;
    return { type: "offer", sdp: `v=0 offer ${this.offers} tracks=${this.senders.length}` };
  }

  async setLocalDescription(desc) {
    this.localDescription = desc;
    this.signalingState = "have-local-offer";
  }

  async setRemoteDescription(desc) {
    this.remoteDescription = desc;
    this.signalingState = "stable";
  }

  addTrack(track) {
    const sender = { track, replaceTrack: async (t) => { sender.track = t; } };
    this.senders.push(sender);
    return sender;
  }

  removeTrack(sender) {
    this.senders = this.senders.filter((s) => s !== sender);
  }

  close() {
    this.closed = true;
    this.signalingState = "closed";
    for (const dc of this.channels) dc.close();
  }
}

/** Collects every FakePeerConnection the client creates. */
export function peerFactory() {
  const peers = [];
  const waiting = [];
  const create = (config) => {
    const pc = new FakePeerConnection(config);
    peers.push(pc);
    const w = waiting.shift();
    if (w) w(pc);
    return pc;
  };
  const next = () => {
    const free = peers.find((p) => !p.claimed);
    if (free) {
      free.claimed = true;
      return Promise.resolve(free);
    }
    return new Promise((resolve) => waiting.push((p) => {
      p.claimed = true;
      resolve(p);
    }));
  };
  return { peers, create, next };
}

/** A fake microphone stream. */
export function fakeMicStream() {
  const track = { kind: "audio", readyState: "live", stopped: false,
    stop() { this.stopped = true; this.readyState = "ended"; } };
  return { track, getAudioTracks: () => [track], getTracks: () => [track] };
}
