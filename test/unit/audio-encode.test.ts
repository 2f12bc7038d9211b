import { createHash } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { flacTotalSamples } from '../../src/audio/containers/truncation.js';
import { decodeAudio } from '../../src/audio/decode.js';
import { type AudioEncoder, createEncoder, EncoderEndedError, encodeAudio, type SpeechFormat } from '../../src/audio/encode/index.js';
import { peakHz } from '../helpers/signal.js';

/**
 * The speech encoders against the project's own decoders (decodeAudio):
 * every format, whole file and streamed in odd block sizes, must decode to
 * the input's length and pitch, in time with it; the lossless ones to the
 * same samples. Then the containers' details: WAV sizes, FLAC STREAMINFO,
 * Ogg pages (checked with a CRC written here, bit by bit), the MP3 Info frame.
 */

const RATE = 24_000;

function tone(hz: number, rate: number, seconds: number, amplitude = 0.5): Float32Array {
  const x = new Float32Array(Math.round(rate * seconds));
  for (let i = 0; i < x.length; i++) x[i] = amplitude * Math.sin((2 * Math.PI * hz * i) / rate);
  return x;
}

/** A rising chirp (200 Hz → ~1.2 kHz): unlike a sine, it lines up with a copy of itself at one lag only. */
function chirp(rate: number, seconds: number): Float32Array {
  const x = new Float32Array(Math.round(rate * seconds));
  for (let i = 0; i < x.length; i++) {
    const t = i / rate;
    x[i] = 0.5 * Math.sin(2 * Math.PI * (200 * t + 400 * t * t));
  }
  return x;
}

/** The lag (−range … range) at which `y` best matches `x`, by cross-correlation over x's middle. */
function lagOf(x: Float32Array, y: Float32Array, range: number): number {
  let best = 0;
  let bestScore = -Infinity;
  const from = Math.floor(x.length * 0.25);
  const to = Math.floor(x.length * 0.75);
  for (let lag = -range; lag <= range; lag++) {
    let score = 0;
    for (let i = from; i < to; i++) score += x[i]! * (y[i + lag] ?? 0);
    if (score > bestScore) {
      bestScore = score;
      best = lag;
    }
  }
  return best;
}

/** Writes `x` in blocks of `block` samples (0: all at once); returns the chunks in order. */
function run(encoder: AudioEncoder, x: Float32Array, block = 0): { chunks: Uint8Array[] } {
  const chunks: Uint8Array[] = [];
  const step = block || x.length;
  for (let i = 0; i < x.length; i += step) chunks.push(...encoder.write(x.subarray(i, i + step)));
  chunks.push(...encoder.end());
  return { chunks };
}

async function encode(format: SpeechFormat, x: Float32Array, rate: number, streaming: boolean, block = 0): Promise<Uint8Array> {
  return Buffer.concat(run(await createEncoder(format, rate, { streaming }), x, block).chunks);
}

const int16 = (x: Float32Array) => Int16Array.from(x, (v) => Math.max(-32768, Math.min(32767, Math.round(v * 32768))));

/** MSB-first CRC-32 (0x04C11DB7, init 0), bit by bit: an independent check of the Ogg pages. */
function oggCrc(b: Uint8Array): number {
  let crc = 0;
  for (const byte of b) {
    crc ^= byte << 24;
    for (let k = 0; k < 8; k++) crc = crc & 0x80000000 ? (crc << 1) ^ 0x04c11db7 : crc << 1;
  }
  return crc >>> 0;
}

interface OggPage {
  flags: number;
  granule: bigint;
  sequence: number;
  packets: Uint8Array[];
  crcOk: boolean;
}

/** Pages of an Ogg stream (packets split across pages are joined on the page where they end). */
function oggPages(b: Uint8Array): OggPage[] {
  const pages: OggPage[] = [];
  let partial: Uint8Array[] = [];
  for (let at = 0; at < b.length; ) {
    expect(Buffer.from(b.subarray(at, at + 4)).toString('latin1')).toBe('OggS');
    const view = new DataView(b.buffer, b.byteOffset + at);
    const segments = b[at + 26]!;
    let body = at + 27 + segments;
    const packets: Uint8Array[] = [];
    let start = body;
    for (let i = 0; i < segments; i++) {
      const size = b[at + 27 + i]!;
      body += size;
      if (size < 255) {
        packets.push(Buffer.concat([...partial, b.subarray(start, body)]));
        partial = [];
        start = body;
      }
    }
    if (start < body) partial.push(b.subarray(start, body));
    const page = new Uint8Array(b.subarray(at, body)); // a copy, at offset 0 of its own buffer
    const stored = new DataView(page.buffer).getUint32(22, true);
    page.fill(0, 22, 26);
    pages.push({ flags: b[at + 5]!, granule: view.getBigUint64(6, true), sequence: view.getUint32(18, true), packets, crcOk: oggCrc(page) === stored });
    at = body;
  }
  return pages;
}

