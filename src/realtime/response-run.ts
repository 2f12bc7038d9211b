import { base64Chunks, OutputAudioEncoder } from '../api/realtime/audio-format.js';
import type { ResponseParams } from '../api/realtime/client-events.js';
import { newId } from '../api/realtime/ids.js';
import type { AssistantMessageItem, OutputAudioPart, OutputTextPart } from '../api/realtime/items.js';
import { itemObject, partObject, responseObject, type ResponseOutcome, type ResponseState } from '../api/realtime/server-events.js';
import type { Dialect, SessionConfig } from '../api/realtime/types.js';
import type { Engine } from '../core/engine.js';
import { asLserveError, type LserveError } from '../core/errors.js';
import type { ChatRequest, ChatToolCall } from '../core/tasks/chat.js';
import { chatMessages, type Conversation, type Item } from './conversation.js';
import { heardText, type SpokenSentence } from './heard-text.js';
import { runReply } from './reply.js';

/**
 * One response of a realtime session, from response.created to
 * response.done: the chat model's answer as an assistant message (text, or
 * audio with its transcript, each sentence spoken as soon as it is written)
 * and its function calls, each an output item with OpenAI's events around
 * it. `cancel` stops it (barge-in, response.cancel); it still ends with its
 * done events, the message marked incomplete.
 */

/**
 * The seed of every sentence a session speaks: a model that samples its
 * voice (a described one above all) then speaks each sentence, and each
 * session, with the same voice.
 */
const VOICE_SEED = 0;

/** Bytes of audio per response.output_audio.delta: 200 ms of 24 kHz PCM16. */
const AUDIO_DELTA_BYTES = 9600;

export interface ResponseHost {
  engine: Engine;
  dialect: Dialect;
  conversation: Conversation;
  /** Sends a server event by its GA name (the host renders the dialect's name and the event id). */
  emit(type: string, fields: Record<string, unknown>): void;
  /** The response's first audio delta was sent (for the voice-to-voice latency). */
  firstAudio(): void;
  /** Tells the client (an `error` event) why the response failed. */
  failed(error: LserveError): void;
}

/** The chat request a response makes: the session's settings, with the response's own in their place. */
export function replyRequest(config: SessionConfig, params: ResponseParams, conversation: Conversation): ChatRequest {
  const maxTokens = params.maxOutputTokens ?? config.maxOutputTokens;
  return {
    model: config.model,
    messages: chatMessages(params.instructions ?? config.instructions, conversation.context(params.input)),
    maxTokens: maxTokens === 'inf' ? undefined : maxTokens,
    temperature: params.temperature ?? config.temperature,
    tools: params.tools ?? config.tools,
    toolChoice: params.toolChoice ?? config.toolChoice,
    // A spoken answer cannot wait for a long thought.
    thinking: false,
  };
}

export class ResponseRun {
  readonly id = newId('resp');
  readonly outOfBand: boolean;
  readonly done: Promise<void>;
  private readonly controller = new AbortController();
  private cancelled: 'turn_detected' | 'client_cancelled' | undefined;
  /** Per assistant item with audio, where each sentence's audio lies (for conversation.item.truncate). */
  static readonly spoken = new WeakMap<Item, SpokenSentence[]>();

  constructor(
    private readonly host: ResponseHost,
    config: SessionConfig,
    params: ResponseParams,
  ) {
    this.outOfBand = params.conversation === 'none';
    this.done = this.run(config, params);
  }

  cancel(reason: 'turn_detected' | 'client_cancelled'): void {
    if (this.cancelled) return;
    this.cancelled = reason;
    this.controller.abort(new Error(`response ${reason}`));
  }

