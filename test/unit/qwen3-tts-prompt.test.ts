import { describe, expect, it } from 'vitest';
import { parseTtsConfig } from '../../src/families/qwen3-tts/config.js';
import { buildPrompt, defaultLayout, type PromptInput } from '../../src/families/qwen3-tts/prompt.js';
import { QWEN3_TTS_CODEC, QWEN3_TTS_SPEAKER_IDS, QWEN3_TTS_TOKENS, TINY_QWEN3_TTS, qwen3TtsConfig, qwen3TtsGenerationConfig } from '../fixtures/onnx/qwen3-tts.js';

/**
 * The talker prompt row by row, against upstream (QwenLM/Qwen3-TTS):
 * - qwen_tts/core/models/modeling_qwen3_tts.py, Qwen3TTSForConditionalGeneration.generate:
 *   instruct embeds first (text only); role = input_id[:, :3] (text only);
 *   codec prefill [nothink, think_bos, think_eos] or [think, think_bos, language, think_eos],
 *   then the speaker embedding, then [codec_pad, codec_bos]; its rows but the last are summed
 *   with tts_pad × (n − 2) and tts_bos. Without a reference: streaming (non_streaming_mode=False)
 *   appends text[0] + codec_bos and trails text[1:] + tts_eos; non-streaming appends
 *   (text + tts_eos) + codec_pad, then tts_pad + codec_bos, and trails only tts_pad.
 * - generate_icl_prompt: text = ref_id + text_id + tts_eos, codec = codec_bos + the reference
 *   frames; non-streaming: text + codec_pad, then codec + tts_pad; streaming: summed row by row,
 *   text beyond the codec rows trailing, codec rows beyond the text getting tts_pad.
 * - Qwen3TTSTalkerForConditionalGeneration.forward: generation step k adds
 *   trailing_text_hidden[k] to the fed-back frame while k < its length, tts_pad after.
 * - qwen_tts/inference/qwen3_tts_model.py: generate_voice_clone defaults to
 *   non_streaming_mode=False, generate_custom_voice and generate_voice_design to True.
 * Ids: 77091 "assistant", 198 "\n", 9707 "Hello", 1879 " world", 13 "." (Qwen2 BPE).
 */

const ids = { ...QWEN3_TTS_TOKENS, ...QWEN3_TTS_CODEC };
const role = [ids.imStart, 77091, 198];
const configOf = (variant: 'customvoice' | 'voicedesign' | 'base') => parseTtsConfig(qwen3TtsConfig(variant, TINY_QWEN3_TTS), qwen3TtsGenerationConfig());
const preset = configOf('customvoice');
const design = configOf('voicedesign');
const clone = configOf('base');
const hello = [9707, 1879, 13];

/** The role block and the codec prefix for a language-less prompt with a speaker slot. */
const prefix = (slot: Record<string, number>) => [
  { text: ids.imStart },
  { text: 77091 },
  { text: 198 },
  { text: ids.ttsPad, codec: ids.nothink },
  { text: ids.ttsPad, codec: ids.thinkBos },
  { text: ids.ttsPad, codec: ids.thinkEos },
  { text: ids.ttsPad, ...slot },
  { text: ids.ttsBos, codec: ids.pad },
];