describe('encoders: round trip through decodeAudio', () => {
  const x = tone(440, RATE, 1.5);
  // Samples the decoded length may differ by: WAV, FLAC and MP3 files are exact, Opus within one sample.
  const slack: Record<string, number> = { wav: 0, flac: 0, mp3: 0, opus: 1 };

  for (const format of ['wav', 'flac', 'opus', 'mp3'] as const) {
    it(`${format}, whole file: same length and pitch`, async () => {
      const bytes = await encode(format, x, RATE, false, 1000);
      const decoded = await decodeAudio(bytes, { sampleRate: RATE });
      expect(Math.abs(decoded.samples.length - x.length)).toBeLessThanOrEqual(slack[format]!);
      expect(peakHz(decoded.samples, RATE)).toBeCloseTo(440, 0);
    });

    for (const block of [1, 1000, 1920]) {
      it(`${format}, streamed in blocks of ${block}: the chunks decode to the same length and pitch`, async () => {
        const input = block === 1 ? x.subarray(0, RATE * 0.75) : x;
        const bytes = await encode(format, input, RATE, true, block);
        const decoded = await decodeAudio(bytes, { sampleRate: RATE });
        // A streamed MP3 carries no Info frame: decoders keep LAME's delay (576 + 529) in front and ≤ 1 frame of padding behind.
        const extra = decoded.samples.length - input.length;
        if (format === 'mp3') {
          expect(extra).toBeGreaterThanOrEqual(1105);
          expect(extra).toBeLessThanOrEqual(1105 + 576);
        } else {
          expect(Math.abs(extra)).toBeLessThanOrEqual(slack[format]!);
        }
        expect(peakHz(decoded.samples, RATE)).toBeCloseTo(440, 0);
      });
    }
  }

  it.each(['wav', 'flac', 'opus', 'mp3'] as const)('%s: a whole file decodes in time with the input (cross-correlation lag 0)', async (format) => {
    const input = chirp(RATE, 1.2);
    const decoded = await decodeAudio(await encode(format, input, RATE, false), { sampleRate: RATE });
    // Opus decodes at 48 kHz and is resampled back: up to a sample off.
    expect(Math.abs(lagOf(input, decoded.samples, 1500))).toBeLessThanOrEqual(format === 'opus' ? 1 : 0);
  });

  it('a streamed MP3 decodes exactly LAME’s delay late', async () => {
    const input = chirp(RATE, 1.2);
    const decoded = await decodeAudio(await encode('mp3', input, RATE, true, 1920), { sampleRate: RATE });
    expect(lagOf(input, decoded.samples, 1500)).toBe(576 + 529);
  });

  it.each([
    ['wav', 16_000],
    ['flac', 22_050],
    ['flac', 11_111],
    ['opus', 22_050],
    ['opus', 16_000],
    ['mp3', 22_050],
    ['mp3', 16_000],
    ['mp3', 11_111],
    ['mp3', 44_100],
  ] as const)('%s at %i Hz: same length and pitch', async (format, rate) => {
    const input = tone(440, rate, 1.3);
    const encoder = await createEncoder(format, rate);
    const bytes = Buffer.concat(run(encoder, input, 1000).chunks);
    const decoded = await decodeAudio(bytes, { sampleRate: rate });
    // Rates the codec lacks are resampled (Opus 22 050 → 24 000; MP3 11 111 → 12 000): a sample or two of rounding.
    const resampled = encoder.sampleRate !== rate;
    expect(Math.abs(decoded.samples.length - input.length)).toBeLessThanOrEqual(resampled ? 2 : format === 'opus' ? 1 : 0);
    expect(peakHz(decoded.samples, rate)).toBeCloseTo(440, 0);
  });

  it('encodeAudio returns one whole file', async () => {
    const bytes = await encodeAudio('flac', x, RATE);
    expect((await decodeAudio(bytes, { sampleRate: RATE })).samples.length).toBe(x.length);
  });
});

