import { ascii, startsWith, u16be, u16le, u32be, u32le } from './bytes.js';
import { UnsupportedCodecError } from './errors.js';

/**
 * Uncompressed audio in WAV, AIFF/AIFC and CAF: where the sample frames are
 * and how they are stored (rate, channels, width, encoding, byte order), read
 * from the fmt/COMM/desc chunk. The conversion to floats is in
 * ../decoders/pcm.ts.
 */

/** Where the samples of a PCM file are and how they are stored. */
export interface PcmLayout {
  /** Byte range of the sample frames in the file (clamped to the bytes present). */
  start: number;
  end: number;
  sampleRate: number;
  channels: number;
  /** Bytes of one sample of one channel (a 20-bit sample in 3 bytes: 3), and of one frame (all channels). */
  sampleBytes: number;
  frameBytes: number;
  /** int: signed two's complement (left-justified); uint: unsigned 8-bit (WAV); float: IEEE; alaw/ulaw: G.711. */
  encoding: 'int' | 'uint' | 'float' | 'alaw' | 'ulaw';
  littleEndian: boolean;
  /** The codec, as the error messages name it. */
  codec: string;
}

/** The PCM layout of a WAV, AIFF or CAF file; throws an Error naming the problem (a compressed codec, a missing chunk). */
export function pcmLayout(b: Uint8Array, format: string): PcmLayout {
  const layout = format === 'wav' ? wavLayout(b) : format === 'aiff' ? aiffLayout(b) : cafLayout(b);
  const { channels, sampleRate, sampleBytes, encoding } = layout;
  if (!(channels >= 1 && channels <= 64)) throw new Error(`its header declares ${channels} channels`);
  if (!(sampleRate >= 1 && sampleRate <= 10_000_000) || !Number.isFinite(sampleRate)) throw new Error(`its header declares a sample rate of ${sampleRate} Hz`);
  const valid = encoding === 'float' ? sampleBytes === 4 || sampleBytes === 8 : encoding === 'int' ? sampleBytes >= 1 && sampleBytes <= 4 : sampleBytes === 1;
  if (!valid) throw new UnsupportedCodecError(`its header declares ${sampleBytes * 8}-bit ${encoding} samples, which lserve does not read`);
  layout.frameBytes = channels * sampleBytes;
  layout.end = Math.min(layout.end, b.length);
  return layout;
}

const WAV_TAGS: Record<number, string> = { 2: 'MS ADPCM', 0x11: 'IMA ADPCM', 0x31: 'GSM 6.10', 0x50: 'MPEG', 0x55: 'MP3', 0xff: 'AAC', 0x1610: 'AAC', 0x2000: 'AC-3' };

function wavLayout(b: Uint8Array): PcmLayout {
  let pos = 12;
  let fmt: Omit<PcmLayout, 'start' | 'end'> | undefined;
  while (pos + 8 <= b.length) {
    const id = ascii(b, pos, 4);
    const size = u32le(b, pos + 4);
    const data = pos + 8;
    if (id === 'fmt ') {
      if (size < 16 || data + 16 > b.length) throw new Error('its WAV fmt chunk is too short');
      let tag = u16le(b, data);
      if (tag === 0xfffe && size >= 40 && data + 26 <= b.length) tag = u16le(b, data + 24); // WAVE_FORMAT_EXTENSIBLE: the sub-format GUID starts with the tag
      const channels = u16le(b, data + 2);
      const blockAlign = u16le(b, data + 12);
      const bits = u16le(b, data + 14);
      const sampleBytes = channels > 0 && blockAlign % channels === 0 && blockAlign > 0 ? blockAlign / channels : Math.ceil(bits / 8);
      const encoding = tag === 1 ? (sampleBytes === 1 ? 'uint' : 'int') : tag === 3 ? 'float' : tag === 6 ? 'alaw' : tag === 7 ? 'ulaw' : undefined;
      if (!encoding) {
        const name = WAV_TAGS[tag];
        throw new UnsupportedCodecError(`its WAV codec (format tag 0x${tag.toString(16).padStart(4, '0')}${name ? `, ${name}` : ''}) is not PCM (in WAV lserve reads integer PCM, float, A-law and µ-law)`);
      }
      const codec = tag === 1 ? `${bits}-bit PCM` : tag === 3 ? `${bits}-bit float` : tag === 6 ? 'A-law' : 'µ-law';
      fmt = { sampleRate: u32le(b, data + 4), channels, sampleBytes, frameBytes: 0, encoding, littleEndian: true, codec };
    } else if (id === 'data') {
      if (!fmt) throw new Error('its WAV data chunk comes before the fmt chunk');
      // 0 and 0xFFFFFFFF: written while streaming (or RF64, whose real size is in ds64): the samples run to the end of the file.
      const end = size === 0 || size === 0xffffffff ? b.length : data + size;
      return { ...fmt, start: data, end };
    }
    pos = data + size + (size & 1);
  }
  throw new Error(fmt ? 'it has no WAV data chunk' : 'it has no WAV fmt chunk');
}

/** IEEE 754 80-bit extended (AIFF's sample rate). */
function extended80(b: Uint8Array, at: number): number {
  const exponent = u16be(b, at) & 0x7fff;
  const mantissa = u32be(b, at + 2) * 2 ** 32 + u32be(b, at + 6);
  return exponent === 0 && mantissa === 0 ? 0 : mantissa * 2 ** (exponent - 16383 - 63);
}

