/**
 * How the container readers report a bad file: UnsupportedCodecError for a
 * sound file in a codec lserve does not decode (decode.ts says it is
 * 'not supported' rather than 'could not be decoded'), and the one wording of "declares
 * N bytes but only M are present" that the truncation checks and the
 * demuxers share.
 */

/** Thrown where a file is sound but its codec is one lserve does not decode ('not supported', not 'could not be decoded'). */
export class UnsupportedCodecError extends Error {}

/** The message for a structure that declares more bytes than the file holds. */
export const missing = (declared: number, present: number, what: string) =>
  `the file is truncated: ${what} declares ${declared} bytes but only ${present} are present`;
