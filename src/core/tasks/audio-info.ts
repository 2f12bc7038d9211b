import { readFile } from 'node:fs/promises';
import type { Engine } from '../engine.js';
import type { InstalledModel } from '../store.js';

/**
 * GET /v1/audio/info: what an audio model accepts, read from its files and
 * catalog defaults without loading it. Recognition models list language
 * codes (Whisper's from generation_config.json's lang_to_id); synthesis
 * models list language names and speakers, and (beyond the specification)
 * how they choose a voice: `voice_mode` preset, design or clone.
 */

export interface AudioInfo {
  model: string;
  kind: string;
  asr_supported_languages?: string[];
  tts_supported_languages?: string[];
  supported_speakers?: string[];
  voice_mode?: 'preset' | 'design' | 'clone';
}

/** Qwen3-TTS config.json's `tts_model_type` → how the model chooses its voice. */
const QWEN_MODES = { custom_voice: 'preset', voice_design: 'design', base: 'clone' } as const;

export async function audioInfo(engine: Engine, name: string): Promise<AudioInfo> {
  const installed = await engine.resolve(name, ['asr', 'asr-stream', 'tts']);
  const info: AudioInfo = { model: installed.id, kind: installed.entry.kind };
  const defaults = installed.entry.defaults;
  if (installed.entry.kind === 'tts') {
    const listed = strings(defaults.speakers ?? defaults.voices);
    const qwen = await qwenVoices(installed, listed);
    info.tts_supported_languages = strings(defaults.languages);
    info.supported_speakers = qwen?.speakers ?? listed;
    info.voice_mode = qwen?.mode ?? 'preset';
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

/**
 * A Qwen3-TTS folder's mode and preset speakers, from its config.json
 * (`tts_model_type`, `talker_config.spk_id`; names spelled as the catalog
 * spells them where it knows them); undefined for other models. The config
 * decides, not the catalog entry: a CustomVoice and a VoiceDesign folder
 * have the same files, so a registered directory may carry either's defaults.
 */
async function qwenVoices(installed: InstalledModel, known: readonly string[]): Promise<{ mode: AudioInfo['voice_mode']; speakers: string[] } | undefined> {
  const file = installed.files.config;
  if (!file) return undefined;
  try {
    const config = JSON.parse(await readFile(file, 'utf8')) as { tts_model_type?: keyof typeof QWEN_MODES; talker_config?: { spk_id?: Record<string, unknown> } };
    const mode = config.tts_model_type && QWEN_MODES[config.tts_model_type];
    if (!mode) return undefined;
    const ids = mode === 'preset' ? Object.keys(config.talker_config?.spk_id ?? {}) : [];
    return { mode, speakers: ids.map((name) => known.find((k) => k.toLowerCase() === name.toLowerCase()) ?? name) };
  } catch {
    return undefined;
  }
}

function strings(value: unknown): string[] {
  return Array.isArray(value) ? value.filter((v): v is string => typeof v === 'string') : [];
}
