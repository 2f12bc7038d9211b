import { randomBytes } from 'node:crypto';
import { statSync } from 'node:fs';
import type { LlamaContext, LlamaModel, Token, Tokenizer } from 'node-llama-cpp';
import type { ChatMedia } from '../../core/tasks/chat.js';
import { AUDIO_SAMPLE_RATE } from '../../core/tasks/chat-media.js';
import { UnsupportedError } from '../../core/errors.js';
import { vocabularySize } from './runtime.js';
import { nodeLlamaLock } from './node-llama-lock.js';

/**
 * Images and audio in a llama.cpp chat: llama.cpp's multimodal library
 * (libmtmd) through lserve's binding in the threadpool addon
 * (scripts/llama/lserveMtmd.cpp), feeding the same context, sequences and
 * decode gate as text.
 *
 * node-llama-cpp knows only tokens, and takes a token's index in a
 * sequence for its position in the KV cache. So a media item enters the
 * prompt as tokens too: libmtmd's text tokens around it (Qwen2-VL's
 * <|vision_start|> …) as they are, and the media itself as one placeholder
 * id per position it takes (n_pos: fewer than its embeddings where the model
 * uses M-RoPE), ids above the vocabulary, derived from the media's hash.
 * node-llama-cpp's prefix reuse, erasure and bookkeeping then hold unchanged:
 * the same image gives the same placeholders, so a follow-up question about
 * it reuses the KV cells; another image differs from its first position on.
 * A hook on the context's decoding (`_decodeTokens`, node-llama-cpp 3.21.1,
 * pinned) evaluates a placeholder run natively — encode, then decode the
 * embeddings into the sequence — under the context's own lock, and passes
 * text runs on to node-llama-cpp's batching.
 *
 * In the chat template, a media item is a marker unique to the request
 * (`<__lserve_media_…__>`), which the model's wrapped tokenizer replaces by
 * the item's tokens; anything else stays text.
 */

interface NativeChunk {
  type: 'text' | 'image' | 'audio';
  tokens?: Uint32Array;
  nTokens?: number;
  nPos?: number;
}

interface NativeProjector {
  load(file: string, threads: number): Promise<{ vision: boolean; audio: boolean; audioSampleRate: number }>;
  tokenize(media: { width: number; height: number; rgb: Uint8Array } | { samples: Float32Array }, id: string): Promise<{ handle: number; chunks: NativeChunk[] }>;
  embed(handle: number, chunk: number): Promise<Float32Array>;
  eval(context: unknown, handle: number, chunk: number, sequenceId: number, nPast: number): Promise<{ nPast: number; encodeMs: number; decodeMs: number }>;
  release(handle: number): void;
  dispose(): Promise<void>;
}

type NativeProjectorClass = new (model: unknown) => NativeProjector;

/** A media item tokenized for the model; shared by the requests that carry the same bytes. */
interface Prepared {
  hash: string;
  handle: number;
  chunks: NativeChunk[];
  /** The prompt tokens standing for it: text ids, and placeholders for its media chunks. */
  tokens: Token[];
  users: number;
}

/** Where a placeholder run starts: which media chunk it stands for. */
interface RunStart {
  prepared: Prepared;
  chunk: number;
  nPos: number;
}

/** A request's media, tokenized: the messages with their markers, for the template; released after the request. */
export interface RequestMedia {
  /** Each message's content with its MEDIA_MARKERs replaced by markers unique to this request. */
  contents: string[];
  /** Hashes of each message's media, for the prompt cache's fingerprints. */
  hashes: string[][];
  release(): void;
}

/** Placeholder ids are vocabulary size + 30 bits: below 2³¹, as token ids travel in Int32 and Uint32 arrays. */
const PLACEHOLDER_SPAN = 2 ** 30;
const REQUEST_MARKER = /<__lserve_media_[0-9a-f]{16}__>/g;

/** libmtmd's binding, where the loaded llama.cpp binary carries it (lserve's threadpool addon). */
export function projectorBinding(model: LlamaModel): NativeProjectorClass | undefined {
  const bindings = (model.llama as unknown as { _bindings?: { AddonMtmd?: NativeProjectorClass } })._bindings;
  return bindings?.AddonMtmd;
}

export class MediaProjector {
  private readonly prepared = new Map<string, Promise<Prepared>>();
  private readonly runs = new Map<number, RunStart>();
  private readonly markers = new Map<string, Prepared>();
  private readonly nVocab: number;

  private constructor(
    private readonly model: LlamaModel,
    private readonly native: NativeProjector,
    readonly takes: ReadonlySet<ChatMedia['kind']>,
    /** The projector file's size: its weights are held in memory. */
    readonly bytes: number,
  ) {
    this.nVocab = vocabularySize(model);
    // node-llama-cpp tokenizes prompts through this field (LlamaChat, LlamaText.tokenize); it is typed read-only.
    (model as { tokenizer: Tokenizer }).tokenizer = this.wrapTokenizer(model.tokenizer);
  }

