import { execFileSync, spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it, vi } from 'vitest';
import { FlacFrameReader } from '../../src/audio/containers/flac.js';
import { decodeAudio, type DecodedAudio } from '../../src/audio/decode.js';
import { InvalidMediaError, PayloadTooLargeError } from '../../src/core/errors.js';

/**
 * decodeAudio on real files of every accepted container/codec (the 440 Hz
 * tones of test/fixtures/audio/make-tones.sh, made by ffmpeg) and on WAVs
 * written here in every sample format: each must come out as 16 kHz mono of
 * the right length, pitch and level. Then every way bytes can be bad.
 *
 * The M4A/AAC fixtures go through the optional decoder @audio/decode-aac
 * (GPL-2.0: a devDependency, never a dependency); one test hides it to check
 * the 400 that users without it get.
 */

const TONES = new URL('../fixtures/audio/tones/', import.meta.url);
const RATE = 16_000;
const TONE_HZ = 440;

/** Frequency from the upward zero crossings of the middle 60 % (interpolated between samples). */
function frequency(x: Float32Array, rate: number): number {
  const from = Math.floor(x.length * 0.2);
  const to = Math.floor(x.length * 0.8);
  let first = -1;
  let last = -1;
  let crossings = 0;
  for (let i = from; i < to - 1; i++) {
    if (x[i]! < 0 && x[i + 1]! >= 0) {
      const t = i - x[i]! / (x[i + 1]! - x[i]!);
      if (first < 0) first = t;
      last = t;
      crossings++;
    }
  }
  return ((crossings - 1) * rate) / (last - first);
}

/** Sine amplitude from the RMS of the middle 60 %. */
function amplitude(x: Float32Array): number {
  const from = Math.floor(x.length * 0.2);
  const to = Math.floor(x.length * 0.8);
  let sum = 0;
  for (let i = from; i < to; i++) sum += x[i]! * x[i]!;
  return Math.sqrt((2 * sum) / (to - from));
}

interface Expected {
  format: string;
  sourceRate: number;
  channels: number;
  seconds: number;
  /** Allowed duration error: one codec frame (0 for PCM and FLAC) plus one output sample. */
  frameSeconds: number;
  amplitude: number;
  lossy: boolean;
}

/** What a fixture must decode to, read from its name (see make-tones.sh). */
function expectedFor(name: string): Expected {
  const match = /^(\w+)-(\d+)-(mono|stereo|3ch)/.exec(name);
  if (!match) throw new Error(`unexpected fixture name ${name}`);
  const [, codec, rateText, layout] = match as unknown as [string, string, string, string];
  const rate = Number(rateText);
  const channels = layout === 'mono' ? 1 : layout === 'stereo' ? 2 : 3;
  const pcm = ['wav', 'aiff', 'caf'].includes(codec);
  // Mono 0.5; stereo left 0.5, right 0.25 → 0.375; 3 channels 0.5, 0.25, 0 → 0.25.
  const level = channels === 1 ? 0.5 : channels === 2 ? 0.375 : 0.25;
  const table: Record<string, Omit<Expected, 'channels' | 'seconds' | 'amplitude'>> = {
    wav: { format: 'wav', sourceRate: rate, frameSeconds: 0, lossy: false },
    aiff: { format: 'aiff', sourceRate: rate, frameSeconds: 0, lossy: false },
    caf: { format: 'caf', sourceRate: rate, frameSeconds: 0, lossy: false },
    flac: { format: 'flac', sourceRate: rate, frameSeconds: 0, lossy: false },
    mp3: { format: 'mp3', sourceRate: rate, frameSeconds: (rate >= 32_000 ? 1152 : 576) / rate, lossy: true },
    vorbis: { format: 'ogg', sourceRate: rate, frameSeconds: 2048 / rate, lossy: true },
    // Opus always decodes at 48 kHz, in frames of ≤ 20 ms (plus up to 6.5 ms of look-ahead).
    opus: { format: 'ogg', sourceRate: 48_000, frameSeconds: 0.0265, lossy: true },
    webm: { format: 'webm', sourceRate: 48_000, frameSeconds: 0.0265, lossy: true },
    mka: { format: 'mkv', sourceRate: 48_000, frameSeconds: 0.0265, lossy: true },
    aac: { format: 'm4a', sourceRate: rate, frameSeconds: 1024 / rate, lossy: true },
    // Raw ADTS carries no edit list (the encoder's priming stays in) and FAAD2 decodes
    // low-rate AAC-LC at twice the rate (it allows for implicit SBR).
    adts: { format: 'aac', sourceRate: rate <= 24_000 ? 2 * rate : rate, frameSeconds: 2048 / rate, lossy: true },
  };
  const base = table[codec];
  if (!base) throw new Error(`no expectations for ${name}`);
  return { ...base, channels, seconds: rate === 8000 && !pcm ? 1 : 0.5, amplitude: level };
}

