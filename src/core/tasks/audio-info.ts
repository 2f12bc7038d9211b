import { readFile } from 'node:fs/promises';
import type { Engine } from '../engine.js';
import type { InstalledModel } from '../store.js';

/**
 * GET /v1/audio/info: what an audio model accepts, read from its files and
 * catalog defaults without loading it. Recognition models list language
 * codes (Whisper's from generation_config.json's lang_to_id); synthesis
 * models list language names and speakers.
 */

export interface AudioInfo {
  model: string;
  kind: string;
  asr_supported_languages?: string[];
  tts_supported_languages?: string[];
  supported_speakers?: string[];
}

export async function audioInfo(engine: Engine, name: string): Promise<AudioInfo> {
  const installed = await engine.resolve(name, ['asr', 'asr-stream', 'tts']);
  const info: AudioInfo = { model: installed.id, kind: installed.entry.kind };
  const defaults = installed.entry.defaults;
  if (installed.entry.kind === 'tts') {
    info.tts_supported_languages = strings(defaults.languages);
    info.supported_speakers = strings(defaults.speakers ?? defaults.voices);
  } else {
    info.asr_supported_languages = (await whisperLanguages(installed)) ?? strings(defaults.languages);
  }
  return info;
}

/** Language codes of a Whisper export, in its order; undefined for other recognisers. */
async function whisperLanguages(installed: InstalledModel): Promise<string[] | undefined> {
  const file = installed.files.generation_config;
  if (!file) return undefined;
  try {
    const config = JSON.parse(await readFile(file, 'utf8')) as { lang_to_id?: Record<string, number> };
    if (!config.lang_to_id) return ['en'];
    return Object.entries(config.lang_to_id)
      .sort((a, b) => a[1] - b[1])
      .map(([token]) => token.replace(/^<\|(.*)\|>$/, '$1'));
  } catch {
    return undefined;
  }
}

function strings(value: unknown): string[] {
  return Array.isArray(value) ? value.filter((v): v is string => typeof v === 'string') : [];
}