  /** Loads `file` for `model`: undefined where the llama.cpp binary has no libmtmd binding. */
  static async load(model: LlamaModel, file: string, threads: number): Promise<MediaProjector | undefined> {
    const Binding = projectorBinding(model);
    if (!Binding) return undefined;
    if (vocabularySize(model) === 0) throw new Error('the model lists no vocabulary: its media placeholders would collide with its tokens');
    const native = new Binding((model as unknown as { _model: unknown })._model);
    const caps = await native.load(file, threads);
    const takes = new Set<ChatMedia['kind']>();
    if (caps.vision) takes.add('image');
    // The server decodes audio at one rate; a projector wanting another is left without audio rather than fed wrong samples.
    if (caps.audio && caps.audioSampleRate === AUDIO_SAMPLE_RATE) takes.add('audio');
    return new MediaProjector(model, native, takes, statSync(file).size);
  }

  /**
   * Tokenizes a request's media (each distinct item once, shared with
   * requests in flight that carry it) and gives each a marker for the
   * template. Release the result when the request ends.
   */
  async prepare(messages: ReadonlyArray<{ content: string; media?: readonly ChatMedia[] }>, marker: string): Promise<RequestMedia> {
    const held: Prepared[] = [];
    const markers: string[] = [];
    const release = () => {
      for (const name of markers) this.markers.delete(name);
      for (const item of held) this.unuse(item);
    };
    try {
      const contents: string[] = [];
      const hashes: string[][] = [];
      for (const message of messages) {
        const media = message.media ?? [];
        const parts = message.content.split(marker);
        let content = parts[0]!;
        for (let i = 1; i < parts.length; i++) {
          const item = media[i - 1];
          if (!item) throw new Error('a media marker without its media');
          if (!this.takes.has(item.kind)) throw new UnsupportedError(`This model's projector takes no ${item.kind === 'image' ? 'images' : 'audio'}.`, { param: item.param, code: 'unsupported_input' });
          const prepared = await this.use(item);
          held.push(prepared);
          const name = `<__lserve_media_${randomBytes(8).toString('hex')}__>`;
          this.markers.set(name, prepared);
          markers.push(name);
          content += name + parts[i];
        }
        contents.push(content);
        hashes.push(media.map((m) => m.hash ?? ''));
      }
      return { contents, hashes, release };
    } catch (error) {
      release();
      throw error;
    }
  }

  /** KV cells the media items starting in `tokens` take beyond their placeholders (M-RoPE models give an image fewer positions than embeddings). */
  extraCellsIn(tokens: readonly Token[]): number {
    let extra = 0;
    for (const token of tokens) {
      const run = token >= this.nVocab ? this.runs.get(token) : undefined;
      if (run) extra += run.prepared.chunks[run.chunk]!.nTokens! - run.nPos;
    }
    return extra;
  }

  /** The embeddings the projector gives the language model for a media item: nTokens × the model's width, per media chunk. */
  async embeddings(item: ChatMedia): Promise<Float32Array[]> {
    const prepared = await this.use(item);
    try {
      const media = prepared.chunks.flatMap((chunk, index) => (chunk.type === 'text' ? [] : [index]));
      const out: Float32Array[] = [];
      for (const index of media) out.push(await this.native.embed(prepared.handle, index));
      return out;
    } finally {
      this.unuse(prepared);
    }
  }

  /**
   * Routes the context's placeholder runs to libmtmd. Install it before the
   * decode gate (which then wraps it): the gate sees whole requests.
   */
  async installDecode(context: LlamaContext): Promise<void> {
    type Decode = (request: DecodeRequest, mapper: unknown) => Promise<Array<[number, unknown]>>;
    const target = context as unknown as { _decodeTokens?: Decode; _ctx: unknown };
    const decode = target._decodeTokens?.bind(context);
    if (!decode) throw new Error('this node-llama-cpp version has no decode hook for media (LlamaContext._decodeTokens)');
    const withLock = await nodeLlamaLock();
    target._decodeTokens = async (request, mapper) => {
      const { tokens } = request;
      if (!tokens.some((t) => t >= this.nVocab)) return decode(request, mapper);
      const results: Array<[number, unknown]> = [];
      for (let start = 0; start < tokens.length; ) {
        const first = request.firstTokenSequenceIndex + start;
        const run = this.runs.get(tokens[start]!);
        if (tokens[start]! >= this.nVocab) {
          if (!run || start + run.nPos > tokens.length) throw new Error('a media item must be evaluated whole, from its first position');
          const done = await withLock([context, 'context'], () => this.native.eval(target._ctx, run.prepared.handle, run.chunk, request.sequenceId, first));
          if (done.nPast !== first + run.nPos) throw new Error(`the media took positions ${first}…${done.nPast}, not ${run.nPos}`);
          start += run.nPos;
          continue;
        }
        let end = start;
        while (end < tokens.length && tokens[end]! < this.nVocab) end++;
        const last = end === tokens.length;
        const part = { ...request, tokens: tokens.slice(start, end), logits: request.logits.slice(start, end), firstTokenSequenceIndex: first, afterBatchAction: last ? request.afterBatchAction : undefined };
        results.push(...(await decode(part, mapper)));
        start = end;
      }
      return results;
    };
  }