function checkTone(audio: DecodedAudio, seconds: number, frameSeconds: number, level: number, lossy: boolean): void {
  expect(audio.sampleRate).toBe(RATE);
  expect(audio.samples.length).toBe(Math.round(audio.duration * RATE));
  expect(Math.abs(audio.duration - seconds)).toBeLessThanOrEqual(frameSeconds + 1 / RATE);
  expect(Math.abs(frequency(audio.samples, RATE) - TONE_HZ)).toBeLessThan(TONE_HZ * 0.01);
  // Lossless: the exact average of the channels; lossy: low-bitrate encoders move the level a little.
  expect(Math.abs(amplitude(audio.samples) - level)).toBeLessThan(level * (lossy ? 0.2 : 0.01));
}

const fixtures = readdirSync(TONES).sort();

describe('decodeAudio: committed fixtures (ffmpeg)', () => {
  it('finds every fixture', () => {
    expect(fixtures.length).toBeGreaterThanOrEqual(38);
  });

  it.each(fixtures)('%s → 16 kHz mono with the right length, pitch and level', async (name) => {
    const expected = expectedFor(name);
    const audio = await decodeAudio(readFileSync(new URL(name, TONES)), { sampleRate: RATE });
    expect(audio.format).toBe(expected.format);
    expect(audio.sourceSampleRate).toBe(expected.sourceRate);
    expect(audio.channels).toBe(expected.channels);
    checkTone(audio, expected.seconds, expected.frameSeconds, expected.amplitude, expected.lossy);
  });

  it('reads a view into a larger buffer at an odd offset (a pooled Buffer, a multipart slice)', async () => {
    for (const name of ['mp3-44100-stereo.mp3', 'flac-8000-mono.flac', 'opus-48000-mono.ogg', 'webm-8000-mono.webm', 'aac-48000-mono.m4a']) {
      const bytes = readFileSync(new URL(name, TONES));
      const host = new Uint8Array(bytes.length + 21).fill(0xff);
      host.set(bytes, 13);
      const audio = await decodeAudio(host.subarray(13, 13 + bytes.length), { sampleRate: RATE });
      expect(audio.format).toBe(expectedFor(name).format);
      expect(Math.abs(frequency(audio.samples, RATE) - TONE_HZ)).toBeLessThan(TONE_HZ * 0.01);
    }
  });

  it('decodes to other output rates', async () => {
    const bytes = readFileSync(new URL('flac-44100-stereo.flac', TONES));
    for (const rate of [8000, 48_000]) {
      const audio = await decodeAudio(bytes, { sampleRate: rate });
      expect(audio.sampleRate).toBe(rate);
      expect(audio.duration).toBeCloseTo(0.5, 3);
      expect(Math.abs(frequency(audio.samples, rate) - TONE_HZ)).toBeLessThan(TONE_HZ * 0.01);
    }
  });
});

/** Length of the EBML variable-length integer whose first byte is `first`. */
const vintLength = (first: number) => Math.clz32(first) - 23;

/**
 * The file rewritten as a live recorder (a browser's MediaRecorder) writes
 * it: the Segment and every Cluster of unknown size (their size fields set
 * to all ones, same length), nothing else changed.
 */
function asLiveRecording(file: Uint8Array): Uint8Array {
  const b = new Uint8Array(file);
  for (let pos = 0; pos < b.length; ) {
    const idLength = vintLength(b[pos]!);
    const id = b.subarray(pos, pos + idLength).reduce((v, byte) => v * 256 + byte, 0);
    const sizeAt = pos + idLength;
    const sizeLength = vintLength(b[sizeAt]!);
    const data = sizeAt + sizeLength;
    if (id === 0x18538067 || id === 0x1f43b675) {
      b[sizeAt] = 0xff >> (sizeLength - 1);
      b.fill(0xff, sizeAt + 1, data);
      pos = data; // Segment, Cluster: walk their children
      continue;
    }
    const size = b.subarray(sizeAt, data).reduce((v, byte, i) => v * 256 + (i === 0 ? byte & (0xff >> sizeLength) : byte), 0);
    pos = data + size;
  }
  return b;
}

describe('decodeAudio: WebM/Matroska as live recorders write it (unknown sizes)', () => {
  const matroska = fixtures.filter((name) => /\.(webm|mka)$/.test(name));

  it.each(matroska)('%s with an unknown-size Segment and Clusters → the same samples', async (name) => {
    const bytes = readFileSync(new URL(name, TONES));
    const live = asLiveRecording(bytes);
    expect(Buffer.compare(live, bytes)).not.toBe(0);
    const [plain, recorded] = await Promise.all([decodeAudio(bytes, { sampleRate: RATE }), decodeAudio(live, { sampleRate: RATE })]);
    expect(recorded.format).toBe(plain.format);
    expect(recorded.samples).toEqual(plain.samples);
  });

  it.each(matroska)('%s live-recorded and truncated → 400 invalid_audio', async (name) => {
    const live = asLiveRecording(readFileSync(new URL(name, TONES)));
    const { format } = expectedFor(name);
    for (const keep of [0.9, 0.5, 0.1]) {
      await expectInvalidAudio(live.subarray(0, Math.floor(live.length * keep)), new RegExp(`detected as '${format}' but could not be decoded: .*truncated`));
    }
  });
});