describe('streaming: bytes leave with the first block', () => {
  it.each(['wav', 'pcm', 'flac', 'opus', 'mp3'] as const)('%s', async (format) => {
    const encoder = await createEncoder(format, RATE, { streaming: true });
    // 0.2 s: one FLAC block (4096 samples) and a few MP3 frames (LAME holds back about two).
    const first = encoder.write(tone(440, RATE, 0.2));
    expect(first.reduce((n, c) => n + c.length, 0)).toBeGreaterThan(0);
    encoder.end();
  });

  it('whole-file WAV, FLAC and MP3 hold everything until end()', async () => {
    for (const format of ['wav', 'flac', 'mp3'] as const) {
      const encoder = await createEncoder(format, RATE);
      expect(encoder.write(tone(440, RATE, 0.5))).toEqual([]);
      expect(encoder.end().length).toBeGreaterThan(0);
    }
  });

  it.each(['wav', 'pcm', 'flac', 'mp3'] as const)('%s: the stream is the same bytes whatever the block size', async (format) => {
    const x = tone(440, RATE, 0.6);
    const reference = await encode(format, x, RATE, true);
    for (const block of [1, 777, 1920]) expect(Buffer.compare(await encode(format, x, RATE, true, block), reference)).toBe(0);
  });
});

describe('wav and pcm', () => {
  it('a whole WAV states its exact sizes; a streamed one 0xFFFFFFFF, and decodes to the end', async () => {
    const x = tone(440, RATE, 0.3);
    const whole = await encode('wav', x, RATE, false);
    const view = new DataView(whole.buffer, whole.byteOffset);
    expect(whole.length).toBe(44 + 2 * x.length);
    expect(view.getUint32(4, true)).toBe(whole.length - 8);
    expect(view.getUint32(40, true)).toBe(2 * x.length);
    expect(view.getUint32(24, true)).toBe(RATE);

    const streamed = await encode('wav', x, RATE, true, 1000);
    const sview = new DataView(streamed.buffer, streamed.byteOffset);
    expect(sview.getUint32(4, true)).toBe(0xffffffff);
    expect(sview.getUint32(40, true)).toBe(0xffffffff);
    expect(Buffer.compare(streamed.subarray(44), whole.subarray(44))).toBe(0);
    const decoded = await decodeAudio(streamed, { sampleRate: RATE });
    const pcm = int16(x);
    expect(decoded.samples.length).toBe(pcm.length);
    expect(pcm.filter((v, i) => decoded.samples[i]! * 32768 !== v).length).toBe(0);
  });

  it('pcm is 16-bit little-endian: rounded, clamped, NaN as 0', async () => {
    const encoder = await createEncoder('pcm', 16_000);
    expect(encoder.sampleRate).toBe(16_000);
    expect(encoder.contentType).toBe('application/octet-stream');
    const bytes = Buffer.concat([...encoder.write(Float32Array.of(0, 0.5, -0.5, 1, -1, 1.5, -2, Number.NaN, 1 / 32768)), ...encoder.end()]);
    const samples = Array.from({ length: bytes.length / 2 }, (_, i) => bytes.readInt16LE(2 * i));
    expect(samples).toEqual([0, 16384, -16384, 32767, -32768, 32767, -32768, 0, 1]);
  });

  it('an empty stream is a valid header (WAV) or nothing (PCM)', async () => {
    const wav = await encode('wav', new Float32Array(0), RATE, true);
    expect(wav.length).toBe(44);
    expect(await encode('pcm', new Float32Array(0), RATE, true)).toHaveLength(0);
  });
});

