// Test page script: the reference client (unchanged) holding a conversation with voice_server.
import { LLMRTCWebClient } from "@llmrtc/llmrtc-web-client";

const params = new URLSearchParams(location.search);
const log = [];
window.refLog = log;
const client = new LLMRTCWebClient({ signallingUrl: params.get("ws") });
window.refClient = client;
for (const name of ["transcript", "llm", "llmChunk", "ttsStart", "ttsComplete", "ttsCancelled",
  "speechStart", "speechEnd", "error", "stateChange"]) {
  client.on(name, (...args) => log.push([name, ...args]));
}
client.on("ttsTrack", (stream) => {
  log.push(["ttsTrack"]);
  const audio = document.getElementById("agent");
  audio.srcObject = stream;
  audio.play().catch(() => {});
});
window.startTalking = async () => {
  await client.start();
  const stream = await navigator.mediaDevices.getUserMedia({ audio: { echoCancellation: false } });
  await client.shareAudio(stream);
  return client.currentSessionId;
};
window.inboundAudio = async () => {
  const pc = client.peer && client.peer.peerConnection;
  if (!pc) return null;
  for (const s of (await pc.getStats()).values()) {
    if (s.type === "inbound-rtp" && s.kind === "audio") {
      return { packets: s.packetsReceived, energy: s.totalAudioEnergy || 0 };
    }
  }
  return null;
};