/** The packets of a one-stream Ogg file (joined across pages) and its last granule position. */
function oggPackets(file: Uint8Array): { packets: Uint8Array[]; granule: bigint } {
  const view = new DataView(file.buffer, file.byteOffset, file.byteLength);
  const packets: Uint8Array[] = [];
  let current: Uint8Array[] = [];
  let granule = 0n;
  for (let pos = 0; pos < file.length; ) {
    const segments = file[pos + 26]!;
    granule = view.getBigInt64(pos + 6, true);
    let body = pos + 27 + segments;
    for (let i = 0; i < segments; i++) {
      const size = file[pos + 27 + i]!;
      current.push(file.subarray(body, body + size));
      body += size;
      if (size < 255) {
        packets.push(Buffer.concat(current));
        current = [];
      }
    }
    pos = body;
  }
  return { packets, granule };
}

/** CRC-32 of an Ogg page (polynomial 0x04C11DB7, not reflected, initial value 0). */
function oggCrc(bytes: Uint8Array): number {
  let crc = 0;
  for (const byte of bytes) {
    crc ^= byte << 24;
    for (let bit = 0; bit < 8; bit++) crc = crc & 0x80000000 ? (crc << 1) ^ 0x04c11db7 : crc << 1;
  }
  return crc >>> 0;
}

/** Samples (48 kHz) in an Opus packet, from its TOC byte (RFC 6716 §3.1). */
function opusPacketSamples(packet: Uint8Array): number {
  const config = packet[0]! >> 3;
  const frameSize = config < 12 ? [480, 960, 1920, 2880][config % 4]! : config < 16 ? [480, 960][config % 2]! : [120, 240, 480, 960][config % 4]!;
  const code = packet[0]! & 3;
  return frameSize * (code === 0 ? 1 : code < 3 ? 2 : packet[1]! & 0x3f);
}

/**
 * An Ogg/Opus stream of OpusHead, `tags` and the audio packets, with at most
 * `perPage` segments per page (so a packet of 255 bytes or more runs across
 * pages). Each page's granule position is that of the last packet it
 * completes (−1 when none does), counted from the pre-skip; the last page's
 * is `granule`.
 */
function oggOpusStream(head: Uint8Array, tags: Uint8Array, audio: Uint8Array[], granule: bigint, perPage: number, serial = 0x1234): Uint8Array {
  const pages: Uint8Array[] = [];
  let sequence = 0;
  let position = BigInt(head[10]! | (head[11]! << 8)); // pre-skip
  const group = (packets: Uint8Array[], bos: boolean, eos: boolean) => {
    const segments: { bytes: Uint8Array; granule?: bigint }[] = [];
    for (const p of packets) {
      if (eos) position += BigInt(opusPacketSamples(p));
      for (let at = 0; ; at += 255) {
        const bytes = p.subarray(at, Math.min(p.length, at + 255));
        const ends = bytes.length < 255;
        segments.push({ bytes, granule: ends ? (eos ? position : 0n) : undefined });
        if (ends) break;
      }
    }
    if (eos) segments.at(-1)!.granule = granule;
    let continued = false;
    for (let i = 0; i < segments.length; i += perPage) {
      const chunk = segments.slice(i, i + perPage);
      const last = i + perPage >= segments.length;
      const header = new Uint8Array(27 + chunk.length);
      const view = new DataView(header.buffer);
      header.set(Buffer.from('OggS'));
      header[5] = (continued ? 1 : 0) | (bos && i === 0 ? 2 : 0) | (eos && last ? 4 : 0);
      view.setBigInt64(6, chunk.findLast((c) => c.granule !== undefined)?.granule ?? -1n, true);
      view.setUint32(14, serial, true);
      view.setUint32(18, sequence++, true);
      header[26] = chunk.length;
      header.set(chunk.map((c) => c.bytes.length), 27);
      const page = Buffer.concat([header, ...chunk.map((c) => c.bytes)]);
      page.writeUInt32LE(oggCrc(page), 22);
      pages.push(page);
      continued = chunk.at(-1)!.bytes.length === 255;
    }
  };
  group([head], true, false);
  group([tags], false, false);
  group(audio, false, true);
  return Buffer.concat(pages);
}

describe('decodeAudio: Ogg/Opus framing', () => {
  it('an OpusTags header over many pages (cover art) and one packet per page → the same samples', async () => {
    const bytes = readFileSync(new URL('opus-44100-stereo.ogg', TONES));
    const { packets, granule } = oggPackets(bytes);
    const [head, , ...audio] = packets as [Uint8Array, Uint8Array, ...Uint8Array[]];
    const comment = Buffer.from(`COMMENT=${'A'.repeat(100_000)}`); // as long as embedded cover art
    const tags = Buffer.alloc(8 + 4 + 4 + 4 + comment.length);
    tags.write('OpusTags');
    tags.writeUInt32LE(0, 8); // vendor string: empty
    tags.writeUInt32LE(1, 12); // one comment
    tags.writeUInt32LE(comment.length, 16);
    comment.copy(tags, 20);
    const repaged = oggOpusStream(head, tags, audio, granule, 1);
    expect(repaged.length).toBeGreaterThan(100_000);
    const [plain, big] = await Promise.all([decodeAudio(bytes, { sampleRate: RATE }), decodeAudio(repaged, { sampleRate: RATE })]);
    expect(big).toMatchObject({ format: 'ogg', channels: 2, sourceSampleRate: 48_000 });
    expect(big.samples).toEqual(plain.samples);
  });

  it('chained streams (one file after another) → both, each trimmed to its length', async () => {
    const first = readFileSync(new URL('opus-48000-mono.ogg', TONES));
    const second = readFileSync(new URL('opus-8000-mono.ogg', TONES));
    const audio = await decodeAudio(Buffer.concat([first, second]), { sampleRate: RATE });
    expect(audio.format).toBe('ogg');
    expect(audio.duration).toBeCloseTo(1.5, 4);
    expect(Math.abs(frequency(audio.samples, RATE) - TONE_HZ)).toBeLessThan(TONE_HZ * 0.01);
  });
});

