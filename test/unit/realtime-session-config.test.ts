import type { RealtimeSession, RealtimeSessionCreateRequest, SessionUpdateEvent } from 'openai/resources/realtime/realtime';
import type { RealtimeSessionCreateResponse, RealtimeTranscriptionSessionCreateResponse } from 'openai/resources/realtime/client-secrets';
import { describe, expect, it } from 'vitest';
import { parseClientEvent } from '../../src/api/realtime/client-events.js';
import { RealtimeEventError } from '../../src/api/realtime/errors.js';
import { applySessionUpdate, defaultSessionConfig, mergeSessionPatch, sessionObject } from '../../src/api/realtime/session-config.js';
import type { BetaRealtimeSession, GaRealtimeSession, GaTranscriptionSession } from '../../src/api/realtime/session-object.js';
import type { SessionConfig } from '../../src/api/realtime/types.js';

/**
 * A session's settings: OpenAI's defaults, session.update merged in either
 * dialect (a partial update keeps the rest), and the session object sent
 * back, checked against the `openai` SDK's types.
 */

/** The SDK types GA PCM as 24 kHz only; 16 kHz is lserve's extension, so the type checks read every rate as 24000. */
type At24k<T> =
  T extends { type: 'audio/pcm'; rate: number } ? { type: 'audio/pcm'; rate: 24000 }
  : T extends Array<infer E> ? Array<At24k<E>>
  : T extends object ? { [K in keyof T]: At24k<T[K]> }
  : T;

const base = () => defaultSessionConfig('qwen3-0.6b');

function refusal(run: () => unknown): RealtimeEventError {
  try {
    run();
  } catch (error) {
    expect(error).toBeInstanceOf(RealtimeEventError);
    return error as RealtimeEventError;
  }
  throw new Error('the update was accepted');
}

describe('defaultSessionConfig', () => {
  it("holds OpenAI's defaults, with transcription on so that spoken turns reach the chat model", () => {
    expect(base()).toEqual({
      type: 'realtime',
      model: 'qwen3-0.6b',
      instructions: expect.any(String),
      outputModalities: ['audio'],
      input: {
        format: { type: 'audio/pcm', rate: 24000 },
        transcription: {},
        turnDetection: { type: 'server_vad', threshold: 0.5, prefixPaddingMs: 300, silenceDurationMs: 500, createResponse: true, interruptResponse: true, idleTimeoutMs: null },
      },
      output: { format: { type: 'audio/pcm', rate: 24000 }, speed: 1 },
      tools: [],
      toolChoice: 'auto',
    });
    expect(base().instructions.length).toBeGreaterThan(0);
  });

  it('makes a transcription session’s model its speech-to-text model', () => {
    const config = defaultSessionConfig('whisper-tiny', 'transcription');
    expect(config).toMatchObject({ type: 'transcription', model: '', input: { transcription: { model: 'whisper-tiny' } } });
    expect(defaultSessionConfig('', 'transcription').input.transcription).toEqual({});
  });

  it('gives each session its own turn-detection object', () => {
    const a = base();
    a.input.turnDetection!.threshold = 0.9;
    expect(base().input.turnDetection!.threshold).toBe(0.5);
  });
});

