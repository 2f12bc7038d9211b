import { decodeAudio } from '../../audio/decode.js';
import { createStretcher } from '../../audio/stretch.js';
import type { ModelKind } from '../catalog.js';
import type { Engine } from '../engine.js';
import type { Lease } from '../manager.js';
import { InvalidRequestError, PayloadTooLargeError } from '../errors.js';
import { canonicalLanguage, canonicalSpeaker } from './speak/voices.js';
import { packSentences, splitSentences } from './speak/sentences.js';
import type { SpeechModelInfo, SpeechRuntime, SynthesisRequest } from './speak/synthesizer.js';

/**
 * Text to speech as a task. `prepareSpeech` resolves and loads the model and
 * checks the request against what the model offers (its mode, speakers,
 * languages) before any audio is made, so every bad request is a 4xx before
 * a response starts; the prepared speech then synthesises piece by piece
 * (sentences, or for a model whose prosody spans sentences the whole input
 * up to its one-pass length), handing audio over as each block is decoded. HTTP
 * (POST /v1/audio/speech, its stream jobs) and `lserve speak` both use it.
 *
 * `prepareVoice` is the same preparation without the text, for a speaker of
 * many texts whose words arrive over time (a realtime reply, sentence by
 * sentence): the model resolved and leased once, a cloned voice's reference
 * decoded once (one object for every text, which a runtime may cache what it
 * derives from), until its release.
 */

export type { SpeechModelInfo } from './speak/synthesizer.js';

/** Longest input accepted, in characters (OpenAI's limit). */
export const MAX_INPUT_CHARS = 4096;
/** Longest reference audio for voice cloning, in seconds (a few seconds are enough). */
export const MAX_REFERENCE_SECONDS = 60;

const KINDS: readonly ModelKind[] = ['tts'];

export interface SpeakRequest {
  /** Model id or alias; optional when exactly one speech synthesis model is installed. */
  model?: string;
  input: string;
  /** The specification's `voice`; `speaker` wins when both are given. */
  voice?: string;
  speaker?: string;
  voiceDescription?: string;
  /** Reference audio bytes (any supported container) for voice cloning. */
  refAudio?: Uint8Array;
  refText?: string;
  language?: string;
  speed?: number;
  /** Most codec frames for the whole input (models with frames). */
  frames?: number;
  seed?: number;
  keepAliveMs?: number;
}

export interface PreparedSpeech {
  /** The model's id. */
  model: string;
  info: SpeechModelInfo;
  sampleRate: number;
  /**
   * Synthesises the whole input, calling `onAudio` with each block of samples
   * (already time-stretched for `speed`) as soon as it exists. Resolves with
   * the total number of samples. Call once.
   */
  run(onAudio: (samples: Float32Array) => void, signal: AbortSignal): Promise<{ samples: number }>;
  /** Releases the model; idempotent. `run` releases it itself when it ends. */
  release(): void;
}

/** A request's voice without its text: model, speaker or described or cloned voice, language, speed, seed. */
export type VoiceRequest = Omit<SpeakRequest, 'input' | 'frames'>;

export interface PreparedVoice {
  /** The model's id. */
  model: string;
  info: SpeechModelInfo;
  sampleRate: number;
  /**
   * Synthesises `input` (checked as a request's input is), calling `onAudio`
   * with each block of samples as soon as it exists; resolves with the number
   * of samples. May be called again for another text once it has settled.
   * The voice was admitted into the model's line once, at its preparation:
   * its texts wait their turns and are never refused.
   */
  speak(input: string, onAudio: (samples: Float32Array) => void, signal: AbortSignal, frames?: number): Promise<{ samples: number }>;
  /** Releases the model; idempotent. Until then it stays loaded for this voice. */
  release(): void;
}

/** The synthesis model a request that names none goes to (core/model-choice.ts). */
export function defaultSpeechModel(engine: Engine): Promise<string> {
  return engine.defaultModel('tts');
}

export async function prepareSpeech(engine: Engine, request: SpeakRequest, signal?: AbortSignal): Promise<PreparedSpeech> {
  const input = checkedInput(request.input);
  const voice = await prepareVoice(engine, request, signal);
  return {
    model: voice.model,
    info: voice.info,
    sampleRate: voice.sampleRate,
    release: voice.release,
    async run(onAudio, signal) {
      try {
        return await voice.speak(input, onAudio, signal, request.frames);
      } finally {
        voice.release();
      }
    },
  };
}

