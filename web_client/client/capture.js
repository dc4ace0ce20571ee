// capture.js: the microphone in Web Audio: its level for a meter, and the WebSocket fallback's
// recorder (an AudioWorklet, capture-worklet.js, hands over the samples; the endpointer cuts
// utterances, each sent as a 16 kHz WAV). WebRTC sends the microphone as a media track instead
// and needs no capture here.

import { CAPTURE_PROCESSOR } from "./capture-worklet.js";
import { downsample, encodeWav, rms } from "./codecs.js";
import { Endpointer } from "./endpointer.js";
import { VoiceClientError } from "./errors.js";

/** The rate the server's speech-to-text wants (spec: "audio"). */
const WAV_RATE = 16000;
/** Samples per frame handed to the endpointer (~85 ms at 48 kHz, what it was tuned with). */
const FRAME_SIZE = 4096;
const WORKLET_URL = new URL("./capture-worklet.js", import.meta.url).href;

/**
 * The microphone while it is on: its stream, its level, and the fallback's recorder.
 * `Microphone.open()` asks for it.
 */
export class Microphone {
  /**
   * Ask for the microphone (the browser may prompt) and start its level meter.
   * @param {((c: MediaStreamConstraints) => Promise<MediaStream>) | null} getUserMedia
   * @param {MediaTrackConstraints | undefined} constraints
   * @param {() => AudioContext} audioContext the client's (shared with playback)
   * @param {Pick<Console, "warn"> | null} log
   * @returns {Promise<Microphone>} rejects with VoiceClientError MIC_DENIED or MIC_UNAVAILABLE
   */
  static async open(getUserMedia, constraints, audioContext, log) {
    if (!getUserMedia) {
      throw new VoiceClientError("MIC_UNAVAILABLE",
        "This browser gives no microphone access here (a secure https:// origin is needed).");
    }
    let stream;
    try {
      stream = await getUserMedia({
        audio: constraints ?? { echoCancellation: true, noiseSuppression: true, autoGainControl: true },
      });
    } catch (err) {
      const denied = err && (err.name === "NotAllowedError" || err.name === "SecurityError");
      throw new VoiceClientError(denied ? "MIC_DENIED" : "MIC_UNAVAILABLE",
        denied ? "Microphone access was denied." : `No usable microphone: ${err?.message ?? err}`);
    }
    const mic = new Microphone(stream, audioContext);
    try {
      const ctx = audioContext();
      if (ctx.state === "suspended") await ctx.resume();
      mic.meter = new MicMeter(ctx, stream);
    } catch (err) {
      log?.warn("llmrtc: no mic level meter", err);
    }
    return mic;
  }

  /** @param {MediaStream} stream @param {() => AudioContext} audioContext */
  constructor(stream, audioContext) {
    this.stream = stream;
    this.audioContext = audioContext;
    /** @type {MicMeter | null} */
    this.meter = null;
    /** @type {Recorder | null} */
    this.recorder = null;
  }

  /** @returns {number} 0..1 (0 without a meter) */
  get level() {
    return this.meter ? this.meter.level : 0;
  }

  /**
   * Record utterances for the WebSocket fallback (nothing when already recording); rejects
   * when Web Audio cannot record here.
   * @param {(wav: Uint8Array) => void} onUtterance
   */
  async startRecorder(onUtterance) {
    if (this.recorder) return;
    const recorder = new Recorder(this.audioContext(), this.stream, onUtterance);
    this.recorder = recorder; // before the worklet loads: a second call or a stop sees it
    try {
      await recorder.start();
    } catch (err) {
      if (this.recorder === recorder) this.recorder = null;
      recorder.stop(false);
      throw err;
    }
  }

  /** @param {boolean} flush hand over an utterance in progress */
  stopRecorder(flush) {
    const r = this.recorder;
    this.recorder = null;
    r?.stop(flush);
  }