describe('applySessionUpdate', () => {
  it('changes what a partial update names and keeps the rest', () => {
    const before: SessionConfig = { ...base(), tools: [{ name: 'f' }], maxOutputTokens: 300 };
    const after = applySessionUpdate(before, { type: 'realtime', instructions: 'Be terse.', audio: { output: { speed: 1.25 } } }, 'ga');
    expect(after).toEqual({ ...before, instructions: 'Be terse.', output: { ...before.output, speed: 1.25 } });
    // The input settings are untouched by an update that names only output.
    expect(after.input).toEqual(before.input);
  });

  it('merges turn detection of the same type, starts a new type from the defaults, and turns it off with null', () => {
    let config = applySessionUpdate(base(), { type: 'realtime', audio: { input: { turn_detection: { type: 'server_vad', silence_duration_ms: 800 } } } }, 'ga');
    config = applySessionUpdate(config, { type: 'realtime', audio: { input: { turn_detection: { type: 'server_vad', threshold: 0.7 } } } }, 'ga');
    expect(config.input.turnDetection).toMatchObject({ type: 'server_vad', threshold: 0.7, silenceDurationMs: 800 });

    config = applySessionUpdate(config, { type: 'realtime', audio: { input: { turn_detection: { type: 'semantic_vad', create_response: false } } } }, 'ga');
    expect(config.input.turnDetection).toEqual({ type: 'semantic_vad', eagerness: 'auto', threshold: 0.5, prefixPaddingMs: 300, silenceDurationMs: 500, createResponse: false, interruptResponse: true, idleTimeoutMs: null });

    config = applySessionUpdate(config, { type: 'realtime', audio: { input: { turn_detection: null } } }, 'ga');
    expect(config.input.turnDetection).toBeNull();
    // Back on: from the defaults, without the semantic eagerness.
    config = applySessionUpdate(config, { turn_detection: { threshold: 0.4 } }, 'beta');
    expect(config.input.turnDetection).toEqual({ type: 'server_vad', threshold: 0.4, prefixPaddingMs: 300, silenceDurationMs: 500, createResponse: true, interruptResponse: true, idleTimeoutMs: null });
  });

  it('turns transcription off with null and replaces it whole', () => {
    let config = applySessionUpdate(base(), { input_audio_transcription: { model: 'whisper-1', language: 'fr' } }, 'beta');
    expect(config.input.transcription).toEqual({ model: 'whisper-1', language: 'fr' });
    config = applySessionUpdate(config, { input_audio_transcription: { model: 'whisper-small' } }, 'beta');
    expect(config.input.transcription).toEqual({ model: 'whisper-small' });
    config = applySessionUpdate(config, { type: 'realtime', audio: { input: { transcription: null } } }, 'ga');
    expect(config.input.transcription).toBeNull();
  });

  it('reads the same settings from either dialect into the same config', () => {
    const ga = applySessionUpdate(
      base(),
      {
        type: 'realtime',
        output_modalities: ['text'],
        instructions: 'Hi',
        audio: {
          input: { format: { type: 'audio/pcmu' }, transcription: { model: 'whisper-1' }, turn_detection: { type: 'semantic_vad', eagerness: 'low' } },
          output: { format: { type: 'audio/pcma' }, voice: 'ash', speed: 0.8 },
        },
        tools: [{ type: 'function', name: 'lookup', parameters: { type: 'object' } }],
        tool_choice: 'none',
        max_output_tokens: 1000,
      },
      'ga',
    );
    const beta = applySessionUpdate(
      base(),
      {
        modalities: ['text'],
        instructions: 'Hi',
        input_audio_format: 'g711_ulaw',
        input_audio_transcription: { model: 'whisper-1' },
        turn_detection: { type: 'semantic_vad', eagerness: 'low' },
        output_audio_format: 'g711_alaw',
        voice: 'ash',
        speed: 0.8,
        tools: [{ type: 'function', name: 'lookup', parameters: { type: 'object' } }],
        tool_choice: 'none',
        max_response_output_tokens: 1000,
      },
      'beta',
    );
    expect(beta).toEqual(ga);
    expect(ga).toMatchObject({ outputModalities: ['text'], input: { format: { type: 'audio/pcmu' } }, output: { format: { type: 'audio/pcma' }, voice: 'ash' }, maxOutputTokens: 1000, toolChoice: 'none' });
  });

  it("takes 'inf' as no token limit, a voice given as {id}, and 16 kHz PCM", () => {
    let config = applySessionUpdate({ ...base(), maxOutputTokens: 50 }, { type: 'realtime', max_output_tokens: 'inf', audio: { output: { voice: { id: 'af_heart' } } } }, 'ga');
    expect(config.maxOutputTokens).toBeUndefined();
    expect(config.output.voice).toBe('af_heart');
    config = applySessionUpdate(config, { type: 'realtime', audio: { input: { format: { type: 'audio/pcm', rate: 16000 } }, output: { format: { type: 'audio/pcm' } } } }, 'ga');
    expect(config.input.format).toEqual({ type: 'audio/pcm', rate: 16000 });
    expect(config.output.format).toEqual({ type: 'audio/pcm', rate: 24000 });
  });

  it("takes lserve's speech model field in either dialect, keeps it across updates and renders it back", () => {
    let config = applySessionUpdate(base(), { type: 'realtime', audio: { output: { model: 'kokoro-en', voice: 'af_heart' } } }, 'ga');
    expect(config.output).toMatchObject({ speechModel: 'kokoro-en', voice: 'af_heart' });
    config = applySessionUpdate(config, { type: 'realtime', instructions: 'Be brief.' }, 'ga');
    expect(config.output.speechModel).toBe('kokoro-en');
    expect((sessionObject(config, 'sess_1', 'ga') as GaRealtimeSession).audio.output).toMatchObject({ model: 'kokoro-en' });
    const beta = applySessionUpdate(base(), { speech_model: 'piper-en-lessac' }, 'beta');
    expect(beta.output.speechModel).toBe('piper-en-lessac');
    expect(sessionObject(beta, 'sess_1', 'beta')).toMatchObject({ speech_model: 'piper-en-lessac' });
  });

  it('switches to a transcription session, which takes only input settings', () => {
    const config = applySessionUpdate(base(), { type: 'transcription', audio: { input: { transcription: { model: 'whisper-tiny' } } } }, 'ga');
    expect(config).toMatchObject({ type: 'transcription', input: { transcription: { model: 'whisper-tiny' } } });
    expect(refusal(() => applySessionUpdate(config, { type: 'transcription', instructions: 'x' }, 'ga'))).toMatchObject({ code: 'unknown_parameter', param: 'session.instructions' });
  });

  it('refuses unknown formats and values, naming the field', () => {
    const cases: Array<[unknown, 'ga' | 'beta', string, string]> = [
      [{ type: 'realtime', audio: { input: { format: { type: 'audio/opus' } } } }, 'ga', 'invalid_value', 'session.audio.input.format.type'],
      [{ type: 'realtime', audio: { input: { format: { type: 'audio/pcm', rate: 44100 } } } }, 'ga', 'invalid_value', 'session.audio.input.format.rate'],
      [{ input_audio_format: 'pcm24' }, 'beta', 'invalid_value', 'session.input_audio_format'],
      [{ output_audio_format: { type: 'audio/pcm' } }, 'beta', 'invalid_value', 'session.output_audio_format'],
      [{ type: 'realtime', output_modalities: [] }, 'ga', 'invalid_value', 'session.output_modalities'],
      [{ type: 'realtime', output_modalities: ['video'] }, 'ga', 'invalid_value', 'session.output_modalities.0'],
      [{ type: 'realtime', audio: { output: { speed: 3 } } }, 'ga', 'invalid_value', 'session.audio.output.speed'],
      [{ type: 'realtime', audio: { output: { voice: 'v'.repeat(201) } } }, 'ga', 'string_above_max_length', 'session.audio.output.voice'],
      [{ type: 'realtime', audio: { input: { turn_detection: { type: 'server_vad', threshold: 2 } } } }, 'ga', 'invalid_value', 'session.audio.input.turn_detection.threshold'],
      [{ type: 'realtime', audio: { input: { turn_detection: { type: 'push_to_talk' } } } }, 'ga', 'invalid_value', 'session.audio.input.turn_detection.type'],
      [{ type: 'realtime', audio: { input: { turn_detection: { type: 'semantic_vad', threshold: 0.5 } } } }, 'ga', 'unknown_parameter', 'session.audio.input.turn_detection.threshold'],
      [{ type: 'realtime', tools: [{ type: 'function', name: 'has space' }] }, 'ga', 'invalid_value', 'session.tools.0.name'],
      [{ type: 'realtime', tool_choice: { type: 'mcp', server_label: 'x' } }, 'ga', 'invalid_value', 'session.tool_choice.type'],
      [{ type: 'realtime', prompt: { id: 'pmpt_1' } }, 'ga', 'unsupported_parameter', 'session.prompt'],
      [{ type: 'realtime', modalities: ['text'] }, 'ga', 'unknown_parameter', 'session.modalities'],
      [{ temperature: 5 }, 'beta', 'invalid_value', 'session.temperature'],
      [{ type: 'conversation' }, 'ga', 'invalid_value', 'session.type'],
      ['text', 'ga', 'invalid_type', 'session'],
    ];
    for (const [session, dialect, code, param] of cases) {
      expect({ session, error: refusal(() => applySessionUpdate(base(), session, dialect)) }).toMatchObject({ session, error: { code, param } });
    }
  });

  it('merges the patch a parsed session.update carries, and its errors echo the event_id', () => {
    const event = parseClientEvent(JSON.stringify({ type: 'session.update', session: { type: 'realtime', instructions: 'New.' } }), 'ga');
    expect(event.type === 'session.update' && mergeSessionPatch(base(), event.session)).toEqual({ ...base(), instructions: 'New.' });
    const error = refusal(() => parseClientEvent(JSON.stringify({ type: 'session.update', event_id: 'su1', session: { type: 'realtime', audio: { output: { speed: 0 } } } }), 'ga'));
    expect(error).toMatchObject({ code: 'invalid_value', param: 'session.audio.output.speed', eventId: 'su1' });
  });

  it('accepts everything the SDK types a GA session update with', () => {
    const update: SessionUpdateEvent = {
      type: 'session.update',
      session: {
        type: 'realtime',
        model: 'gpt-realtime',
        instructions: 'x',
        output_modalities: ['audio'],
        audio: {
          input: {
            format: { type: 'audio/pcma' },
            noise_reduction: { type: 'far_field' },
            transcription: { model: 'gpt-4o-transcribe', language: 'en', prompt: 'names', delay: 'low' },
            turn_detection: { type: 'server_vad', threshold: 0.5, prefix_padding_ms: 300, silence_duration_ms: 500, idle_timeout_ms: 6000, create_response: true, interrupt_response: false },
          },
          output: { format: { type: 'audio/pcm', rate: 24000 }, speed: 1, voice: 'cedar' },
        },
        include: ['item.input_audio_transcription.logprobs'],
        max_output_tokens: 4096,
        parallel_tool_calls: true,
        prompt: null,
        reasoning: { effort: 'low' },
        tool_choice: 'auto',
        tools: [{ type: 'function', name: 'f', description: 'd', parameters: { type: 'object' } }],
        tracing: { workflow_name: 'w' },
        truncation: { type: 'retention_ratio', retention_ratio: 0.5 },
      } satisfies RealtimeSessionCreateRequest,
    };
    expect(() => applySessionUpdate(base(), update.session, 'ga')).not.toThrow();
  });
});

