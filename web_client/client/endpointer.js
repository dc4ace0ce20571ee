// endpointer.js: cuts the microphone into utterances for the WebSocket fallback (pure).

import { rms } from "./codecs.js";

/**
 * Energy endpointer for the WebSocket fallback: cuts the mic into utterances. An utterance
 * starts at the first frame louder than `threshold` (with `preRollMs` of audio before it) and
 * ends after `silenceMs` of quiet frames or at `maxMs`. `push()` returns a finished utterance.
 */
export class Endpointer {
  /**
   * @param {{sampleRate: number, threshold?: number, silenceMs?: number, preRollMs?: number,
   *   maxMs?: number, minSpeechMs?: number}} opts
   */
  constructor(opts) {
    this.sampleRate = opts.sampleRate;
    this.threshold = opts.threshold ?? 0.015;
    this.silenceMs = opts.silenceMs ?? 700;
    this.preRollMs = opts.preRollMs ?? 300;
    this.maxMs = opts.maxMs ?? 15000;
    this.minSpeechMs = opts.minSpeechMs ?? 150;
    this._reset();
    /** @type {Float32Array[]} */
    this.preRoll = [];
  }

  _reset() {
    this.frames = /** @type {Float32Array[]} */ ([]);
    this.active = false;
    this.totalMs = 0;
    this.speechMs = 0;
    this.quietMs = 0;
  }

  /** @param {Float32Array} frame @returns {Float32Array | null} a finished utterance */
  push(frame) {
    const ms = (frame.length / this.sampleRate) * 1000;
    const loud = rms(frame) >= this.threshold;
    if (!this.active) {
      if (!loud) {
        this.preRoll.push(frame);
        let keep = this.preRoll.reduce((n, f) => n + f.length, 0);
        const limit = (this.preRollMs / 1000) * this.sampleRate;
        while (this.preRoll.length && keep > limit) keep -= this.preRoll.shift().length;
        return null;
      }
      this.active = true;
      this.frames = [...this.preRoll, frame];
      this.preRoll = [];
      this.totalMs = 0;
      for (const f of this.frames) this.totalMs += (f.length / this.sampleRate) * 1000;
      this.speechMs = ms;
      this.quietMs = 0;
      return null;
    }
    this.frames.push(frame);
    this.totalMs += ms;
    if (loud) {
      this.speechMs += ms;
      this.quietMs = 0;
    } else {
      this.quietMs += ms;
    }
    if (this.quietMs >= this.silenceMs || this.totalMs >= this.maxMs) return this.flush();
    return null;
  }

  /** End the current utterance now. @returns {Float32Array | null} */
  flush() {
    const enough = this.active && this.speechMs >= this.minSpeechMs;
    const frames = this.frames;
    this._reset();
    if (!enough) return null;
    const total = frames.reduce((n, f) => n + f.length, 0);
    const out = new Float32Array(total);
    let at = 0;
    for (const f of frames) {
      out.set(f, at);
      at += f.length;
    }
    return out;
  }
}
