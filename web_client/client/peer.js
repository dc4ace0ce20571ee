// peer.js: WebRTC for one connection: the peer connection, its data channel "data", the
// offer/answer over the WebSocket, and the microphone as a track. Spec references ("spec: ...")
// name llmrtc v1 sections.

import { VoiceClientError } from "./errors.js";

/**
 * What a Peer needs from its client.
 * @typedef {object} PeerHost
 * @property {import("./scope.js").ConnectionScope} scope timers and waiters of the connection
 * @property {(text: string) => void} sendSignal send on the WebSocket (queued if it is not open)
 * @property {(text: string) => void} onText a message arrived on the data channel
 * @property {(stream: MediaStream) => void} onRemoteStream the agent's audio arrived
 * @property {(reason: string) => void} onLost the connection died
 */

export class Peer {
  /**
   * @param {PeerHost} host
   * @param {{createPeerConnection: (config: RTCConfiguration) => RTCPeerConnection,
   *   iceServers: RTCIceServer[]}} opts
   */
  constructor(host, opts) {
    this.host = host;
    this.epoch = host.scope.epoch;
    this.pc = opts.createPeerConnection({ iceServers: opts.iceServers });
    /** @type {RTCDataChannel | null} */
    this.dc = null;
    /** @type {RTCRtpSender | null} */
    this.micSender = null;
    /** @type {MediaStream | null} */
    this.remoteStream = null;
    this.up = false; // the data channel opened: its closing is a lost connection
    this._negotiation = Promise.resolve();
  }

  /** @returns {boolean} whether this connection is still the client's current one */
  get current() {
    return this.host.scope.current(this.epoch);
  }

  /** @returns {boolean} */
  get dataChannelOpen() {
    return this.dc?.readyState === "open";
  }

  /** Negotiate and wait for the data channel; throws when WebRTC cannot connect. */
  async start() {
    const { pc, host } = this;
    pc.addEventListener("track", (ev) => {
      if (!this.current || ev.track.kind !== "audio") return;
      this.remoteStream = ev.streams?.[0] ?? new MediaStream([ev.track]);
      host.onRemoteStream(this.remoteStream);
    });
    pc.addEventListener("connectionstatechange", () => {
      if (this.current && pc.connectionState === "failed") host.onLost("WebRTC connection failed");
    });
    const dc = pc.createDataChannel("data", { ordered: true });
    this.dc = dc;
    dc.addEventListener("message", (ev) => {
      if (!this.current) return;
      host.onText(typeof ev.data === "string" ? ev.data : new TextDecoder().decode(ev.data));
    });
    const opened = new Promise((resolve, reject) => {
      dc.addEventListener("open", resolve, { once: true });
      dc.addEventListener("close", () => reject(new Error("data channel closed")), { once: true });
    });
    opened.catch(() => {});
    dc.addEventListener("close", () => {
      if (this.current && this.up) host.onLost("data channel closed");
    });
    await this.negotiate();
    await host.scope.withTimeout(opened, "data channel");
    host.scope.check(this.epoch);
    this.up = true;
  }

  /** Offer/answer, serialised (spec: "offer", "signal"); non-trickle: ICE is in the SDP. */
  negotiate() {
    const { scope } = this.host;
    const run = async () => {
      scope.check(this.epoch);
      const pc = this.pc;
      const answer = scope.waitFor(this.epoch, (m) => m.type === "signal"
        && m.signal?.type === "answer"
        || (m.type === "error" && m.code === "WEBRTC_UNAVAILABLE"), "answer");
      answer.catch(() => {});
      await pc.setLocalDescription(await pc.createOffer());
      await this._iceGathered();
      scope.check(this.epoch);
      const local = pc.localDescription;
      this.host.sendSignal(JSON.stringify({
        type: "offer", signal: { type: local.type, sdp: local.sdp } }));
      const reply = await answer;
      if (reply.type === "error") throw new VoiceClientError(reply.code, reply.message ?? "");
      scope.check(this.epoch);
      await pc.setRemoteDescription(reply.signal);
    };
    const next = this._negotiation.then(run, run);
    this._negotiation = next.catch(() => {});
    return next;
  }

  /** Send the microphone as a track and re-offer (spec: re-offer when the mic starts). */
  async attachMic(stream) {
    const track = stream.getAudioTracks()[0];
    if (!track) return;
    if (this.micSender) await this.micSender.replaceTrack(track);
    else this.micSender = this.pc.addTrack(track, stream);
    await this.negotiate();
  }

  /** Stop sending the microphone (and re-offer without it). */
  detachMic() {
    if (this.micSender && this.pc.signalingState !== "closed") {
      try {
        this.pc.removeTrack(this.micSender);
        this.negotiate().catch(() => {});
      } catch {
        // the peer connection is gone
      }
    }
    this.micSender = null;
  }

  /** Send on the data channel. */
  send(text) {
    this.dc.send(text);
  }

  close() {
    for (const closable of [this.dc, this.pc]) {
      try {
        closable?.close();
      } catch {
        // closed
      }
    }
    this.micSender = null;
    this.remoteStream = null;
  }

  _iceGathered() {
    const pc = this.pc;
    if (pc.iceGatheringState === "complete") return Promise.resolve();
    return new Promise((resolve) => {
      const done = () => {
        if (pc.iceGatheringState !== "complete") return;
        pc.removeEventListener("icegatheringstatechange", done);
        resolve();
      };
      pc.addEventListener("icegatheringstatechange", done);
      this.host.scope.later(resolve, 3000);
    });
  }
}
