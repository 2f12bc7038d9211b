import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

/** Shared bits of the speech benchmark: audio fixtures, WAV writing, statistics, the printed table. */

export const CACHE = fileURLToPath(new URL('../.cache/', import.meta.url));
export const SPEECH_WAV = fileURLToPath(new URL('../../test/fixtures/audio/speech.wav', import.meta.url));

/** test/fixtures/audio/speech.wav (espeak-ng, 16 kHz mono PCM16, 44-byte header) as floats. */
export function speechSamples(): Float32Array {
  const wav = readFileSync(SPEECH_WAV);
  const pcm = new Int16Array(wav.buffer.slice(wav.byteOffset + 44, wav.byteOffset + wav.length));
  return Float32Array.from(pcm, (v) => v / 32768);
}

/** `seconds` of speech.wav repeated back to back (4.2 s each: 1.6 s of speech, pauses of 0.5–1.5 s). */
export function repeatedSpeech(seconds: number, rate = 16_000): Float32Array {
  const speech = speechSamples();
  const out = new Float32Array(Math.round(seconds * rate));
  for (let i = 0; i < out.length; i++) out[i] = speech[i % speech.length]!;
  return out;
}

/** 16-bit PCM WAV bytes; `channels` > 1 interleaves the same signal, slightly delayed per channel. */
export function wavBytes(samples: Float32Array, rate: number, channels = 1): Buffer {
  const frames = samples.length;
  const data = Buffer.alloc(frames * channels * 2);
  for (let i = 0; i < frames; i++) {
    for (let c = 0; c < channels; c++) {
      const v = samples[Math.max(0, i - c * 7)]!;
      data.writeInt16LE(Math.max(-32768, Math.min(32767, Math.round(v * 32767))), (i * channels + c) * 2);
    }
  }
  const header = Buffer.alloc(44);
  header.write('RIFF', 0);
  header.writeUInt32LE(36 + data.length, 4);
  header.write('WAVE', 8);
  header.write('fmt ', 12);
  header.writeUInt32LE(16, 16);
  header.writeUInt16LE(1, 20);
  header.writeUInt16LE(channels, 22);
  header.writeUInt32LE(rate, 24);
  header.writeUInt32LE(rate * channels * 2, 28);
  header.writeUInt16LE(channels * 2, 32);
  header.writeUInt16LE(16, 34);
  header.write('data', 36);
  header.writeUInt32LE(data.length, 40);
  return Buffer.concat([header, data]);
}

/** Linear-interpolation resampling: only to make test inputs at other rates. */
export function resampleLinear(samples: Float32Array, from: number, to: number): Float32Array {
  const out = new Float32Array(Math.floor((samples.length * to) / from));
  for (let i = 0; i < out.length; i++) {
    const x = (i * from) / to;
    const j = Math.floor(x);
    const f = x - j;
    out[i] = (samples[j] ?? 0) * (1 - f) + (samples[j + 1] ?? 0) * f;
  }
  return out;
}

export const median = (xs: readonly number[]): number => {
  if (xs.length === 0) return Number.NaN;
  const s = [...xs].sort((a, b) => a - b);
  const mid = s.length >> 1;
  return s.length % 2 ? s[mid]! : (s[mid - 1]! + s[mid]!) / 2;
};

export const percentile = (xs: readonly number[], p: number): number => {
  if (xs.length === 0) return Number.NaN;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil((p / 100) * s.length) - 1))]!;
};

export const sum = (xs: readonly number[]): number => xs.reduce((a, b) => a + b, 0);

export const fmt = (x: number, digits = 1): string => (Number.isFinite(x) ? x.toFixed(digits) : 'n/a');

/** The printed table: one row per measurement, kept for the summary. */
export class Report {
  readonly rows: Array<[string, string, string]> = [];

  section(title: string): void {
    console.log(`\n${title}`);
  }

  row(what: string, value: string, note = ''): void {
    this.rows.push([what, value, note]);
    console.log(`  ${what.padEnd(62)} ${value.padStart(14)}  ${note}`);
  }

  note(text: string): void {
    console.log(`  ${text}`);
  }
}
