// capture-worklet.js: the AudioWorklet module that hands the microphone to the main thread for
// the WebSocket fallback (capture.js loads it with audioWorklet.addModule). It runs on the
// audio thread in its own global scope, so it imports nothing.
//
// The audio thread renders 128 samples at a time; posting each block would be ~375 messages a
// second, so blocks are batched into frames of `frameSize` samples (4096 by default, ~85 ms at
// 48 kHz: the frame size the endpointer was tuned with) and each frame's buffer is transferred.

/** The name the processor is registered under (`new AudioWorkletNode(ctx, name)`). */
export const CAPTURE_PROCESSOR = "llmrtc-capture";

/** Collects blocks of samples into frames of a fixed size (pure; unit-tested in Node). */
export class FrameBatcher {
  /** @param {number} frameSize samples per frame */
  constructor(frameSize) {
    if (!(frameSize > 0)) throw new RangeError("frameSize must be positive");
    this.frameSize = frameSize;
    this._frame = new Float32Array(frameSize);
    this._filled = 0;
  }

  /**
   * Add a block (copied: the audio thread reuses its buffers).
   * @param {Float32Array} block @returns {Float32Array[]} the frames it completed, in order
   */
  push(block) {
    const done = [];
    let at = 0;
    while (at < block.length) {
      const n = Math.min(block.length - at, this.frameSize - this._filled);
      this._frame.set(block.subarray(at, at + n), this._filled);
      this._filled += n;
      at += n;
      if (this._filled === this.frameSize) {
        done.push(this._frame);
        this._frame = new Float32Array(this.frameSize);
        this._filled = 0;
      }
    }
    return done;
  }
}

// Only in an AudioWorkletGlobalScope (Node and the main thread import this file for the names).
if (typeof registerProcessor === "function") {
  try {
    registerProcessor(CAPTURE_PROCESSOR, class extends AudioWorkletProcessor {
      constructor(options) {
        super();
        this.batcher = new FrameBatcher(options?.processorOptions?.frameSize ?? 4096);
        this.running = true;
        this.port.onmessage = (ev) => {
          if (ev.data === "stop") this.running = false;
        };
      }

      process(inputs) {
        const channel = inputs[0]?.[0]; // mono: the first channel of the first input
        if (this.running && channel) {
          for (const frame of this.batcher.push(channel)) {
            this.port.postMessage(frame, [frame.buffer]);
          }
        }
        return this.running; // false ends the processor once the recorder stopped
      }
    });
  } catch {
    // registered already: the same context loaded this module for an earlier recorder
  }
}