describe('flac', () => {
  const seeded = (seed: number) => () => ((seed = (seed * 1103515245 + 12345) >>> 0) / 2 ** 32) * 2 - 1;

  it.each([
    ['speech-like tone', tone(220, RATE, 0.9, 0.3)],
    ['white noise (verbatim subframes)', Float32Array.from({ length: 9000 }, seeded(7))],
    ['silence (constant subframes)', new Float32Array(10_000)],
    // Ends in a little silence: a last frame of full-scale samples is one codec-parser may lose (see the next test).
    ['full-scale square wave (large residuals)', Float32Array.from({ length: 9000 }, (_, i) => (i >= 8900 ? 0 : Math.floor(i / 7) % 2 ? 1 : -1))],
    ['exactly one block', tone(440, RATE, 4096 / RATE)],
    ['one block and one sample', tone(440, RATE, 4097 / RATE)],
    ['five samples', Float32Array.of(0.1, -0.2, 0.3, 0.25, -0.9)],
  ])('%s: lossless, exact STREAMINFO', async (_name, x) => {
    const bytes = await encode('flac', x, RATE, false, 1000);
    const decoded = await decodeAudio(bytes, { sampleRate: RATE });
    const pcm = int16(x);
    // The FLAC decoder scales by 1/32767: undo that and count the samples that differ.
    expect(decoded.samples.length).toBe(pcm.length);
    expect(pcm.filter((v, i) => Math.round(decoded.samples[i]! * 32767) !== v).length).toBe(0);
    expect(flacTotalSamples(bytes)).toBe(x.length);
    // STREAMINFO's MD5 (bytes 26–41) is that of the 16-bit little-endian samples.
    const md5 = createHash('md5').update(new Uint8Array(pcm.buffer)).digest();
    expect(Buffer.compare(bytes.subarray(26, 42), md5)).toBe(0);
  });

  it('the last frame survives codec-parser (the FLAC framing decodeAudio uses), whatever ends the file', async () => {
    // Before the last frame was coded with care, ≈ 1 file in 16 lost it: a silent last block (a 12-byte
    // frame), a last block of 1–3 samples, a 0xFF byte near the end.
    const random = seeded(11);
    const cases: Float32Array[] = [];
    for (const rest of [1, 2, 3, 17, 1808]) cases.push(new Float32Array(2 * 4096 + rest)); // silence
    for (let i = 0; i < 24; i++) {
      const length = 4096 + Math.floor((random() + 1) * 4096);
      const level = [0.002, 0.05, 0.4][i % 3]!;
      cases.push(Float32Array.from({ length }, (_, j) => level * (0.7 * Math.sin(j / 9) + 0.3 * random())));
    }
    for (const x of cases) {
      const decoded = await decodeAudio(await encode('flac', x, RATE, false), { sampleRate: RATE });
      expect(decoded.samples.length).toBe(x.length);
    }
  });

  it('a stream has the same frames behind a STREAMINFO with unknown totals', async () => {
    const x = tone(300, RATE, 0.7);
    const whole = await encode('flac', x, RATE, false);
    const streamed = await encode('flac', x, RATE, true, 1920);
    expect(flacTotalSamples(streamed)).toBe(0);
    expect(streamed.subarray(26, 42).every((b) => b === 0)).toBe(true);
    expect(Buffer.compare(streamed.subarray(42), whole.subarray(42))).toBe(0);
    expect((await decodeAudio(streamed, { sampleRate: RATE })).samples.length).toBe(x.length);
  });

  it('compresses a tone well below raw PCM', async () => {
    const x = tone(220, RATE, 2, 0.3);
    expect((await encode('flac', x, RATE, false)).length).toBeLessThan(0.5 * 2 * x.length);
  });
});

