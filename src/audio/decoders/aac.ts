import { MissingDecoderError, reasonOf, type PieceDecoder } from './piece.js';

/**
 * M4A/MP4 (AAC, ALAC) and raw AAC (ADTS) through the OPTIONAL package
 * @audio/decode-aac (FAAD2, GPL-2.0), which lserve does not depend on: loaded
 * when the user has installed it, else a MissingDecoderError that says how
 * (a 400 from decodeAudio). Kept apart so that the licence boundary is one file.
 */

/** The optional AAC/ALAC decoder: GPL-2.0 (FAAD2), so never a dependency of lserve; used when the user installed it. */
const AAC_PACKAGE = '@audio/decode-aac';

/** Whether `error` (or one it wraps: a loader's, a test's mock) says `name` is not installed. */
function isNotInstalled(error: unknown, name: string): boolean {
  for (let e = error, depth = 0; e instanceof Error && depth < 4; e = e.cause, depth++) {
    const code = (e as { code?: unknown }).code;
    if ((code === 'ERR_MODULE_NOT_FOUND' || code === 'MODULE_NOT_FOUND') && e.message.includes(name)) return true;
  }
  return false;
}

type AacModule = typeof import('@audio/decode-aac');
let aacModule: Promise<AacModule> | undefined;

/**
 * M4A/MP4 (AAC or ALAC) and ADTS through @audio/decode-aac when the user has
 * installed it: it reads the MP4 container itself (and trims the encoder's
 * priming by the edit list), so the whole file is fed to it in pieces.
 */
export async function openAac(): Promise<PieceDecoder> {
  aacModule ??= import(AAC_PACKAGE) as Promise<AacModule>;
  let module: AacModule;
  try {
    module = await aacModule;
  } catch (error) {
    aacModule = undefined; // installed later: found on the next request, no restart needed
    if (isNotInstalled(error, AAC_PACKAGE)) {
      throw new MissingDecoderError(
        `AAC (and ALAC) decoding needs the optional package ${AAC_PACKAGE}, which is not installed. ` +
          `lserve does not bundle it because it is GPL-2.0 licensed (it is FAAD2 compiled to WebAssembly) and lserve is MIT. ` +
          `To accept M4A/AAC, install it where lserve can load it: \`npm install -g ${AAC_PACKAGE}\` next to a global lserve, ` +
          `or \`npm install ${AAC_PACKAGE}\` in the project that depends on lserve; ` +
          `or convert the audio first (e.g. \`ffmpeg -i input.m4a output.flac\`).`,
      );
    }
    throw new Error(`the optional AAC decoder ${AAC_PACKAGE} could not be loaded: ${reasonOf(error)}`);
  }
  const decoder = await module.decoder();
  return {
    decode: async (piece) => decoder.decode(piece),
    flush: async () => decoder.flush(),
    free: () => decoder.free(),
  };
}