describe('Qwen3-TTS prompt layouts (upstream generate)', () => {
  it('takes upstream’s default layout per mode: streaming for clone, non-streaming for preset and design', () => {
    expect(defaultLayout('clone')).toBe('streaming');
    expect(defaultLayout('preset')).toBe('non-streaming');
    expect(defaultLayout('design')).toBe('non-streaming');
  });

  it('preset speaker, by default non-streaming: the whole text in the prompt, tts_pad on every frame', () => {
    const plan = buildPrompt(preset, role, { body: hello, language: 'english', speaker: 'ryan' });
    expect(plan.rows).toEqual([
      { text: ids.imStart },
      { text: 77091 },
      { text: 198 },
      { text: ids.ttsPad, codec: ids.think },
      { text: ids.ttsPad, codec: ids.thinkBos },
      { text: ids.ttsPad, codec: 2050 },
      { text: ids.ttsPad, codec: ids.thinkEos },
      { text: ids.ttsPad, codec: QWEN3_TTS_SPEAKER_IDS.ryan },
      { text: ids.ttsBos, codec: ids.pad },
      { text: 9707, codec: ids.pad },
      { text: 1879, codec: ids.pad },
      { text: 13, codec: ids.pad },
      { text: ids.ttsEos, codec: ids.pad },
      { text: ids.ttsPad, codec: ids.bos },
    ]);
    expect(plan.trailing).toEqual([]);
    expect(plan.stepText).toBe(ids.ttsPad);
  });

  it('preset speaker in the streaming layout (upstream’s option): the first token on codec_bos, the rest trailing with tts_eos', () => {
    const plan = buildPrompt(preset, role, { body: hello, speaker: 'ryan', layout: 'streaming' });
    expect(plan.rows).toEqual([...prefix({ codec: QWEN3_TTS_SPEAKER_IDS.ryan }), { text: 9707, codec: ids.bos }]);
    expect(plan.trailing).toEqual([1879, 13, ids.ttsEos]);
    expect(plan.stepText).toBe(ids.ttsPad);
  });

  it('voice design: the instruction block before the role, no speaker slot, non-streaming', () => {
    const instruct = [ids.imStart, 872, 198, 5, ids.imEnd, 198];
    const plan = buildPrompt(design, role, { body: [9707], instruct });
    expect(plan.rows).toEqual([
      ...instruct.map((text) => ({ text })),
      { text: ids.imStart },
      { text: 77091 },
      { text: 198 },
      { text: ids.ttsPad, codec: ids.nothink },
      { text: ids.ttsPad, codec: ids.thinkBos },
      { text: ids.ttsPad, codec: ids.thinkEos },
      { text: ids.ttsBos, codec: ids.pad },
      { text: 9707, codec: ids.pad },
      { text: ids.ttsEos, codec: ids.pad },
      { text: ids.ttsPad, codec: ids.bos },
    ]);
    expect(plan.trailing).toEqual([]);
  });

  it('clone from the x-vector alone, by default streaming', () => {
    const xvector = new Float32Array(4).fill(0.5);
    const plan = buildPrompt(clone, role, { body: hello, xvector });
    expect(plan.vectors).toEqual([xvector]);
    expect(plan.rows).toEqual([...prefix({ vector: 0 }), { text: 9707, codec: ids.bos }]);
    expect(plan.trailing).toEqual([1879, 13, ids.ttsEos]);
    expect(plan.frames).toEqual([]);
  });

  describe('in-context clone (reference transcript and codes)', () => {
    const xvector = new Float32Array(4);
    const frames = (n: number) => Array.from({ length: n }, (_, i) => new Int32Array(16).fill(i));
    const input = (n: number, body = hello): PromptInput => ({ body, xvector, reference: { body: [40, 41], frames: frames(n) } });

    it('streaming, more text than frames: row by row, the text left over trailing', () => {
      // text: 40 41 9707 1879 13 eos (6); codec: bos f0 f1 (3).
      const plan = buildPrompt(clone, role, input(2));
      expect(plan.rows).toEqual([...prefix({ vector: 0 }), { text: 40, codec: ids.bos }, { text: 41, frame: 0 }, { text: 9707, frame: 1 }]);
      expect(plan.trailing).toEqual([1879, 13, ids.ttsEos]);
      expect(plan.frames).toHaveLength(2);
    });

    it('streaming, more frames than text: row by row, the frames left over on tts_pad, nothing trailing', () => {
      // text: 40 41 9707 eos (4); codec: bos f0 … f4 (6).
      const plan = buildPrompt(clone, role, input(5, [9707]));
      expect(plan.rows.slice(8)).toEqual([
        { text: 40, codec: ids.bos },
        { text: 41, frame: 0 },
        { text: 9707, frame: 1 },
        { text: ids.ttsEos, frame: 2 },
        { text: ids.ttsPad, frame: 3 },
        { text: ids.ttsPad, frame: 4 },
      ]);
      expect(plan.trailing).toEqual([]);
    });

    it('non-streaming (upstream’s option): all text on codec_pad, then codec_bos and the frames on tts_pad', () => {
      const plan = buildPrompt(clone, role, { ...input(2), layout: 'non-streaming' });
      expect(plan.rows.slice(8)).toEqual([
        { text: 40, codec: ids.pad },
        { text: 41, codec: ids.pad },
        { text: 9707, codec: ids.pad },
        { text: 1879, codec: ids.pad },
        { text: 13, codec: ids.pad },
        { text: ids.ttsEos, codec: ids.pad },
        { text: ids.ttsPad, codec: ids.bos },
        { text: ids.ttsPad, frame: 0 },
        { text: ids.ttsPad, frame: 1 },
      ]);
      expect(plan.trailing).toEqual([]);
    });
  });

  it('language tags, dialect speakers and unknown names as upstream resolves them', () => {
    const auto = buildPrompt(preset, role, { body: [9707], speaker: 'dylan' });
    expect(auto.rows.slice(3, 8).map((r) => r.codec)).toEqual([ids.think, ids.thinkBos, 2074, ids.thinkEos, QWEN3_TTS_SPEAKER_IDS.dylan]);
    const chinese = buildPrompt(preset, role, { body: [9707], speaker: 'eric', language: 'chinese' });
    expect(chinese.rows[5]!.codec).toBe(2062);
    const english = buildPrompt(preset, role, { body: [9707], language: 'english', speaker: 'dylan' });
    expect(english.rows[5]!.codec).toBe(2050);
    const noLanguage = buildPrompt(preset, role, { body: [9707], speaker: 'ryan' });
    expect(noLanguage.rows.slice(3, 7).map((r) => r.codec)).toEqual([ids.nothink, ids.thinkBos, ids.thinkEos, QWEN3_TTS_SPEAKER_IDS.ryan]);
    expect(() => buildPrompt(preset, role, { body: [1], speaker: 'nobody' })).toThrow(/speaker/);
    expect(() => buildPrompt(preset, role, { body: [1], language: 'klingon' })).toThrow(/language/);
  });
});
