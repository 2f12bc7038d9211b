import { readdir, stat } from 'node:fs/promises';
import path from 'node:path';
import type { MediaInput } from './catalog.js';
import { StoreError } from './errors.js';

/**
 * Multimodal projectors: llama.cpp's `mmproj` GGUF, the vision and/or audio
 * encoder a chat model is paired with (role `mmproj`). A projector is known
 * by the keys llama.cpp's converter writes (conversion/base.py, MmprojModel)
 * and its loader reads (tools/mtmd/clip.cpp, clip-impl.h):
 * `general.architecture` "clip", `clip.has_vision_encoder` and
 * `clip.has_audio_encoder`, the projector type in `clip.projector_type` (or,
 * in a file with both encoders, `clip.vision.projector_type` and
 * `clip.audio.projector_type`), and `clip.vision.projection_dim` /
 * `clip.audio.projection_dim`: the width of the text model it feeds, which
 * llama.cpp's loader checks against the model's at load.
 *
 * Only the header is read, through node-llama-cpp's GGUF parser: plain
 * JavaScript, imported when a projector is looked at, never the native
 * addon, so no model loads and `lserve list` never pays for it.
 */

export interface Projector {
  /** Absolute path. */
  file: string;
  size: number;
  /** What it lets the model take besides text. */
  input: MediaInput[];
  /** Width of the text model it was made for (its embedding length); undefined when the file does not say. */
  width?: number;
}

/**
 * Audio encoders that are not chat input: the speaker encoders of
 * text-to-speech models (llama.cpp's Qwen3-TTS and Pocket TTS conversions
 * set `clip.has_audio_encoder` on them too).
 */
const SPEAKER_ENCODERS = new Set(['qwen3tts_spkenc', 'pockettts_spkenc']);

/** Keys that make a model file's header large and say nothing about its width. */
const TOKENIZER_KEYS = ['tokenizer.ggml.tokens', 'tokenizer.ggml.merges', 'tokenizer.ggml.token_type', 'tokenizer.ggml.scores'];

type Tree = { [key: string]: unknown };

/** A nested metadata value (node-llama-cpp splits keys at dots), or undefined. */
function field(tree: unknown, ...keys: string[]): unknown {
  let node = tree;
  for (const key of keys) {
    if (typeof node !== 'object' || node === null) return undefined;
    node = (node as Tree)[key];
  }
  return node;
}

async function readHeader(file: string, name: string): Promise<Tree> {
  const { readGgufFileInfo } = await import('node-llama-cpp');
  try {
    const info = await readGgufFileInfo(file, { readTensorInfo: false, logWarnings: false, sourceType: 'filesystem', spliceSplitFiles: false, ignoreKeys: TOKENIZER_KEYS });
    return info.metadata as unknown as Tree;
  } catch (error) {
    // The parser's own messages may quote the file's first bytes; an error message never does.
    throw new StoreError(`${name} is not a GGUF file (or it is damaged)`, 'invalid_mmproj', error);
  }
}

/**
 * Reads a projector's header; a missing file or one that is not a projector
 * is a StoreError `invalid_mmproj` naming it as `label` (default: its path).
 */
export async function readProjector(file: string, label?: string): Promise<Projector> {
  const absolute = path.resolve(file);
  const name = label ?? absolute;
  const info = await stat(absolute).catch(() => undefined);
  if (!info) throw new StoreError(`No such file: ${name}`, 'invalid_mmproj');
  if (!info.isFile()) throw new StoreError(`Not a regular file: ${name}`, 'invalid_mmproj');
  const metadata = await readHeader(absolute, name);
  const architecture = field(metadata, 'general', 'architecture');
  const clip = field(metadata, 'clip');
  if (architecture !== 'clip' || typeof clip !== 'object') {
    const what = typeof architecture === 'string' ? `a '${architecture}' model` : 'no projector';
    throw new StoreError(`${name} is ${what}, not a multimodal projector (its GGUF metadata has no clip encoder keys)`, 'invalid_mmproj');
  }
  const projectorType = (modality: string) => field(clip, modality, 'projector_type') ?? field(clip, 'projector_type');
  const input: MediaInput[] = [];
  if (field(clip, 'has_vision_encoder') === true) input.push('image');
  if (field(clip, 'has_audio_encoder') === true && !SPEAKER_ENCODERS.has(String(projectorType('audio')))) input.push('audio');
  if (input.length === 0) {
    throw new StoreError(`${name} is a projector with no vision or audio encoder for chat input (neither clip.has_vision_encoder nor clip.has_audio_encoder is set)`, 'invalid_mmproj');
  }
  const width = [field(clip, 'vision', 'projection_dim'), field(clip, 'audio', 'projection_dim')].find((w) => typeof w === 'number');
  return { file: absolute, size: info.size, input, width: width as number | undefined };
}

