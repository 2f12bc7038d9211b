import { h } from './dom.js';

/**
 * The page's only way to the server: the public /v1 API, exactly as any
 * client calls it (JSON, multipart, SSE, WebSocket). The API key, when the
 * server wants one, is kept for this tab only and sent with every call.
 */

const KEY_STORAGE = 'lserve.api-key';
/** The WebSocket subprotocol that carries the key (browsers cannot set headers on a WebSocket). */
const WS_KEY_PROTOCOL = 'lserve.api-key.';

export class ApiError extends Error {
  constructor(
    message: string,
    readonly status: number,
    readonly code: string | null = null,
  ) {
    super(message);
  }
}

/** Told when a call is refused for want of a key (main.ts opens the key dialog). */
export const apiEvents = new EventTarget();

export function apiKey(): string {
  return sessionStorage.getItem(KEY_STORAGE) ?? '';
}

export function setApiKey(key: string): void {
  if (key) sessionStorage.setItem(KEY_STORAGE, key);
  else sessionStorage.removeItem(KEY_STORAGE);
}

function headersWith(extra?: HeadersInit): Headers {
  const headers = new Headers(extra);
  const key = apiKey();
  if (key) headers.set('Authorization', `Bearer ${key}`);
  return headers;
}

export interface CallInit extends Omit<RequestInit, 'body'> {
  json?: unknown;
  body?: BodyInit;
}

/** A fetch of a /v1 path; any non-2xx answer becomes an ApiError with the server's message. */
export async function call(path: string, init: CallInit = {}): Promise<Response> {
  const { json, ...rest } = init;
  const headers = headersWith(init.headers);
  let body = init.body;
  if (json !== undefined) {
    headers.set('Content-Type', 'application/json');
    body = JSON.stringify(json);
  }
  const res = await fetch(path, { ...rest, headers, body });
  if (!res.ok) throw await errorOf(res);
  return res;
}

export async function getJson<T>(path: string, init: CallInit = {}): Promise<T> {
  return (await (await call(path, init)).json()) as T;
}

async function errorOf(res: Response): Promise<ApiError> {
  let message = `${res.status} ${res.statusText}`;
  let code: string | null = null;
  try {
    const body = (await res.json()) as { error?: { message?: string; code?: string | null } };
    if (body.error?.message) message = body.error.message;
    code = body.error?.code ?? null;
  } catch {
    // not JSON
  }
  if (res.status === 401) apiEvents.dispatchEvent(new Event('unauthorized'));
  return new ApiError(message, res.status, code);
}

export interface SseMessage {
  event: string | undefined;
  data: string;
}

/** The events of a server-sent-events response, as they arrive. */
export async function* readSse(res: Response): AsyncGenerator<SseMessage> {
  if (!res.body) return;
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += value;
    let end: number;
    while ((end = buffer.search(/\r?\n\r?\n/)) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + (buffer[end] === '\r' ? 4 : 2));
      let event: string | undefined;
      const data: string[] = [];
      for (const line of block.split(/\r?\n/)) {
        if (line.startsWith('event:')) event = line.slice(6).trim();
        else if (line.startsWith('data:')) data.push(line.slice(5).replace(/^ /, ''));
      }
      if (data.length) yield { event, data: data.join('\n') };
    }
  }
}

/** A WebSocket to a /v1 path on this server, with the key as a subprotocol when there is one. */
export function openSocket(pathAndQuery: string): WebSocket {
  const url = new URL(pathAndQuery, location.href);
  url.protocol = location.protocol === 'https:' ? 'wss:' : 'ws:';
  const key = apiKey();
  if (!key) return new WebSocket(url);
  const encoded = btoa(String.fromCharCode(...new TextEncoder().encode(key)))
    .replace(/\+/g, '-')
    .replace(/\//g, '_')
    .replace(/=+$/, '');
  return new WebSocket(url, ['lserve', `${WS_KEY_PROTOCOL}${encoded}`]);
}

// ─── Models, shared by every panel's model picker ───────────────────────────

export interface ModelInfo {
  id: string;
  kind: string;
  loaded: boolean;
  /** Chat models: what their messages may carry ('text', 'image', 'audio'). */
  architecture?: { input_modalities: string[] };
  /** The default of its kind: where a request naming no model of the kind goes. */
  default?: boolean;
}

let models: ModelInfo[] = [];
export const modelEvents = new EventTarget();

export function installedModels(): ModelInfo[] {
  return models;
}

/** Re-reads GET /v1/models and tells every picker. */
export async function refreshModels(): Promise<ModelInfo[]> {
  const list = await getJson<{ data: ModelInfo[] }>('/v1/models');
  models = list.data;
  modelEvents.dispatchEvent(new Event('change'));
  return models;
}

/** The server's default model among these kinds, if one of them is installed. */
export function defaultModel(kinds: readonly string[]): ModelInfo | undefined {
  return models.find((m) => kinds.includes(m.kind) && m.default);
}

/** What a kind is called on a page ("speech recognition"), for the empty states. */
const KIND_WORDS: Record<string, string> = {
  chat: 'chat',
  asr: 'speech recognition',
  'asr-stream': 'streaming speech recognition',
  tts: 'speech',
  image: 'image',
  ocr: 'OCR',
  embedding: 'embedding',
  rerank: 'rerank',
};

/** The empty state of a page whose model kind has nothing installed: what is missing and where to get one. */
export function missingModel(kinds: readonly string[]): string {
  return `No ${kinds.map((k) => KIND_WORDS[k] ?? k).join(' or ')} model is installed: download one on the Models page, or run \`npx lserve pull <id>\` where the server runs.`;
}

/**
 * Keeps a <select> filled with the installed models of these kinds, the
 * server's default of the kind selected first (the choice survives a
 * refresh while the model stays installed). `filter` narrows further; with
 * none installed, the select says so and a note under it points to the
 * Models page, until one is.
 */
export function bindModelSelect(select: HTMLSelectElement, kinds: readonly string[], filter: (m: ModelInfo) => boolean = () => true): void {
  const note = h('p.no-model', {}, h('span', { text: missingModel(kinds) }), ' ', h('a', { href: '#models', text: 'Open Models' }));
  const fill = () => {
    const previous = select.value;
    const fitting = models.filter((m) => kinds.includes(m.kind) && filter(m));
    select.replaceChildren(
      ...(fitting.length
        ? fitting.map((m) => new Option(m.loaded ? `${m.id} ●` : m.id, m.id))
        : [new Option(`no ${kinds.map((k) => KIND_WORDS[k] ?? k).join(' / ')} model installed`, '')]),
    );
    select.disabled = fitting.length === 0;
    if (fitting.length) note.remove();
    else if (!note.isConnected) (select.closest('header') ?? select.closest('label') ?? select).after(note);
    const initial = previous || defaultModel(kinds)?.id;
    if (fitting.some((m) => m.id === initial)) select.value = initial!;
    if (select.value !== previous) select.dispatchEvent(new Event('change'));
  };
  modelEvents.addEventListener('change', fill);
  fill();
}

export function errorText(error: unknown): string {
  if (error instanceof DOMException && error.name === 'AbortError') return 'stopped';
  return error instanceof Error ? error.message : String(error);
}