  private async run(config: SessionConfig, params: ResponseParams): Promise<void> {
    const { host } = this;
    const { dialect, conversation } = host;
    const modalities = params.outputModalities ?? config.outputModalities;
    const withAudio = modalities.includes('audio');
    const maxTokens = params.maxOutputTokens ?? config.maxOutputTokens;
    const state: ResponseState = {
      id: this.id,
      outcome: { status: 'in_progress' },
      output: [],
      conversationId: this.outOfBand ? undefined : conversation.id,
      outputModalities: withAudio ? ['audio'] : ['text'],
      maxOutputTokens: maxTokens === 'inf' ? undefined : maxTokens,
      outputFormat: params.outputFormat ?? config.output.format,
      voice: params.voice ?? config.output.voice,
      temperature: params.temperature ?? config.temperature,
      metadata: params.metadata,
    };
    host.emit('response.created', { response: responseObject(state, dialect) });
    const base = { response_id: this.id };

    let message: (AssistantMessageItem & { id: string }) | undefined;
    let part: OutputTextPart | OutputAudioPart | undefined;
    let messageIndex = 0;
    let encoder: OutputAudioEncoder | undefined;
    const added = (item: Item, outputIndex: number) => {
      host.emit('response.output_item.added', { ...base, output_index: outputIndex, item: itemObject(item, dialect) });
      if (!this.outOfBand) host.emit('conversation.item.added', { previous_item_id: conversation.add(item), item: itemObject(item, dialect) });
    };
    const finished = (item: Item, outputIndex: number) => {
      host.emit('response.output_item.done', { ...base, output_index: outputIndex, item: itemObject(item, dialect) });
      if (!this.outOfBand) host.emit('conversation.item.done', { item: itemObject(item, dialect) });
    };
    const openMessage = () => {
      if (message) return message;
      message = { id: newId('item'), type: 'message', role: 'assistant', status: 'in_progress', content: [] };
      part = withAudio ? { type: 'output_audio', transcript: '' } : { type: 'output_text', text: '' };
      message.content.push(part);
      messageIndex = state.output.push(message) - 1;
      added(message, messageIndex);
      host.emit('response.content_part.added', { ...base, item_id: message.id, output_index: messageIndex, content_index: 0, part: partObject(withAudio ? { type: 'output_audio', transcript: '' } : { type: 'output_text', text: '' }) });
      return message;
    };
    const where = () => ({ ...base, item_id: message!.id, output_index: messageIndex, content_index: 0 });
    let audioSent = false;
    const sendAudio = (bytes: Buffer) => {
      for (const delta of base64Chunks(bytes, AUDIO_DELTA_BYTES)) {
        host.emit('response.output_audio.delta', { ...where(), delta });
        if (!audioSent) host.firstAudio();
        audioSent = true;
      }
    };

    let outcome: ResponseOutcome = { status: 'completed' };
    let usage: ResponseState['usage'];
    try {
      const request = replyRequest(config, params, conversation);
      const { output } = config;
      const speech = withAudio
        ? { model: output.speechModel, voice: params.voice ?? output.voice, speed: output.speed, voiceDescription: output.voiceDescription, refAudio: output.refAudio, refText: output.refText, seed: VOICE_SEED }
        : undefined;
      const result = await runReply(
        host.engine,
        request,
        speech,
        {
          text: (delta) => {
            openMessage();
            if (part!.type === 'output_audio') part!.transcript += delta;
            else part!.text += delta;
            host.emit(withAudio ? 'response.output_audio_transcript.delta' : 'response.output_text.delta', { ...where(), delta });
          },
          audio: (samples, sampleRate) => {
            openMessage();
            encoder ??= new OutputAudioEncoder(state.outputFormat, sampleRate);
            sendAudio(encoder.encode(samples));
          },
          spoken: (sentence) => {
            const list = ResponseRun.spoken.get(openMessage()) ?? [];
            list.push(sentence);
            ResponseRun.spoken.set(message!, list);
          },
          toolCall: (call) => this.functionCall(call, state, added, finished),
        },
        this.controller.signal,
      );
      usage = result.usage;
      if (result.finishReason === 'length') outcome = { status: 'incomplete', reason: 'max_output_tokens' };
    } catch (error) {
      if (this.cancelled) {
        outcome = { status: 'cancelled', reason: this.cancelled };
      } else {
        const typed = asLserveError(error);
        outcome = { status: 'failed', error: { type: typed.type, ...(typed.code ? { code: typed.code } : {}) } };
        host.failed(typed);
      }
    }
    if (this.cancelled && outcome.status !== 'cancelled') outcome = { status: 'cancelled', reason: this.cancelled };
    if (message && part) {
      if (encoder) sendAudio(encoder.flush());
      if (part.type === 'output_audio') {
        if (encoder) host.emit('response.output_audio.done', where());
        host.emit('response.output_audio_transcript.done', { ...where(), transcript: part.transcript });
      } else {
        host.emit('response.output_text.done', { ...where(), text: part.text });
      }
      host.emit('response.content_part.done', { ...where(), part: partObject(part) });
      message.status = outcome.status === 'completed' ? 'completed' : 'incomplete';
      finished(message, messageIndex);
    }
    host.emit('response.done', { response: responseObject({ ...state, outcome, usage: usage ?? { promptTokens: 0, cachedPromptTokens: 0, completionTokens: 0, reasoningTokens: 0 } }, dialect) });
  }

  private functionCall(call: ChatToolCall, state: ResponseState, added: (item: Item, index: number) => void, finished: (item: Item, index: number) => void): void {
    const item: Item = { id: newId('item'), type: 'function_call', status: 'in_progress', callId: call.id, name: call.name, arguments: call.arguments };
    const index = state.output.push(item) - 1;
    added(item, index);
    const where = { response_id: this.id, item_id: item.id, output_index: index, call_id: call.id };
    this.host.emit('response.function_call_arguments.delta', { ...where, delta: call.arguments });
    this.host.emit('response.function_call_arguments.done', { ...where, name: call.name, arguments: call.arguments });
    item.status = 'completed';
    finished(item, index);
  }
}

/**
 * conversation.item.truncate on an assistant's audio: what the user heard
 * up to `audioEndMs` becomes the item's transcript, so that the model's
 * memory of its answer is what was heard (the audio itself is not kept).
 */
export function truncateHeard(item: Item, contentIndex: number, audioEndMs: number): void {
  if (item.type !== 'message' || item.role !== 'assistant') throw new TypeError('only an assistant message can be truncated');
  const part = item.content[contentIndex];
  if (!part || part.type !== 'output_audio') throw new TypeError(`content ${contentIndex} is not audio`);
  const spoken = ResponseRun.spoken.get(item) ?? [];
  const length = spoken.at(-1)?.end ?? 0;
  if (audioEndMs / 1000 > length + 0.05) throw new RangeError(`the audio is ${Math.round(length * 1000)} ms long`);
  // The heard words as the transcript spells them: a spoken piece cut inside a long run of text has no
  // whitespace the transcript has, or the reverse, so the pieces' own text would not be its prefix.
  const heardWords = heardText(spoken, audioEndMs / 1000).split(/\s+/).filter(Boolean).length;
  part.transcript = wordsOf(part.transcript ?? '', heardWords);
}

/** The first `count` words of `text`, as written (whitespace between them kept). */
function wordsOf(text: string, count: number): string {
  let end = 0;
  let words = 0;
  for (const match of text.matchAll(/\S+/g)) {
    if (words++ >= count) break;
    end = match.index + match[0].length;
  }
  return text.slice(0, end);
}
