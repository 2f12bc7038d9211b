/** The response formats of POST /v1/audio/speech (OpenAI's `response_format` values lserve produces). */
export const SPEECH_FORMATS = ['wav', 'mp3', 'opus', 'flac', 'pcm'] as const;
export type SpeechFormat = (typeof SPEECH_FORMATS)[number];

/**
 * One audio stream being encoded: mono float samples in, bytes out, in order.
 * Concatenating everything `write` and `end` return gives the file.
 */
export interface AudioEncoder {
  readonly format: SpeechFormat;
  /** MIME type for the Content-Type header. */
  readonly contentType: string;
  /** File name extension, without the dot. */
  readonly extension: string;
  /**
   * Sample rate of the encoded audio: the input's rate, except Opus, which
   * encodes at one of its own rates (8/12/16/24/48 kHz; another input rate is
   * resampled to the next one up). For `pcm` this is the rate the client must
   * be told (a header), since raw PCM carries none.
   */
  readonly sampleRate: number;
  /**
   * Encodes the next block (mono, [-1, 1], at the rate given to
   * createEncoder); returns the bytes that are final now, possibly none.
   * Whole-file WAV, FLAC and MP3 (streaming false) return nothing here and
   * everything from `end`: their headers need the totals.
   */
  write(samples: Float32Array): Uint8Array[];
  /** Ends the stream: the remaining bytes. The encoder cannot be used afterwards. */
  end(): Uint8Array[];
}

export interface EncoderOptions {
  /**
   * true: bytes leave as soon as they are encoded, with headers that do not
   * know the length (WAV sizes 0xFFFFFFFF, FLAC total 0, MP3 without a gapless
   * tag). false (default): a whole file with exact headers, returned by `end`.
   */
  streaming?: boolean;
}

/** Thrown by an encoder used after `end`. */
export class EncoderEndedError extends Error {
  constructor(format: string) {
    super(`The ${format} encoder has already ended`);
    this.name = 'EncoderEndedError';
  }
}