  async dispose(): Promise<void> {
    this.prepared.clear();
    this.runs.clear();
    await this.native.dispose();
  }

  private async use(item: ChatMedia): Promise<Prepared> {
    const hash = item.hash;
    if (!hash || !(item.image || item.audio)) throw new Error(`${item.param}: the media reached the model undecoded`);
    let pending = this.prepared.get(hash);
    if (!pending) {
      pending = this.tokenize(item, hash);
      this.prepared.set(hash, pending);
      pending.catch(() => this.prepared.delete(hash));
    }
    const prepared = await pending;
    prepared.users++;
    return prepared;
  }

  private unuse(prepared: Prepared): void {
    if (--prepared.users > 0) return;
    // The KV cells keep the media; its placeholders find it again if a later request brings the same bytes.
    this.prepared.delete(prepared.hash);
    this.native.release(prepared.handle);
    for (const [token, run] of this.runs) if (run.prepared === prepared) this.runs.delete(token);
  }

  private async tokenize(item: ChatMedia, hash: string): Promise<Prepared> {
    const media = item.image ? { width: item.image.width, height: item.image.height, rgb: item.image.data } : { samples: item.audio! };
    const { handle, chunks } = await this.native.tokenize(media, hash);
    const prepared: Prepared = { hash, handle, chunks, tokens: [], users: 0 };
    const base = Number.parseInt(hash.slice(0, 8), 16) % PLACEHOLDER_SPAN;
    chunks.forEach((chunk, index) => {
      if (chunk.type === 'text') {
        prepared.tokens.push(...(Array.from(chunk.tokens!) as Token[]));
        return;
      }
      const nPos = chunk.nPos!;
      for (let j = 0; j < nPos; j++) prepared.tokens.push((this.nVocab + ((base + index * 7919 + j) % PLACEHOLDER_SPAN)) as Token);
      this.runs.set(prepared.tokens[prepared.tokens.length - nPos]!, { prepared, chunk: index, nPos });
    });
    return prepared;
  }

  /**
   * The model's tokenizer, which turns this request's media markers into the
   * media's tokens and keeps placeholders from the vocabulary's native calls
   * (a placeholder detokenizes to nothing; it is neither special nor an end).
   */
  private wrapTokenizer(original: Tokenizer): Tokenizer {
    const isPlaceholder = (token: Token) => token >= this.nVocab;
    const tokenize = (text: string, special?: boolean | 'builtin', options?: 'trimLeadingSpace'): Token[] => {
      if (special === 'builtin' || typeof text !== 'string' || !text.includes('<__lserve_media_')) return (original as (t: string, s?: unknown, o?: unknown) => Token[])(text, special, options);
      const out: Token[] = [];
      let at = 0;
      for (const match of text.matchAll(REQUEST_MARKER)) {
        const prepared = this.markers.get(match[0]);
        if (!prepared) continue;
        // As libmtmd tokenizes around its marker: the text after a media item starts without a leading space.
        if (match.index > at) out.push(...original(text.slice(at, match.index), special, out.length > 0 ? 'trimLeadingSpace' : options));
        out.push(...prepared.tokens);
        at = match.index + match[0].length;
      }
      if (at < text.length) out.push(...original(text.slice(at), special, at > 0 ? 'trimLeadingSpace' : options));
      return out;
    };
    const detokenize: Tokenizer['detokenize'] = (tokens, specialTokens, lastTokens) =>
      original.detokenize(tokens.filter((t) => !isPlaceholder(t)), specialTokens, lastTokens?.filter((t) => !isPlaceholder(t)));
    return Object.assign(tokenize, {
      detokenize,
      isSpecialToken: (token: Token) => !isPlaceholder(token) && original.isSpecialToken(token),
      isEogToken: (token: Token) => !isPlaceholder(token) && original.isEogToken(token),
    }) as Tokenizer;
  }
}

interface DecodeRequest {
  sequenceId: number;
  tokens: Token[];
  logits: boolean[];
  firstTokenSequenceIndex: number;
  afterBatchAction?: unknown;
}
