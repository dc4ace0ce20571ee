// The fallback's recorder in Node: a fake AudioContext with an AudioWorklet, frames posted by
// the "worklet" cut into utterances and handed over as 16 kHz WAV; the ScriptProcessor path
// only where AudioWorklet is missing.
import assert from "node:assert/strict";
import { test } from "node:test";

import { CAPTURE_PROCESSOR } from "../client/capture-worklet.js";
import { Recorder } from "../client/capture.js";

class FakeNode {
  constructor(log, name) {
    this.log = log;
    this.name = name;
    this.gain = { value: 1 };
  }

  connect(to) { this.log.push(`${this.name}->${to.name}`); }

  disconnect() { this.log.push(`${this.name} disconnected`); }
}

function fakeContext({ worklet }) {
  const log = [];
  const ctx = {
    sampleRate: 16000, log, destination: new FakeNode(log, "destination"), modules: [],
    createMediaStreamSource: () => new FakeNode(log, "source"),
    createGain: () => new FakeNode(log, "mute"),
    createScriptProcessor: (size, ins, outs) => {
      log.push(`script processor ${size} ${ins} ${outs}`);
      return new FakeNode(log, "script");
    },
  };
  if (worklet) ctx.audioWorklet = { addModule: async (url) => { ctx.modules.push(url); } };
  return ctx;
}

/** A fake AudioWorkletNode class recording what it was made with. */
function fakeWorkletNode(made) {
  return class extends FakeNode {
    constructor(ctx, name, options) {
      super(ctx.log, "worklet");
      this.port = { sent: [], postMessage: (m) => this.port.sent.push(m), onmessage: null };
      made.push({ name, options, node: this });
    }
  };
}

test("the recorder captures with an AudioWorklet and hands over each utterance as WAV", async (t) => {
  const made = [];
  globalThis.AudioWorkletNode = fakeWorkletNode(made);
  t.after(() => { delete globalThis.AudioWorkletNode; });
  const ctx = fakeContext({ worklet: true });
  const wavs = [];
  const recorder = new Recorder(ctx, {}, (wav) => wavs.push(wav));
  await recorder.start();
  assert.equal(ctx.modules.length, 1);
  assert.match(ctx.modules[0], /\/client\/capture-worklet\.js$/);
  assert.equal(made.length, 1);
  assert.equal(made[0].name, CAPTURE_PROCESSOR);
  assert.deepEqual(made[0].options, { numberOfInputs: 1, numberOfOutputs: 1, channelCount: 1,
    channelCountMode: "explicit", processorOptions: { frameSize: 4096 } });
  assert.deepEqual(ctx.log, ["source->worklet", "worklet->mute", "mute->destination"]);
  assert.equal(recorder.mute.gain.value, 0, "the mic is not played back");
  const port = made[0].node.port;
  const frame = (level) => ({ data: new Float32Array(1600).fill(level) }); // 100 ms
  for (let i = 0; i < 5; i++) port.onmessage(frame(0.2));
  assert.equal(wavs.length, 0, "still speaking");
  for (let i = 0; i < 8; i++) port.onmessage(frame(0)); // 800 ms of silence ends it
  assert.equal(wavs.length, 1);
  const view = new DataView(wavs[0].buffer);
  assert.equal(view.getUint32(24, true), 16000, "16 kHz WAV");
  assert.equal(view.getUint32(40, true), (5 + 7) * 1600 * 2, "speech and trailing silence");
  recorder.stop(true);
  assert.deepEqual(port.sent, ["stop"], "the processor is told to end");
  assert.equal(port.onmessage, null);
  assert.equal(wavs.length, 1, "nothing in progress to hand over");
});

test("a recorder stopped while the worklet loads never starts", async (t) => {
  const made = [];
  globalThis.AudioWorkletNode = fakeWorkletNode(made);
  t.after(() => { delete globalThis.AudioWorkletNode; });
  const recorder = new Recorder(fakeContext({ worklet: true }), {}, () => {});
  const started = recorder.start();
  recorder.stop(false);
  await started;
  assert.equal(made.length, 0);
});

test("without AudioWorklet the recorder falls back to a ScriptProcessor", async () => {
  const ctx = fakeContext({ worklet: false });
  const wavs = [];
  const recorder = new Recorder(ctx, {}, (wav) => wavs.push(wav));
  await recorder.start();
  assert.deepEqual(ctx.log, ["script processor 4096 1 1", "source->script", "script->mute",
    "mute->destination"]);
  const block = (level) => ({ inputBuffer: { getChannelData: () => new Float32Array(1600).fill(level) } });
  for (let i = 0; i < 5; i++) recorder.node.onaudioprocess(block(0.2));
  recorder.stop(true);
  assert.equal(wavs.length, 1, "stop(true) hands over the utterance in progress");
  assert.equal(recorder.node.onaudioprocess, null);
});