/** The committed reference-encoder files (test/fixtures/audio/make-flac-edge.sh): 16 kHz mono 16-bit. */
const FLAC_EDGE = new URL('../fixtures/audio/flac-edge/', import.meta.url);

/** The samples of a flac-edge signal, as make-flac-edge.sh writes them. */
function edgeSignal(signal: string, n: number): Int16Array {
  const pcm = new Int16Array(n);
  if (signal === 'tone') for (let i = 0; i < n; i++) pcm[i] = Math.round(0.5 * 32767 * Math.sin((2 * Math.PI * 440 * i) / 16_000));
  return pcm;
}

/**
 * What decodeAudio must return for interleaved integer PCM decoded at its own
 * rate (no resampling): each sample / (2^(bits−1) − 1) in float32, as the
 * FLAC decoder scales them, channels averaged as decodeAudio downmixes.
 */
function expectedMono(pcm: ArrayLike<number>, channels: number, bits: number): Float32Array {
  const scale = 2 ** (bits - 1) - 1;
  const out = new Float32Array(pcm.length / channels);
  for (let i = 0; i < out.length; i++) {
    if (channels === 1) out[i] = pcm[i]! / scale;
    else out[i] = (Math.fround(pcm[2 * i]! / scale) + Math.fround(pcm[2 * i + 1]! / scale)) * 0.5;
  }
  return out;
}

/** Expects the exact samples (its length, then the first differing index: −1 for none). */
function expectSamples(actual: Float32Array, expected: Float32Array): void {
  expect(actual.length).toBe(expected.length);
  expect(actual.findIndex((v, i) => v !== expected[i])).toBe(-1);
}

const edgeFixtures = readdirSync(FLAC_EDGE).filter((name) => name.endsWith('.flac')).sort();
const readEdge = (name: string) => new Uint8Array(readFileSync(new URL(name, FLAC_EDGE)));
const sampleCount = (name: string) => Number(/-(\d+)\.flac$/.exec(name)![1]);
/** Where the last frame of a flac-edge file starts (its sync code; no false one follows in these files). */
const lastFrameAt = (bytes: Uint8Array) => Buffer.from(bytes).lastIndexOf(Buffer.from([0xff, 0xf8]));

describe('decodeAudio: FLAC frame boundaries (committed reference-encoder files)', () => {
  it('finds the fixtures', () => {
    expect(edgeFixtures).toEqual(['silence-10000.flac', 'tone-4097.flac', 'tone-4317.flac']);
  });

  // A last frame of 12 or 13 bytes (a block of silence, a block of one sample), and one whose third-to-last byte is 0xFF.
  it.each(edgeFixtures)('%s → every sample, exactly', async (name) => {
    const [signal] = name.split('-') as [string];
    const audio = await decodeAudio(readEdge(name), { sampleRate: RATE });
    expect(audio).toMatchObject({ format: 'flac', sourceSampleRate: RATE, channels: 1 });
    expectSamples(audio.samples, expectedMono(edgeSignal(signal, sampleCount(name)), 1, 16));
  });

  it('the frame reader splits them into whole frames of 4096 samples and a short last one', () => {
    for (const name of edgeFixtures) {
      const bytes = readEdge(name);
      const reader = new FlacFrameReader(bytes);
      const frames = reader.read(Infinity);
      expect(frames.length).toBe(Math.ceil(sampleCount(name) / 4096));
      // Back to back from the first frame to the end of the file, the last one starting at its sync code.
      let at = reader.layout.firstFrame;
      for (const frame of frames) {
        expect(frame.byteOffset - bytes.byteOffset).toBe(at);
        at += frame.length;
      }
      expect(at).toBe(bytes.length);
      expect(frames.at(-1)!.byteOffset).toBe(lastFrameAt(bytes));
      expect(reader.lastFrame).toBe('checked');
      // Read 100 bytes further at a time (as the pieces of a file come): the same frames.
      const stepped = new FlacFrameReader(bytes);
      const pieces: Uint8Array[] = [];
      for (let upTo = 100; upTo < bytes.length + 100; upTo += 100) pieces.push(...stepped.read(upTo));
      expect(pieces).toEqual(frames);
    }
  });

  it('a tag after the last frame (ID3v1, APE) → the same samples', async () => {
    const bytes = readEdge('silence-10000.flac');
    const id3v1 = Buffer.concat([bytes, Buffer.from('TAG'), Buffer.alloc(125, 0x20)]);
    // An APEv2 footer holding bytes that look like frame syncs.
    const ape = Buffer.concat([bytes, Buffer.from('APETAGEX'), Buffer.alloc(24), Buffer.from([0xff, 0xf8, 0xff, 0xf9, 0xff, 0xf8])]);
    for (const tagged of [id3v1, ape]) {
      const audio = await decodeAudio(tagged, { sampleRate: RATE });
      expectSamples(audio.samples, new Float32Array(10_000));
    }
  });

  it('cut inside the last frame, at a frame boundary or inside the metadata → 400 invalid_audio saying truncated', async () => {
    const bytes = readEdge('tone-4317.flac');
    await expectInvalidAudio(bytes.subarray(0, bytes.length - 50), /detected as 'flac' but could not be decoded: the file is truncated or corrupt: its last FLAC frame \(123 bytes from byte \d+\) is cut short or damaged/);
    await expectInvalidAudio(bytes.subarray(0, lastFrameAt(bytes)), /detected as 'flac' but could not be decoded: the file is truncated or corrupt: it declares 4317 samples per channel but only 4096 could be decoded/);
    await expectInvalidAudio(bytes.subarray(0, 30), /detected as 'flac' but could not be decoded: the file is truncated: its FLAC metadata block declares 34 bytes but only 22 are present/);
  });

  it('a damaged byte inside a frame → 400 invalid_audio naming a corrupt frame', async () => {
    const bytes = readEdge('tone-4317.flac');
    bytes[Math.floor(lastFrameAt(bytes) / 2)] ^= 0x5a; // inside the first frame
    await expectInvalidAudio(bytes, /detected as 'flac' but could not be decoded: 1 corrupt frame\(s\)/);
  });
});