describe("lserve's own voice fields (a designed or cloned voice)", () => {
  const reference = Uint8Array.of(1, 2, 3);

  it('reads them in both dialects, the reference audio as given to the session to read', () => {
    const ga = parseClientEvent(JSON.stringify({ type: 'session.update', session: { type: 'realtime', audio: { output: { voice_description: 'A calm, low voice.', ref_audio: 'UklGRg==', ref_text: 'Hello.' } } } }), 'ga');
    const beta = parseClientEvent(JSON.stringify({ type: 'session.update', session: { voice_description: 'A calm, low voice.', ref_audio: 'UklGRg==', ref_text: 'Hello.' } }), 'beta');
    for (const event of [ga, beta]) {
      if (event.type !== 'session.update') throw new Error(event.type);
      expect(event.session).toMatchObject({ voiceDescription: 'A calm, low voice.', refAudio: 'UklGRg==', refText: 'Hello.' });
      expect(mergeSessionPatch(base(), event.session, reference).output).toMatchObject({ voiceDescription: 'A calm, low voice.', refAudio: reference, refText: 'Hello.' });
    }
  });

  it('keeps them when an update leaves them out, and null clears them', () => {
    const set = mergeSessionPatch(base(), { voiceDescription: 'Bright.', refAudio: 'x', refText: 'Hi.' }, reference);
    expect(mergeSessionPatch(set, { speed: 1.2 }).output).toMatchObject({ voiceDescription: 'Bright.', refAudio: reference, refText: 'Hi.' });
    const cleared = mergeSessionPatch(set, { voiceDescription: null, refAudio: null, refText: null }).output;
    expect(cleared).not.toHaveProperty('voiceDescription', expect.anything());
    expect(cleared.refAudio).toBeUndefined();
    expect(cleared.refText).toBeUndefined();
  });

  it('echoes the description and the reference text, never the reference audio', () => {
    const config = mergeSessionPatch(base(), { voiceDescription: 'Bright.', refAudio: 'x', refText: 'Hi.' }, reference);
    const ga = sessionObject(config, 'sess_1', 'ga') as { audio: { output: Record<string, unknown> } };
    expect(ga.audio.output).toMatchObject({ voice_description: 'Bright.', ref_text: 'Hi.' });
    expect(ga.audio.output).not.toHaveProperty('ref_audio');
    expect(sessionObject(config, 'sess_1', 'beta')).toMatchObject({ voice_description: 'Bright.', ref_text: 'Hi.' });
  });

  it('refuses an empty reference and a description that is not text, naming the field', () => {
    expect(refusal(() => applySessionUpdate(base(), { type: 'realtime', audio: { output: { ref_audio: '' } } }, 'ga')).param).toBe('session.audio.output.ref_audio');
    expect(refusal(() => applySessionUpdate(base(), { voice_description: 5 }, 'beta')).param).toBe('session.voice_description');
  });
});