/** The embedding length of a GGUF text model; undefined when its header cannot be read or does not say. */
export async function modelWidth(file: string): Promise<number | undefined> {
  try {
    const metadata = await readHeader(file, file);
    const architecture = field(metadata, 'general', 'architecture');
    const width = typeof architecture === 'string' ? field(metadata, architecture, 'embedding_length') : undefined;
    return typeof width === 'number' ? width : undefined;
  } catch {
    return undefined;
  }
}

/** Why a projector cannot feed a model of this width (llama.cpp refuses such a pair at load), or undefined when it can or either width is unknown. */
export function widthMismatch(projector: Projector, width: number | undefined, label = path.basename(projector.file)): string | undefined {
  if (projector.width === undefined || width === undefined || projector.width === width) return undefined;
  return `${label} was made for a text model of width ${projector.width}, and this model's width is ${width}`;
}

/** A projector's file name as llama.cpp's converter and users write it: mmproj-X.gguf, X-mmproj-f16.gguf, X.mmproj.gguf, mmproj.gguf. */
const PROJECTOR_NAME = /(^|[-_.])mmproj([-_.]|$)/i;

/** The stem of a projector's name without its `mmproj` word: what it shares with its model's name. */
function stemOf(name: string): string {
  return name
    .replace(/\.gguf$/i, '')
    .replace(PROJECTOR_NAME, (_, before: string, after: string) => (before && after ? before : ''))
    .toLowerCase();
}

function sharedPrefix(a: string, b: string): number {
  let n = 0;
  while (n < a.length && n < b.length && a[n] === b[n]) n++;
  return n;
}

export interface FoundProjector {
  /** The projector taken; undefined when none beside the model is one for it. */
  chosen?: Projector;
  /** Every file named like a projector beside the model, best match first. */
  candidates: string[];
  /** Candidates passed over, with why. */
  skipped: { file: string; reason: string }[];
}

/**
 * The projector beside a GGUF model, as llama.cpp's tools and users lay a
 * model out (`model.gguf` and `mmproj-….gguf` in one folder). Files named
 * like a projector are ranked by how long a name prefix they share with the
 * model (after their `mmproj` word is set aside), and the first that is a
 * projector for a model of this width is taken.
 */
export async function findProjector(modelFile: string): Promise<FoundProjector> {
  const absolute = path.resolve(modelFile);
  const dir = path.dirname(absolute);
  const own = path.basename(absolute);
  const stem = own.replace(/\.gguf$/i, '').toLowerCase();
  const names = (await readdir(dir).catch(() => [] as string[])).filter((n) => n !== own && /\.gguf$/i.test(n) && PROJECTOR_NAME.test(n.replace(/\.gguf$/i, '')));
  const ranked = names
    .map((name) => ({ name, shared: sharedPrefix(stemOf(name), stem) }))
    .sort((a, b) => b.shared - a.shared || a.name.localeCompare(b.name))
    .map((c) => path.join(dir, c.name));
  const found: FoundProjector = { candidates: ranked, skipped: [] };
  if (ranked.length === 0) return found;
  const width = await modelWidth(absolute);
  for (const file of ranked) {
    try {
      const projector = await readProjector(file);
      const mismatch = widthMismatch(projector, width);
      if (mismatch) {
        found.skipped.push({ file, reason: mismatch });
        continue;
      }
      found.chosen = projector;
      return found;
    } catch (error) {
      found.skipped.push({ file, reason: (error as Error).message });
    }
  }
  return found;
}

/**
 * The projector a user pairs with their GGUF chat model, checked against it:
 * one made for a model of another width is refused here, as llama.cpp's
 * loader would refuse it at the first image.
 */
export async function pairProjector(modelFile: string, projectorFile: string, label?: string): Promise<Projector> {
  const projector = await readProjector(projectorFile, label);
  const mismatch = widthMismatch(projector, await modelWidth(modelFile), label);
  if (mismatch) throw new StoreError(`${mismatch}: llama.cpp refuses to load such a pair. Pass the projector published with this model.`, 'invalid_mmproj');
  return projector;
}