/** Whether the reference FLAC encoder (`flac`, Debian's flac package) is installed. */
const flacTool = spawnSync('flac', ['--version']).status === 0;

interface ReferenceCase {
  name: string;
  channels: 1 | 2;
  bits: 8 | 16 | 24;
  rate: number;
  /** Interleaved integer samples. */
  pcm: Int32Array;
  /** Encoder options beyond the format. */
  args?: string[];
}

let seed = 2024;
const random = () => ((seed = (seed * 1103515245 + 12345) >>> 0) >>> 8) / 2 ** 24;
const mono = (n: number, f: (i: number) => number) => Int32Array.from({ length: n }, (_, i) => f(i));
const tone16 = (i: number) => Math.round(0.5 * 32767 * Math.sin((2 * Math.PI * 440 * i) / 16_000));

const referenceCases: ReferenceCase[] = [
  // Digital silence: every frame codes to 12 bytes; last blocks of 1, 4096 and 1808 samples, none.
  ...[1, 4097, 8192, 10_000].map((n): ReferenceCase => ({ name: `silence × ${n}`, channels: 1, bits: 16, rate: RATE, pcm: new Int32Array(n) })),
  // A last block of one sample at other block sizes and compression levels.
  ...[
    ['--blocksize=16', '-0'],
    ['--blocksize=192', '-8'],
    ['--blocksize=576'],
    ['--blocksize=4608', '-8'],
  ].map((args): ReferenceCase => ({ name: `tone × 4097, ${args.join(' ')}`, channels: 1, bits: 16, rate: RATE, pcm: mono(4097, tone16), args })),
  // 0xFF bytes everywhere: a constant −1 (0xFFFF), and samples drawn from values whose bytes are 0xFF.
  { name: 'constant −1 × 5000', channels: 1, bits: 16, rate: RATE, pcm: new Int32Array(5000).fill(-1) },
  { name: '0xFF-heavy × 9000', channels: 1, bits: 16, rate: RATE, pcm: mono(9000, () => [-1, -256, -257, 255, -2][Math.floor(random() * 5)]!), args: ['-8'] },
  // A tone that falls silent, stereo 24-bit at 44.1 kHz (right channel silent throughout).
  {
    name: 'stereo 24-bit tone then silence × 4097',
    channels: 2,
    bits: 24,
    rate: 44_100,
    pcm: Int32Array.from({ length: 2 * 4097 }, (_, i) => (i % 2 || i > 4000 ? 0 : Math.round(0.5 * 8388607 * Math.sin((2 * Math.PI * 440 * (i / 2)) / 44_100)))),
  },
  { name: '8-bit noise × 3001', channels: 1, bits: 8, rate: 8000, pcm: mono(3001, () => Math.floor(random() * 255) - 127) },
  // Long enough to arrive in many pieces (≈ 600 KB): tone and noise, then silence.
  { name: '20 s tone and noise then silence', channels: 1, bits: 16, rate: RATE, pcm: mono(20 * RATE, (i) => (i < 19 * RATE ? Math.round(tone16(i) * 0.5 + (random() - 0.5) * 20_000) : 0)) },
];

