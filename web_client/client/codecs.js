// codecs.js: audio sample helpers (pure): resampling, WAV encoding, base64, level.

/**
 * Resample mono float samples to a lower rate with a windowed-sinc low-pass (Blackman window,
 * cutoff just below the new Nyquist frequency), so speech keeps its clarity without aliasing.
 * @param {Float32Array} input @param {number} fromRate @param {number} toRate
 * @returns {Float32Array}
 */
export function downsample(input, fromRate, toRate) {
  if (toRate >= fromRate) return input;
  const ratio = fromRate / toRate;
  const cutoff = 0.45 / ratio; // cycles per input sample
  const half = Math.ceil(8 * ratio); // filter half-width, input samples
  const out = new Float32Array(Math.floor(input.length / ratio));
  for (let i = 0; i < out.length; i++) {
    const center = i * ratio;
    const start = Math.max(0, Math.ceil(center - half));
    const end = Math.min(input.length - 1, Math.floor(center + half));
    let acc = 0;
    let norm = 0;
    for (let j = start; j <= end; j++) {
      const x = j - center;
      const sinc = x === 0 ? 2 * cutoff : Math.sin(2 * Math.PI * cutoff * x) / (Math.PI * x);
      const w = 0.42 + 0.5 * Math.cos((Math.PI * x) / half) + 0.08 * Math.cos((2 * Math.PI * x) / half);
      acc += input[j] * sinc * w;
      norm += sinc * w;
    }
    out[i] = norm ? acc / norm : 0;
  }
  return out;
}

/**
 * Encode mono float samples in [-1, 1] as a 16-bit PCM WAV file.
 * @param {Float32Array} samples @param {number} sampleRate @returns {Uint8Array}
 */
export function encodeWav(samples, sampleRate) {
  const bytes = new Uint8Array(44 + samples.length * 2);
  const view = new DataView(bytes.buffer);
  const ascii = (offset, s) => {
    for (let i = 0; i < s.length; i++) bytes[offset + i] = s.charCodeAt(i);
  };
  ascii(0, "RIFF");
  view.setUint32(4, 36 + samples.length * 2, true);
  ascii(8, "WAVE");
  ascii(12, "fmt ");
  view.setUint32(16, 16, true); // fmt chunk size
  view.setUint16(20, 1, true); // PCM
  view.setUint16(22, 1, true); // mono
  view.setUint32(24, sampleRate, true);
  view.setUint32(28, sampleRate * 2, true); // byte rate
  view.setUint16(32, 2, true); // block align
  view.setUint16(34, 16, true); // bits per sample
  ascii(36, "data");
  view.setUint32(40, samples.length * 2, true);
  for (let i = 0; i < samples.length; i++) {
    const s = Math.max(-1, Math.min(1, samples[i]));
    view.setInt16(44 + i * 2, s < 0 ? Math.round(s * 0x8000) : Math.round(s * 0x7fff), true);
  }
  return bytes;
}

/** @param {Uint8Array} bytes @returns {string} base64 */
export function bytesToBase64(bytes) {
  let binary = "";
  for (let i = 0; i < bytes.length; i += 0x8000) {
    binary += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  }
  return btoa(binary);
}

/** @param {string} b64 @returns {Uint8Array} */
export function base64ToBytes(b64) {
  const binary = atob(b64);
  const out = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i++) out[i] = binary.charCodeAt(i);
  return out;
}

/** @param {Float32Array} frame @returns {number} root mean square */
export function rms(frame) {
  let sum = 0;
  for (let i = 0; i < frame.length; i++) sum += frame[i] * frame[i];
  return Math.sqrt(sum / Math.max(1, frame.length));
}
