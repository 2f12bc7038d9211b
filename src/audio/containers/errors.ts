/**
 * How the container readers report a bad file: UnsupportedCodecError for a
 * sound file in a codec lserve does not decode (decode.ts turns it into a
 * 415 'unsupported' rather than 'corrupt'), and the one wording of "declares
 * N bytes but only M are present" that the truncation checks and the
 * demuxers share.
 */

/** Thrown where a file is sound but its codec is one lserve does not decode (a 415 'unsupported', not 'corrupt'). */
export class UnsupportedCodecError extends Error {}

/** The message for a structure that declares more bytes than the file holds. */
export const missing = (declared: number, present: number, what: string) =>
  `the file is truncated: ${what} declares ${declared} bytes but only ${present} are present`;