describe('opus', () => {
  it('Ogg pages: OpusHead, OpusTags, audio; valid CRCs; the last page ends the stream at pre-skip + length', async () => {
    const x = tone(440, RATE, 1.1);
    const encoder = await createEncoder('opus', RATE);
    expect(encoder.contentType).toBe('audio/ogg; codecs=opus');
    const bytes = Buffer.concat(run(encoder, x, 1000).chunks);
    const pages = oggPages(bytes);
    expect(pages.every((p) => p.crcOk)).toBe(true);
    expect(pages.map((p) => p.sequence)).toEqual(pages.map((_, i) => i));
    expect(pages[0]!.flags).toBe(2);
    expect(Buffer.from(pages[0]!.packets[0]!.subarray(0, 8)).toString()).toBe('OpusHead');
    expect(pages[0]!.packets).toHaveLength(1);
    expect(Buffer.from(pages[1]!.packets[0]!.subarray(0, 8)).toString()).toBe('OpusTags');
    expect(pages[1]!.packets).toHaveLength(1);
    const head = pages[0]!.packets[0]!;
    const preSkip = head[10]! | (head[11]! << 8);
    expect(preSkip).toBeGreaterThan(0);
    expect(head[12]! | (head[13]! << 8) | (head[14]! << 16)).toBe(RATE);
    const last = pages[pages.length - 1]!;
    expect(last.flags & 4).toBe(4);
    expect(last.granule).toBe(BigInt(preSkip + x.length * 2));
    // 20 ms packets: at least length + pre-skip worth of them.
    const packets = pages.slice(2).reduce((n, p) => n + p.packets.length, 0);
    expect(packets * 960).toBeGreaterThanOrEqual(x.length * 2 + preSkip);
    expect((packets - 1) * 960).toBeLessThan(x.length * 2 + preSkip);
    // Granule positions never go back.
    const granules = pages.slice(2).map((p) => p.granule);
    for (let i = 1; i < granules.length; i++) expect(granules[i]! >= granules[i - 1]!).toBe(true);
  });

  it('a stream sends its header pages with the first block, however short', async () => {
    const encoder = await createEncoder('opus', RATE, { streaming: true });
    const first = encoder.write(new Float32Array(10));
    expect(first).toHaveLength(2);
    expect(oggPages(Buffer.concat(first)).map((p) => p.packets.length)).toEqual([1, 1]);
    encoder.end();
  });

  it('an encoder keeps working while others are created beside it (wasm memory growth)', async () => {
    const x = tone(440, RATE, 1);
    const a = await createEncoder('opus', RATE);
    const chunks = [...a.write(x.subarray(0, RATE / 2))];
    const others = await Promise.all(Array.from({ length: 200 }, () => createEncoder('opus', RATE)));
    chunks.push(...a.write(x.subarray(RATE / 2)), ...a.end());
    for (const other of others) other.end();
    const decoded = await decodeAudio(Buffer.concat(chunks), { sampleRate: RATE });
    expect(decoded.samples.length).toBe(x.length);
    expect(peakHz(decoded.samples, RATE)).toBeCloseTo(440, 0);
  });
});

describe('mp3', () => {
  it('a whole file opens with an Info frame holding the frame count, delay and padding', async () => {
    const x = tone(440, RATE, 1);
    const bytes = await encode('mp3', x, RATE, false);
    // MPEG-2 layer III mono: 4-byte header + 9 bytes of side information, then the tag.
    expect(Buffer.from(bytes.subarray(13, 17)).toString()).toBe('Info');
    const view = new DataView(bytes.buffer, bytes.byteOffset);
    const frames = view.getUint32(21, false);
    expect(view.getUint32(25, false)).toBe(bytes.length);
    const lame = 13 + 120;
    expect(Buffer.from(bytes.subarray(lame, lame + 4)).toString()).toBe('LAME');
    const delay = (bytes[lame + 21]! << 4) | (bytes[lame + 22]! >> 4);
    const padding = ((bytes[lame + 22]! & 0xf) << 8) | bytes[lame + 23]!;
    expect(delay).toBe(576);
    expect(frames * 576).toBe(delay + x.length + padding);
  });

  it('a streamed file has no Info frame', async () => {
    const bytes = await encode('mp3', tone(440, RATE, 0.5), RATE, true);
    expect(Buffer.from(bytes.subarray(0, 200)).includes('Info')).toBe(false);
    expect(bytes[0]).toBe(0xff); // straight into the first audio frame
  });
});

describe('errors', () => {
  it('rejects an unknown format and a bad sample rate', async () => {
    await expect(createEncoder('aac' as SpeechFormat, RATE)).rejects.toThrow(/Unknown speech format 'aac'/);
    await expect(createEncoder('wav', 0)).rejects.toThrow(RangeError);
    await expect(createEncoder('mp3', 24_000.5)).rejects.toThrow(RangeError);
  });

  it.each(['wav', 'pcm', 'flac', 'opus', 'mp3'] as const)('%s: write or end after end throws', async (format) => {
    const encoder = await createEncoder(format, RATE, { streaming: true });
    encoder.end();
    expect(() => encoder.write(new Float32Array(10))).toThrow(EncoderEndedError);
    expect(() => encoder.end()).toThrow(EncoderEndedError);
  });
});