function aiffLayout(b: Uint8Array): PcmLayout {
  const aifc = startsWith(b, 8, 'AIFC');
  let pos = 12;
  let comm: (Omit<PcmLayout, 'start' | 'end'> & { frames: number }) | undefined;
  let ssnd: { start: number; end: number } | undefined;
  while (pos + 8 <= b.length && !(comm && ssnd)) {
    const id = ascii(b, pos, 4);
    const size = u32be(b, pos + 4);
    const data = pos + 8;
    if (id === 'COMM') {
      if (size < 18 || data + 18 > b.length) throw new Error('its AIFF COMM chunk is too short');
      const bits = u16be(b, data + 6);
      const compression = aifc && size >= 22 ? ascii(b, data + 18, 4) : 'NONE';
      const kinds: Record<string, [PcmLayout['encoding'], boolean, number]> = {
        NONE: ['int', false, Math.ceil(bits / 8)],
        twos: ['int', false, Math.ceil(bits / 8)],
        sowt: ['int', true, Math.ceil(bits / 8)],
        fl32: ['float', false, 4],
        FL32: ['float', false, 4],
        fl64: ['float', false, 8],
        FL64: ['float', false, 8],
        ulaw: ['ulaw', false, 1],
        ULAW: ['ulaw', false, 1],
        alaw: ['alaw', false, 1],
        ALAW: ['alaw', false, 1],
      };
      const kind = kinds[compression];
      if (!kind) throw new UnsupportedCodecError(`its AIFF-C compression '${compression.trim()}' is not PCM (in AIFF lserve reads integer PCM, float, A-law and µ-law)`);
      const [encoding, littleEndian, sampleBytes] = kind;
      comm = {
        channels: u16be(b, data),
        frames: u32be(b, data + 2),
        sampleRate: extended80(b, data + 8),
        sampleBytes,
        frameBytes: 0,
        encoding,
        littleEndian,
        codec: encoding === 'int' ? `${bits}-bit PCM` : encoding === 'float' ? `${sampleBytes * 8}-bit float` : encoding === 'alaw' ? 'A-law' : 'µ-law',
      };
    } else if (id === 'SSND') {
      ssnd = { start: data + 8 + (data + 8 <= b.length ? u32be(b, data) : 0), end: data + size };
    }
    pos = data + size + (size & 1);
  }
  if (!comm) throw new Error('it has no AIFF COMM chunk');
  if (!ssnd) throw new Error('it has no AIFF SSND chunk');
  const { frames, ...layout } = comm;
  // A frame count of 0 with samples present: written while streaming; the SSND chunk says how many there are.
  const declared = frames > 0 ? ssnd.start + frames * layout.channels * layout.sampleBytes : ssnd.end;
  return { ...layout, start: ssnd.start, end: Math.min(ssnd.end, declared) };
}

function cafLayout(b: Uint8Array): PcmLayout {
  let pos = 8;
  let desc: Omit<PcmLayout, 'start' | 'end'> | undefined;
  while (pos + 12 <= b.length) {
    const id = ascii(b, pos, 4);
    const high = u32be(b, pos + 4);
    const low = u32be(b, pos + 8);
    const data = pos + 12;
    const unknownSize = high === 0xffffffff && low === 0xffffffff;
    const size = high * 2 ** 32 + low;
    if (id === 'desc') {
      if (size < 32 || data + 32 > b.length) throw new Error('its CAF desc chunk is too short');
      const view = new DataView(b.buffer, b.byteOffset + data, 32);
      const formatId = ascii(b, data + 8, 4);
      const flags = view.getUint32(12);
      const bytesPerPacket = view.getUint32(16);
      const channels = view.getUint32(24);
      const bits = view.getUint32(28);
      const encoding = formatId === 'lpcm' ? (flags & 1 ? 'float' : 'int') : formatId === 'alaw' ? 'alaw' : formatId === 'ulaw' ? 'ulaw' : undefined;
      if (!encoding) throw new UnsupportedCodecError(`its CAF codec '${formatId.trim()}' is not PCM (in CAF lserve reads integer PCM, float, A-law and µ-law)`);
      const sampleBytes = encoding === 'alaw' || encoding === 'ulaw' ? 1 : channels > 0 && bytesPerPacket % channels === 0 && bytesPerPacket > 0 ? bytesPerPacket / channels : Math.ceil(bits / 8);
      desc = {
        sampleRate: view.getFloat64(0),
        channels,
        sampleBytes,
        frameBytes: 0,
        encoding,
        littleEndian: (flags & 2) !== 0,
        codec: encoding === 'int' ? `${bits}-bit PCM` : encoding === 'float' ? `${bits}-bit float` : encoding === 'alaw' ? 'A-law' : 'µ-law',
      };
    } else if (id === 'data') {
      if (!desc) throw new Error('its CAF data chunk comes before the desc chunk');
      // The data chunk opens with a 4-byte edit count; size −1: still being written, the samples run to the end.
      return { ...desc, start: data + 4, end: unknownSize ? b.length : data + size };
    }
    if (unknownSize) break;
    pos = data + size;
  }
  throw new Error(desc ? 'it has no CAF data chunk' : 'it has no CAF desc chunk');
}