  /** Release the microphone (an utterance in progress is handed over). */
  close() {
    this.stopRecorder(true);
    for (const t of this.stream.getTracks()) t.stop();
    this.meter?.close();
    this.meter = null;
  }
}

/** The microphone's level, read on demand (an analyser on the stream). */
export class MicMeter {
  /** @param {AudioContext} ctx @param {MediaStream} stream */
  constructor(ctx, stream) {
    this.source = ctx.createMediaStreamSource(stream);
    this.analyser = ctx.createAnalyser();
    this.analyser.fftSize = 1024;
    this.source.connect(this.analyser);
  }

  /** @returns {number} 0..1 */
  get level() {
    const buf = new Float32Array(this.analyser.fftSize);
    this.analyser.getFloatTimeDomainData(buf);
    return Math.min(1, rms(buf) * 4);
  }

  close() {
    try {
      this.source.disconnect();
    } catch {
      // already disconnected
    }
  }
}

/**
 * The fallback's recorder: cuts the microphone into utterances and hands each over as WAV
 * bytes. `stop(true)` hands over an utterance in progress.
 */
export class Recorder {
  /**
   * @param {AudioContext} ctx @param {MediaStream} stream
   * @param {(wav: Uint8Array) => void} onUtterance
   */
  constructor(ctx, stream, onUtterance) {
    this.ctx = ctx;
    this.onUtterance = onUtterance;
    this.endpointer = new Endpointer({ sampleRate: ctx.sampleRate });
    this.source = ctx.createMediaStreamSource(stream);
    this.mute = ctx.createGain(); // keeps the node pulled without playing the mic back
    this.mute.gain.value = 0;
    /** @type {AudioWorkletNode | ScriptProcessorNode | null} */
    this.node = null;
    this.stopped = false;
  }

  /** Start: resolves once samples flow (the worklet module is loaded). */
  async start() {
    const ctx = this.ctx;
    if (ctx.audioWorklet && typeof globalThis.AudioWorkletNode === "function") {
      // a second addModule in the same context is harmless (the worklet registers once)
      await ctx.audioWorklet.addModule(WORKLET_URL);
      if (this.stopped) return;
      const node = new globalThis.AudioWorkletNode(ctx, CAPTURE_PROCESSOR, {
        numberOfInputs: 1, numberOfOutputs: 1, channelCount: 1, channelCountMode: "explicit",
        processorOptions: { frameSize: FRAME_SIZE },
      });
      node.port.onmessage = (ev) => this._frame(ev.data);
      this._connect(node);
      return;
    }
    // Fallback only for a browser without AudioWorklet (before Safari 14.1, Chrome 66,
    // Firefox 76): the deprecated ScriptProcessorNode, on the main thread.
    const node = ctx.createScriptProcessor(FRAME_SIZE, 1, 1);
    node.onaudioprocess = (ev) => this._frame(new Float32Array(ev.inputBuffer.getChannelData(0)));
    this._connect(node);
  }

  /** @param {boolean} flush hand over an utterance in progress */
  stop(flush) {
    if (this.stopped) return;
    this.stopped = true;
    const node = this.node;
    if (node?.port) {
      node.port.onmessage = null;
      node.port.postMessage("stop");
    } else if (node) {
      node.onaudioprocess = null;
    }
    for (const n of [this.source, node, this.mute]) {
      try {
        n?.disconnect();
      } catch {
        // already disconnected
      }
    }
    if (flush) this._emit(this.endpointer.flush());
  }

  _connect(node) {
    this.source.connect(node);
    node.connect(this.mute);
    this.mute.connect(this.ctx.destination);
    this.node = node;
  }

  _frame(samples) {
    this._emit(this.endpointer.push(samples));
  }

  _emit(samples) {
    if (!samples) return;
    this.onUtterance(encodeWav(downsample(samples, this.ctx.sampleRate, WAV_RATE), WAV_RATE));
  }
}
