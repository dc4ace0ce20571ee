// playback.js: plays the agent's audio sent as messages (the WebSocket fallback).

/**
 * Plays `tts-chunk` / `tts` audio with Web Audio when no WebRTC audio track carries the agent's
 * voice (spec: "tts-chunk"). PCM is 16-bit little-endian mono; other formats go through
 * `decodeAudioData`. `stop()` silences everything scheduled (barge-in).
 */
export class ChunkPlayer {
  /** @param {() => AudioContext} getContext */
  constructor(getContext) {
    this.getContext = getContext;
    this.nextTime = 0;
    /** @type {Set<AudioBufferSourceNode>} */
    this.sources = new Set();
    this.chain = Promise.resolve();
    this.generation = 0;
  }

  /** @param {Uint8Array} bytes @param {string} format @param {number} [sampleRate] */
  enqueue(bytes, format, sampleRate) {
    const gen = this.generation;
    this.chain = this.chain.then(async () => {
      const ctx = this.getContext();
      let buffer;
      if (/^(pcm|s16|l16|raw)/i.test(format || "pcm")) {
        const count = Math.floor(bytes.byteLength / 2);
        const view = new DataView(bytes.buffer, bytes.byteOffset, count * 2);
        buffer = ctx.createBuffer(1, Math.max(1, count), sampleRate || 24000);
        const data = buffer.getChannelData(0);
        for (let i = 0; i < count; i++) data[i] = view.getInt16(i * 2, true) / 0x8000;
      } else {
        buffer = await ctx.decodeAudioData(bytes.slice().buffer);
      }
      if (gen !== this.generation) return;
      const src = ctx.createBufferSource();
      src.buffer = buffer;
      src.connect(ctx.destination);
      const at = Math.max(ctx.currentTime + 0.02, this.nextTime);
      src.start(at);
      this.nextTime = at + buffer.duration;
      this.sources.add(src);
      src.onended = () => this.sources.delete(src);
    }).catch(() => {});
  }

  stop() {
    this.generation += 1;
    for (const src of this.sources) {
      try {
        src.stop();
      } catch {
        // already stopped
      }
    }
    this.sources.clear();
    this.nextTime = 0;
  }
}

/**
 * Play the agent's WebRTC audio in `el` (autoplay may be refused until the user acts: a
 * warning, not an error).
 * @param {HTMLAudioElement} el @param {MediaStream} stream
 * @param {Pick<Console, "warn"> | null} log
 */
export function playStream(el, stream, log) {
  el.autoplay = true;
  el.srcObject = stream;
  el.play?.()?.catch?.((err) => log?.warn("llmrtc: remote audio blocked", err));
}