describe('sessionObject', () => {
  const config: SessionConfig = {
    ...base(),
    tools: [{ name: 'lookup', description: 'Look up', parameters: { type: 'object' } }],
    toolChoice: { name: 'lookup' },
    output: { format: { type: 'audio/pcm', rate: 24000 }, voice: 'af_heart', speed: 1.1 },
    maxOutputTokens: 256,
    temperature: 0.6,
  };

  it('renders GA nested settings that the SDK types accept', () => {
    const session = sessionObject(config, 'sess_1', 'ga') as At24k<GaRealtimeSession>;
    const typed: RealtimeSessionCreateResponse = session;
    expect(typed).toEqual({
      id: 'sess_1',
      object: 'realtime.session',
      type: 'realtime',
      model: 'qwen3-0.6b',
      instructions: config.instructions,
      output_modalities: ['audio'],
      audio: {
        input: {
          format: { type: 'audio/pcm', rate: 24000 },
          transcription: {},
          turn_detection: { type: 'server_vad', threshold: 0.5, prefix_padding_ms: 300, silence_duration_ms: 500, idle_timeout_ms: null, create_response: true, interrupt_response: true },
        },
        output: { format: { type: 'audio/pcm', rate: 24000 }, voice: 'af_heart', speed: 1.1 },
      },
      tools: [{ type: 'function', name: 'lookup', description: 'Look up', parameters: { type: 'object' } }],
      tool_choice: { type: 'function', name: 'lookup' },
      max_output_tokens: 256,
      tracing: null,
      prompt: null,
    });
  });

  it('leaves out a GA transcription that is off (the SDK types it as optional, not nullable)', () => {
    const off = sessionObject({ ...config, input: { ...config.input, transcription: null, turnDetection: null } }, 's', 'ga') as GaRealtimeSession;
    expect(off.audio.input).toEqual({ format: { type: 'audio/pcm', rate: 24000 }, turn_detection: null });
    expect(off.max_output_tokens).toBe(256);
    expect((sessionObject(base(), 's', 'ga') as GaRealtimeSession).max_output_tokens).toBe('inf');
  });

  it('renders a GA transcription session', () => {
    const session = sessionObject(defaultSessionConfig('whisper-tiny', 'transcription'), 'sess_2', 'ga') as At24k<GaTranscriptionSession>;
    const typed: RealtimeTranscriptionSessionCreateResponse = session;
    expect(typed).toMatchObject({ id: 'sess_2', type: 'transcription', object: 'realtime.transcription_session', audio: { input: { transcription: { model: 'whisper-tiny' } } } });
  });

  it('renders beta flat settings that the SDK types accept', () => {
    const session = sessionObject({ ...config, toolChoice: 'required' }, 'sess_3', 'beta') as BetaRealtimeSession;
    // The SDK types the beta's tool_choice as a string; lserve sends a named function as GA's object, so that one field is checked apart.
    const typed: RealtimeSession = { ...session, tool_choice: session.tool_choice as string };
    expect(typed).toEqual({
      id: 'sess_3',
      object: 'realtime.session',
      model: 'qwen3-0.6b',
      modalities: ['text', 'audio'],
      instructions: config.instructions,
      voice: 'af_heart',
      input_audio_format: 'pcm16',
      output_audio_format: 'pcm16',
      input_audio_transcription: {},
      turn_detection: { type: 'server_vad', threshold: 0.5, prefix_padding_ms: 300, silence_duration_ms: 500, idle_timeout_ms: null, create_response: true, interrupt_response: true },
      tools: [{ type: 'function', name: 'lookup', description: 'Look up', parameters: { type: 'object' } }],
      tool_choice: 'required',
      temperature: 0.6,
      max_response_output_tokens: 256,
      speed: 1.1,
      tracing: null,
    });
  });

  it('round-trips: a session object sent back as an update changes nothing', () => {
    const changed = applySessionUpdate(base(), { modalities: ['text'], input_audio_format: 'g711_alaw', turn_detection: null, voice: 'echo' }, 'beta');
    const { id: _id, object: _object, ...beta } = sessionObject(changed, 's', 'beta') as BetaRealtimeSession;
    expect(applySessionUpdate(base(), beta, 'beta')).toEqual(changed);
    const { id: _gid, object: _gobject, ...ga } = sessionObject(config, 's', 'ga') as GaRealtimeSession;
    expect(applySessionUpdate(base(), ga, 'ga')).toEqual({ ...config, temperature: undefined });
  });
});