/** Encodes a case with the reference encoder (`extra`: e.g. --ogg) in a temporary folder. */
function referenceFlac(c: ReferenceCase, extra: string[] = []): Uint8Array {
  const dir = mkdtempSync(join(tmpdir(), 'lserve-flac-'));
  try {
    const bytesPer = c.bits / 8;
    const raw = Buffer.alloc(c.pcm.length * bytesPer);
    c.pcm.forEach((v, i) => raw.writeIntLE(v, i * bytesPer, bytesPer));
    writeFileSync(join(dir, 'in.raw'), raw);
    const format = ['--force-raw-format', '--endian=little', '--sign=signed', `--channels=${c.channels}`, `--bps=${c.bits}`, `--sample-rate=${c.rate}`];
    execFileSync('flac', ['--silent', '--no-padding', ...format, ...(c.args ?? []), ...extra, join(dir, 'in.raw'), '-o', join(dir, 'out.flac')]);
    return new Uint8Array(readFileSync(join(dir, 'out.flac')));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

describe.skipIf(!flacTool)('decodeAudio: FLAC made by the reference encoder at test time (needs the `flac` tool: apt-get install flac)', () => {
  it.each(referenceCases)('$name → every sample, exactly', async (c) => {
    const audio = await decodeAudio(referenceFlac(c), { sampleRate: c.rate });
    expect(audio).toMatchObject({ format: 'flac', sourceSampleRate: c.rate, channels: c.channels });
    expectSamples(audio.samples, expectedMono(c.pcm, c.channels, c.bits));
  });

  // FLAC in Ogg is framed by its Ogg packets (not by lserve's frame search): the silences and a one-sample last block.
  it.each(referenceCases.slice(0, 5))('in Ogg: $name → every sample, exactly', async (c) => {
    const audio = await decodeAudio(referenceFlac(c, ['--ogg']), { sampleRate: c.rate });
    expect(audio.format).toBe('flac');
    expectSamples(audio.samples, expectedMono(c.pcm, c.channels, c.bits));
  });
});

type SampleFormat = 'u8' | 's16' | 's24' | 's32' | 'f32' | 'f64';

/**
 * A 440 Hz WAV: channel c has amplitude 0.5 / (c + 1). WAVE_FORMAT_EXTENSIBLE
 * when asked (the sub-format GUID then carries PCM or IEEE float).
 */
function makeWav(rate: number, channels: number, format: SampleFormat, extensible: boolean, seconds = 0.5): Uint8Array {
  const bytesPer = { u8: 1, s16: 2, s24: 3, s32: 4, f32: 4, f64: 8 }[format];
  const float = format === 'f32' || format === 'f64';
  const frames = Math.round(rate * seconds);
  const fmtSize = extensible ? 40 : 16;
  const dataSize = frames * channels * bytesPer;
  const out = new Uint8Array(12 + 8 + fmtSize + 8 + dataSize);
  const view = new DataView(out.buffer);
  const text = (at: number, s: string) => [...s].forEach((ch, i) => (out[at + i] = ch.charCodeAt(0)));
  text(0, 'RIFF');
  view.setUint32(4, out.length - 8, true);
  text(8, 'WAVE');
  text(12, 'fmt ');
  view.setUint32(16, fmtSize, true);
  const tag = float ? 3 : 1;
  view.setUint16(20, extensible ? 0xfffe : tag, true);
  view.setUint16(22, channels, true);
  view.setUint32(24, rate, true);
  view.setUint32(28, rate * channels * bytesPer, true);
  view.setUint16(32, channels * bytesPer, true);
  view.setUint16(34, bytesPer * 8, true);
  if (extensible) {
    view.setUint16(36, 22, true); // cbSize
    view.setUint16(38, bytesPer * 8, true); // valid bits
    view.setUint32(40, (1 << channels) - 1, true); // channel mask
    // SubFormat GUID: {tag}-0000-0010-8000-00aa00389b71
    view.setUint16(44, tag, true);
    out.set([0x00, 0x00, 0x00, 0x00, 0x10, 0x00, 0x80, 0x00, 0x00, 0xaa, 0x00, 0x38, 0x9b, 0x71], 46);
  }
  const data = 12 + 8 + fmtSize;
  text(data, 'data');
  view.setUint32(data + 4, dataSize, true);
  let at = data + 8;
  for (let i = 0; i < frames; i++) {
    for (let c = 0; c < channels; c++) {
      const v = (0.5 / (c + 1)) * Math.sin((2 * Math.PI * TONE_HZ * i) / rate);
      if (format === 'u8') view.setUint8(at, Math.round(128 + v * 127));
      else if (format === 's16') view.setInt16(at, Math.round(v * 32767), true);
      else if (format === 's24') {
        const s = Math.round(v * 8388607);
        view.setUint8(at, s & 0xff);
        view.setUint8(at + 1, (s >> 8) & 0xff);
        view.setUint8(at + 2, (s >> 16) & 0xff);
      } else if (format === 's32') view.setInt32(at, Math.round(v * 2147483647), true);
      else if (format === 'f32') view.setFloat32(at, v, true);
      else view.setFloat64(at, v, true);
      at += bytesPer;
    }
  }
  return out;
}

/** Average of 0.5 / (c + 1) over the channels. */
const wavLevel = (channels: number) => Array.from({ length: channels }, (_, c) => 0.5 / (c + 1)).reduce((a, b) => a + b) / channels;

describe('decodeAudio: WAV in every sample format', () => {
  const layouts: [number, number][] = [
    [8000, 1],
    [22_050, 2],
    [44_100, 2],
    [48_000, 1],
  ];
  const formats: SampleFormat[] = ['u8', 's16', 's24', 's32', 'f32', 'f64'];
  // Every sample format, plain and WAVE_FORMAT_EXTENSIBLE, each at two of the rate/channel layouts (all four in turn).
  const cases = formats.flatMap((format, i) =>
    [layouts[i % 4]!, layouts[(i + 1) % 4]!].map(([rate, channels]) => ({ format, rate, channels })),
  );
  it.each(cases)('$format $rate Hz × $channels', async ({ format, rate, channels }) => {
    for (const extensible of [false, true]) {
      const audio = await decodeAudio(makeWav(rate, channels, format, extensible), { sampleRate: RATE });
      expect(audio).toMatchObject({ format: 'wav', sourceSampleRate: rate, channels });
      checkTone(audio, 0.5, 0, wavLevel(channels), false);
    }
  });

  it('6 channels (5.1, WAVE_FORMAT_EXTENSIBLE) are averaged', async () => {
    const audio = await decodeAudio(makeWav(48_000, 6, 's16', true), { sampleRate: RATE });
    expect(audio.channels).toBe(6);
    checkTone(audio, 0.5, 0, wavLevel(6), false);
  });

  it('passes 16 kHz mono through unchanged', async () => {
    const wav = makeWav(RATE, 1, 'f32', false);
    const audio = await decodeAudio(wav, { sampleRate: RATE });
    const original = new Float32Array(wav.buffer.slice(wav.length - (RATE / 2) * 4));
    expect(audio.samples.length).toBe(original.length);
    expect(audio.samples.every((v, i) => v === original[i])).toBe(true);
  });
});

/** Rejects with a 400 invalid_audio (what OpenAI answers for audio it cannot decode) whose message matches. */
async function expectInvalidAudio(bytes: Uint8Array, message: RegExp): Promise<void> {
  const error = await decodeAudio(bytes, { sampleRate: RATE }).then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(InvalidMediaError);
  expect(error).toMatchObject({ status: 400, type: 'invalid_request_error', code: 'invalid_audio', param: 'file' });
  expect((error as Error).message).toMatch(message);
}

describe('decodeAudio: bad input', () => {
  it('an empty buffer → 400 invalid_audio', async () => {
    await expectInvalidAudio(new Uint8Array(0), /empty \(0 bytes\): not a recognised audio format/);
  });

  it('random bytes → 400 invalid_audio listing the supported formats', async () => {
    let seed = 12345;
    const random = new Uint8Array(4096).map(() => ((seed = (seed * 1103515245 + 12345) >>> 0) >>> 16) & 0xff);
    await expectInvalidAudio(random, /not a recognised audio format \(supported: wav, /);
  });

  it('a text file → 400 invalid_audio that quotes none of its bytes (the file may be a secret: /etc/shadow)', async () => {
    const secret = 'root:$6$saltsalt$hash:19000:0:99999:7:::\n';
    const error = await decodeAudio(new TextEncoder().encode(secret), { sampleRate: 16_000 }).then(
      () => undefined,
      (e: unknown) => e as Error,
    );
    expect(error?.message).toMatch(/not a recognised audio format/);
    for (const piece of ['root', '$6$', 'salt', '72 6f 6f 74']) expect(error?.message).not.toContain(piece);
  });

  it('a recognised but unsupported format (MIDI) → 400 invalid_audio naming it', async () => {
    await expectInvalidAudio(new Uint8Array([0x4d, 0x54, 0x68, 0x64, 0, 0, 0, 6, 0, 0, 0, 1, 0, 96]), /detected as 'mid', which is not supported/);
  });

  // Cut at 90 % and at 10 %. (An MP3 or ADTS stream cut exactly between two frames is
  // indistinguishable from a shorter file; these cuts fall inside frames.)
  const truncatable = fixtures.filter((name) => /-(8000|44100)-/.test(name) || /^(adts|mka)/.test(name));
  it.each(truncatable)('%s truncated → 400 invalid_audio naming the format', async (name) => {
    const bytes = readFileSync(new URL(name, TONES));
    const { format } = expectedFor(name);
    for (const keep of [0.9, 0.1]) {
      await expectInvalidAudio(bytes.subarray(0, Math.floor(bytes.length * keep)), new RegExp(`detected as '${format}'.* could not be decoded: .*truncated`));
    }
  });

  it('a known container with a codec lserve does not decode → 400 invalid_audio naming the codec', async () => {
    const patch = (name: string, from: string, to: string) => {
      const bytes = new Uint8Array(readFileSync(new URL(name, TONES)));
      const at = Buffer.from(bytes).indexOf(from);
      expect(at).toBeGreaterThan(0);
      bytes.set(Buffer.from(to), at);
      return bytes;
    };
    await expectInvalidAudio(patch('webm-48000-mono.webm', 'A_OPUS', 'A_FLAC'), /detected as 'webm', which is not supported: its audio track's codec is A_FLAC/);
    await expectInvalidAudio(patch('aac-48000-mono.m4a', 'mp4a', 'Opus'), /detected as 'm4a' \(Opus\), which is not supported: its sound track's codec is 'Opus'/);
    await expectInvalidAudio(patch('opus-48000-mono.ogg', 'OpusHead', 'OpusHeaX'), /detected as 'ogg' \(unknown codec\), which is not supported/);
    const adpcm = makeWav(RATE, 1, 's16', false);
    adpcm.set([0x11, 0x00], 20); // format tag: IMA ADPCM
    await expectInvalidAudio(adpcm, /detected as 'wav', which is not supported: its WAV codec \(format tag 0x0011, IMA ADPCM\) is not PCM/);
  });

  it('a header with no audio → 400 invalid_audio', async () => {
    await expectInvalidAudio(makeWav(RATE, 1, 's16', false, 0), /detected as 'wav' but could not be decoded: it contains no audio samples/);
  });

  it('garbage behind a valid header → 400 invalid_audio from the decoder', async () => {
    const bytes = new Uint8Array(readFileSync(new URL('aac-48000-mono.m4a', TONES)));
    // Destroy the moov box (at the end, as ffmpeg writes it) but keep the box structure.
    const moov = Buffer.from(bytes).lastIndexOf('moov');
    bytes.fill(0x41, moov + 4);
    await expectInvalidAudio(bytes, /detected as 'm4a' but could not be decoded: /);
  });
});

describe('decodeAudio: limits', () => {
  it('audio longer than maxDurationSec → 413 naming the limit', async () => {
    const bytes = readFileSync(new URL('opus-8000-mono.ogg', TONES));
    const error = await decodeAudio(bytes, { sampleRate: RATE, maxDurationSec: 0.75 }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(PayloadTooLargeError);
    expect((error as PayloadTooLargeError).status).toBe(413);
    expect((error as Error).message).toMatch(/longer than the limit of 0\.75 s/);
    await expect(decodeAudio(bytes, { sampleRate: RATE, maxDurationSec: 1 })).resolves.toMatchObject({ duration: 1 });
  });

  it('stops decoding at the limit, long before the end of a long file', async () => {
    // The signal is checked once per piece of ≈ 2 s: count the pieces.
    let pieces = 0;
    const counter = { aborted: false, throwIfAborted: () => void pieces++ } as unknown as AbortSignal;
    const long = makeWav(8000, 1, 's16', false, 20);
    await expect(decodeAudio(long, { sampleRate: RATE, maxDurationSec: 1, signal: counter })).rejects.toThrow(/limit of 1 s/);
    expect(pieces).toBeLessThanOrEqual(2);
    pieces = 0;
    await decodeAudio(long, { sampleRate: RATE, signal: counter });
    expect(pieces).toBeGreaterThan(5);
  });

  it('an aborted signal stops a decode', async () => {
    const controller = new AbortController();
    const decoding = decodeAudio(makeWav(8000, 1, 's16', false, 60), { sampleRate: RATE, signal: controller.signal });
    controller.abort();
    await expect(decoding).rejects.toMatchObject({ name: 'AbortError' });
  });
});

describe('decodeAudio: M4A/AAC without the optional decoder', () => {
  it('→ 400 invalid_audio that names the package, its licence and how to install it', async () => {
    // What Node throws for a package that is not installed.
    const notInstalled = Object.assign(new Error("Cannot find package '@audio/decode-aac' imported from /usr/lib/node_modules/lserve/dist/audio/decode.js"), {
      code: 'ERR_MODULE_NOT_FOUND',
    });
    vi.resetModules();
    vi.doMock('@audio/decode-aac', () => {
      throw notInstalled;
    });
    try {
      const { decodeAudio: decodeWithoutAac } = await import('../../src/audio/decode.js');
      for (const [name, label] of [
        ['aac-48000-mono.m4a', "'m4a' \\(AAC\\)"],
        ['adts-22050-stereo.aac', "'aac'"],
      ] as const) {
        const error = await decodeWithoutAac(readFileSync(new URL(name, TONES)), { sampleRate: RATE }).catch((e: unknown) => e);
        expect((error as Error).constructor.name).toBe('InvalidMediaError');
        expect(error).toMatchObject({ status: 400, code: 'invalid_audio', param: 'file' });
        const message = (error as Error).message;
        expect(message).toMatch(new RegExp(`^The audio was detected as ${label}\\. AAC \\(and ALAC\\) decoding needs the optional package @audio/decode-aac, which is not installed`));
        expect(message).toMatch(/GPL-2\.0/);
        expect(message).toContain('npm install -g @audio/decode-aac');
      }
      // The other formats do not need it.
      await expect(decodeWithoutAac(readFileSync(new URL('opus-48000-mono.ogg', TONES)), { sampleRate: RATE })).resolves.toMatchObject({ format: 'ogg' });
    } finally {
      vi.doUnmock('@audio/decode-aac');
      vi.resetModules();
    }
  });
});