export async function prepareVoice(engine: Engine, request: VoiceRequest, signal?: AbortSignal): Promise<PreparedVoice> {
  const name = request.model ?? (await defaultSpeechModel(engine));
  const lease = await engine.acquire<SpeechRuntime>(name, KINDS, { keepAliveMs: request.keepAliveMs });
  try {
    // A full line is a 503 now, before any response starts; once let in, the request's pieces always wait their turn.
    try {
      lease.model.queue.admit();
    } catch (error) {
      engine.reportRejection(lease.installed.id, error);
      throw error;
    }
    const synthesis = await synthesisFor(lease, request, signal);
    return prepared(engine, lease, synthesis);
  } catch (error) {
    lease.release();
    throw error;
  }
}

/** The text to speak, trimmed; a 4xx when it is empty or too long. */
function checkedInput(text: string): string {
  const input = text.trim();
  if (!input) throw new InvalidRequestError("'input' is empty: give the text to speak.", { param: 'input', code: 'missing_required_parameter' });
  if (text.length > MAX_INPUT_CHARS) {
    throw new PayloadTooLargeError(`'input' has ${text.length} characters; at most ${MAX_INPUT_CHARS} are accepted per request. Split the text.`, { param: 'input' });
  }
  return input;
}

/** The request as the runtime takes it: names as the model spells them, the reference decoded at its rate. */
async function synthesisFor(lease: Lease<SpeechRuntime>, request: VoiceRequest, signal?: AbortSignal): Promise<Omit<SynthesisRequest, 'text' | 'maxFrames'>> {
  const { info } = lease.model;
  const id = lease.installed.id;
  const speed = request.speed ?? 1;
  const language = canonicalLanguage(request.language, info.languages, id);
  const synthesis: Omit<SynthesisRequest, 'text' | 'maxFrames'> = { language, speed, seed: request.seed };
  switch (info.mode) {
    case 'preset':
      synthesis.speaker = canonicalSpeaker(request.speaker ?? request.voice, info, id, request.speaker !== undefined ? 'speaker' : 'voice');
      break;
    case 'design':
      if (!request.voiceDescription?.trim()) {
        throw new InvalidRequestError(`Model '${id}' designs a voice from a description: 'voice_description' is required (for example "a calm, low male voice, speaking slowly").`, {
          param: 'voice_description',
          code: 'missing_required_parameter',
        });
      }
      synthesis.voiceDescription = request.voiceDescription.trim();
      break;
    case 'clone': {
      if (!request.refAudio) {
        throw new InvalidRequestError(`Model '${id}' clones a voice: 'ref_audio' is required (a path, a URL or base64 audio of the voice, a few seconds long).`, {
          param: 'ref_audio',
          code: 'missing_required_parameter',
        });
      }
      const reference = await decodeAudio(request.refAudio, { sampleRate: info.sampleRate, maxDurationSec: MAX_REFERENCE_SECONDS, param: 'ref_audio', signal });
      if (reference.duration < 0.5) throw new InvalidRequestError(`'ref_audio' is ${reference.duration.toFixed(2)} s long; give at least half a second of the voice.`, { param: 'ref_audio', code: 'invalid_value' });
      synthesis.reference = { samples: reference.samples, text: request.refText?.trim() || undefined };
      break;
    }
  }
  return synthesis;
}

function prepared(engine: Engine, lease: Lease<SpeechRuntime>, synthesis: Omit<SynthesisRequest, 'text' | 'maxFrames'>): PreparedVoice {
  const runtime = lease.model;
  const { info } = runtime;
  let released = false;
  const release = () => {
    if (released) return;
    released = true;
    lease.release();
  };
  return {
    model: lease.installed.id,
    info,
    sampleRate: info.sampleRate,
    release,
    async speak(text, onAudio, signal, frames) {
      if (released) throw new Error('the voice was released');
      const input = checkedInput(text);
      let samples = 0;
      try {
        // Without rate control of its own, the model speaks at its pace and the audio is stretched to `speed`.
        const stretch = !info.rateControl && synthesis.speed !== 1 ? createStretcher(info.sampleRate, synthesis.speed) : undefined;
        const emit = (block: Float32Array) => {
          if (block.length === 0) return;
          samples += block.length;
          onAudio(block);
        };
        let framesLeft = frames;
        const pieces = info.maxPieceChars !== undefined ? packSentences(input, info.maxPieceChars) : splitSentences(input);
        for (const text of pieces) {
          if (framesLeft !== undefined && framesLeft <= 0) break;
          signal.throwIfAborted();
          // One piece at a time per model: concurrent requests take turns piece by piece.
          const { frames } = await runtime.queue.run(() => runtime.synthesize({ ...synthesis, text, maxFrames: framesLeft }, (block) => emit(stretch ? stretch.push(block) : block), signal), signal, true);
          if (framesLeft !== undefined) framesLeft -= frames;
        }
        if (stretch) emit(stretch.flush());
        return { samples };
      } finally {
        // What was made counts, also when the client left halfway.
        if (samples > 0) engine.report({ type: 'speech', model: lease.installed.id, audioSeconds: samples / info.sampleRate });
      }
    },
  };
}
