import { existsSync } from 'node:fs';
import path from 'node:path';

/** The graphs of a Qwen3-TTS export (onnx-community layout), roles named after them. */
export const GRAPHS = ['text_embed', 'codec_embed', 'talker_cache', 'code_predictor', 'residual_embed', 'tok_decoder'] as const;

/** A graph's file: its role, else `<graph>.onnx` beside the other graphs (a directory registered with fewer roles). */
export function graphFile(files: Record<string, string>, graph: string): string | undefined {
  if (files[graph]) return files[graph];
  const sibling = GRAPHS.map((g) => files[g]).find((f) => f !== undefined);
  const guess = sibling && path.join(path.dirname(sibling), `${graph}.onnx`);
  return guess && existsSync(guess) ? guess : undefined;
}
