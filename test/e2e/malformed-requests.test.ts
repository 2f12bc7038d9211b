import net from 'node:net';
import multer from 'multer';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MAX_JSON_DEPTH } from '../../src/api/validate.js';
import { toLserveError } from '../../src/http/errors.js';
import { ANTHROPIC_PATHS } from '../../src/http/routes/anthropic.js';
import { startTestServer, type TestServer } from '../helpers/server.js';

/**
 * A corpus of malformed requests against every POST route the app mounts:
 * broken and wrongly typed JSON, wrong content types, hostile nesting, bodies
 * over the limit, and broken multipart uploads. (Host, Origin, path and URL
 * inputs are security.test.ts's corpus; the WebSocket protocol's is in
 * transcription-stream.test.ts; field bounds are request-bounds.test.ts's.) Each must be a 4xx in the
 * route's documented error shape with no stack trace, and the server must
 * keep serving afterwards. No model is registered: every case has to fail
 * at the boundary, before any model loads (a shaped 404 model_not_found is
 * acceptable where the body is valid apart from the model).
 */

/** Small limits keep the corpus fast; the deepest nesting case (~600 KB) still fits under the body limit. */
const MAX_BODY = 1024 * 1024;
const MAX_UPLOAD = 64 * 1024;

type Shape = 'openai' | 'anthropic';

interface Route {
  path: string;
  shape: Shape;
  /** A body that passes validation apart from the (unregistered) model. */
  base: Record<string, unknown>;
  /** Field whose value the nesting cases replace, so validation walks into it. */
  field: string;
  /** [field, wrong value]: each must be a 400 naming the field. */
  wrongTypes: Array<[string, unknown]>;
  multipart: boolean;
  /** The multipart file field (default `file`), and the text fields a valid form needs besides `model`. */
  fileField?: string;
  formFields?: Record<string, string>;
}

const chatBase = { model: 'no-such-model', messages: [{ role: 'user', content: 'hi' }] };
const anthropicBase = { model: 'no-such-model', max_tokens: 16, messages: [{ role: 'user', content: 'hi' }] };
const anthropicWrong: Array<[string, unknown]> = [
  ['model', 123],
  ['messages', 'x'],
  ['messages', [{ role: 'robot', content: 'hi' }]],
  ['messages', [{ role: 'user', content: [{ type: 'image', source: { type: 'base64', media_type: 'image/svg+xml', data: 'PHN2Zz4=' } }] }]],
  ['messages', [{ role: 'user', content: [{ type: 'image', source: { type: 'file', file_id: 'x' } }] }]],
  ['messages', [{ role: 'assistant', content: [{ type: 'image', source: { type: 'url', url: 'https://example.com/a.png' } }] }]],
  ['max_tokens', 'many'],
  ['system', 5],
  ['stream', 'yes'],
  // Tools and their blocks, as agents send them.
  ['tools', 'x'],
  ['tools', [{ name: 'x' }]],
  ['tools', [{ name: 'bad name!', input_schema: { type: 'object' } }]],
  ['tools', [{ name: 'x', input_schema: { type: 'string' } }]],
  ['tools', [{ name: 'x', input_schema: { type: 'object' }, defer_loading: 'yes' }]],
  ['tools', [{ name: 'x', input_schema: { type: 'object' }, defer_loading: true }]],
  ['tools', [{ type: 'teleport_20990101', name: 'x' }]],
  ['tools', [{ type: 'bash_20250124', name: 'sh' }]],
  ['tools', Array.from({ length: 129 }, (_, i) => ({ name: `t${i}`, input_schema: { type: 'object' } }))],
  ['tool_choice', { type: 'tool' }],
  ['tool_choice', { type: 'sometimes' }],
  ['messages', [{ role: 'user', content: [{ type: 'tool_result' }] }]],
  ['messages', [{ role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_nobody', content: 'x' }] }]],
  ['messages', [{ role: 'user', content: [{ type: 'tool_result', tool_use_id: 't', content: [{ type: 'tool_reference' }] }] }]],
  ['messages', [{ role: 'user', content: [{ type: 'tool_result', tool_use_id: 't', content: 7 }] }]],
  ['messages', [{ role: 'assistant', content: [{ type: 'tool_use', id: 't', name: 'x', input: 'not an object' }] }]],
  ['messages', [{ role: 'assistant', content: [{ type: 'thinking', thinking: 'x' }] }]],
  ['messages', [{ role: 'system', content: [{ type: 'image', source: { type: 'url', url: 'https://example.com/a.png' } }] }]],
  ['thinking', { type: 'adaptive', display: 'loud' }],
  ['thinking', { type: 'enabled' }],
  ['output_config', { effort: 'extreme' }],
  ['output_config', { format: { type: 'json_schema' } }],
  ['context_management', { edits: [{ type: 'clear_tool_uses_20250919', keep: { type: 'tool_uses', value: -1 } }] }],
  ['context_management', { edits: [{ type: 'compact_20260112' }] }],
  ['mcp_servers', [{ type: 'url' }]],
  ['compaction', { type: 'summarize' }],
  ['thread', { type: 'create' }],
];

const ROUTES: Route[] = [
  {
    path: '/v1/chat/completions',
    shape: 'openai',
    base: chatBase,
    field: 'messages',
    wrongTypes: [
      ['model', 123],
      ['messages', 'x'],
      ['messages', {}],
      ['messages', [{ role: 'user', content: [{ type: 'image_url' }] }]],
      ['messages', [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 5 } }] }]],
      ['messages', [{ role: 'user', content: [{ type: 'input_audio', input_audio: { data: 'UklGRg==', format: 'ogg' } }] }]],
      ['messages', [{ role: 'user', content: [{ type: 'video_url', video_url: 'x' }] }]],
      ['messages', [{ role: 'system', content: [{ type: 'image_url', image_url: 'data:image/png;base64,AAAA' }] }]],
      ['temperature', 'hot'],
      ['stream', 'yes'],
      ['tools', 'x'],
      ['max_tokens', -1],
    ],
    multipart: false,
  },
  {
    path: '/v1/responses',
    shape: 'openai',
    base: { model: 'no-such-model', input: 'hi' },
    field: 'input',
    wrongTypes: [
      ['model', 123],
      ['input', 42],
      ['input', {}],
      ['input', []],
      ['input', [{ type: 'bogus' }]],
      ['input', [{ type: 'message', role: 'robot', content: 'x' }]],
      ['input', [{ type: 'message', role: 'user', content: [{ type: 'input_audio' }] }]],
      ['input', [{ type: 'message', role: 'user', content: [{ type: 'input_image' }] }]],
      ['input', [{ type: 'message', role: 'user', content: [{ type: 'input_image', image_url: 7 }] }]],
      ['input', [{ type: 'function_call_output', output: 'x' }]],
      ['input', Array.from({ length: 2049 }, () => ({ role: 'user', content: 'x' }))],
      ['instructions', 5],
      ['max_output_tokens', 'many'],
      ['max_output_tokens', 0],
      ['temperature', 'hot'],
      ['top_p', 2],
      ['tools', 'x'],
      ['tools', [{ type: 'function' }]],
      ['tools', [{ type: 'teleport' }]],
      ['tools', [{ type: 'namespace', name: 'x', tools: [] }]],
      ['tools', [{ type: 'namespace', name: 'x', description: 'd', tools: [{ type: 'namespace', name: 'y', description: 'd', tools: [] }] }]],
      ['tools', [{ type: 'function', name: 'f', defer_loading: 'yes' }]],
      ['tools', [{ type: 'function', name: 'f' }, { type: 'namespace', name: 'f', description: '', tools: [{ type: 'function', name: 'g' }] }, { type: 'function', name: 'f__g' }]],
      ['tools', [{ type: 'custom', name: 'x', format: { type: 'grammar', syntax: 'regex', definition: '.*' } }]],
      ['tools', Array.from({ length: 129 }, (_, i) => ({ type: 'function', name: `f${i}` }))],
      ['tool_choice', 5],
      ['tool_choice', { type: 'function' }],
      ['parallel_tool_calls', 'yes'],
      ['text', 5],
      ['text', { format: { type: 'xml' } }],
      ['text', { format: { type: 'json_schema', name: 'x', schema: 'x' } }],
      ['reasoning', { effort: 'extreme' }],
      ['metadata', { a: 1 }],
      ['metadata', { a: 'x'.repeat(513) }],
      ['truncation', 'sometimes'],
      ['store', 'yes'],
      ['previous_response_id', 5],
      ['stream', 'yes'],
      ['background', true],
      ['include', 'x'],
      ['user', 5],
      ['safety_identifier', 5],
      ['prompt_cache_key', 5],
      ['service_tier', 5],
      ['stream_options', 5],
      ['top_logprobs', 'x'],
      ['keep_alive', {}],
      ['logit_bias', 'x'],
      ['conversation', 'conv_1'],
      ['client_metadata', 'x'],
      ['input', [{ type: 'function_call_output', call_id: 'nope', output: 'x' }]],
      ['input', [{ type: 'tool_search_output', tools: 'x' }]],
      ['input', [{ type: 'tool_search_output', tools: [{ type: 'teleport' }] }]],
      ['input', [{ type: 'reasoning', encrypted_content: 5 }]],
      ['input', [{ type: 'additional_tools', role: 'user', tools: [] }]],
      ['tool_choice', { type: 'allowed_tools', mode: 'sometimes', tools: [] }],
    ],
    multipart: false,
  },
  ...ANTHROPIC_PATHS.map((path): Route => ({ path, shape: 'anthropic', base: anthropicBase, field: 'messages', wrongTypes: anthropicWrong, multipart: false })),
  {
    path: '/v1/embeddings',
    shape: 'openai',
    base: { model: 'no-such-model', input: 'hi' },
    field: 'input',
    wrongTypes: [
      ['model', 123],
      ['input', {}],
      ['input', [{}]],
      ['input', [-1]],
      ['encoding_format', 5],
      ['dimensions', 'x'],
    ],
    multipart: false,
  },
  {
    path: '/v1/rerank',
    shape: 'openai',
    base: { model: 'no-such-model', query: 'q', documents: ['a'] },
    field: 'documents',
    wrongTypes: [
      ['model', 123],
      ['query', {}],
      ['documents', 'x'],
      ['documents', [5]],
      ['top_n', 'x'],
    ],
    multipart: false,
  },
  {
    path: '/v1/ocr',
    shape: 'openai',
    base: { model: 'no-such-model', image_base64: 'aGk=' },
    field: 'image_url',
    wrongTypes: [
      ['model', 123],
      ['image_base64', 42],
      ['image_url', {}],
      ['keep_alive', {}],
    ],
    multipart: true,
  },
  {
    path: '/v1/audio/transcriptions',
    shape: 'openai',
    base: { model: 'no-such-model', audio: 'data:audio/wav;base64,aGk=' },
    field: 'audio',
    wrongTypes: [
      ['model', 123],
      ['audio', 42],
      ['language', {}],
      ['temperature', 'hot'],
      ['response_format', 'doc'],
      ['timestamp_granularities', 'word'],
    ],
    multipart: true,
  },
  {
    path: '/v1/audio/speech',
    shape: 'openai',
    base: { model: 'no-such-model', input: 'hi' },
    field: 'input',
    wrongTypes: [
      ['model', 123],
      ['input', 42],
      ['voice', {}],
      ['speed', 'fast'],
      ['stream', 'yes'],
      ['frames', 1.5],
      ['response_format', 'aac'],
      ['seed', -1],
    ],
    multipart: false,
  },
  {
    path: '/v1/models/pull',
    shape: 'openai',
    base: { model: 'no-such-model' },
    field: 'model',
    wrongTypes: [
      ['model', 123],
      ['model', 'x'.repeat(201)],
      ['stream', 'yes'],
    ],
    multipart: false,
  },
  {
    path: '/v1/images/generations',
    shape: 'openai',
    base: { model: 'no-such-model', prompt: 'a cat' },
    field: 'prompt',
    wrongTypes: [
      ['model', 123],
      ['prompt', 42],
      ['n', 'two'],
      ['size', 512],
      ['steps', 1.5],
      ['guidance_scale', 'high'],
      ['response_format', 'png'],
      ['seed', -1],
      ['stream', 'yes'],
    ],
    multipart: false,
  },
  ...(['/v1/images/edits', '/v1/images/img2img'] as const).map(
    (path): Route => ({
      path,
      shape: 'openai',
      base: { model: 'no-such-model', prompt: 'a cat', image: 'aGk=' },
      field: 'image',
      wrongTypes: [
        ['model', 123],
        ['prompt', {}],
        ['image', 42],
        ['n', 0],
        ['output_compression', 101],
        ...(path === '/v1/images/img2img' ? ([['strength', 'half']] as Array<[string, unknown]>) : ([['mask', 7]] as Array<[string, unknown]>)),
      ],
      multipart: true,
      fileField: 'image',
      formFields: { prompt: 'a cat' },
    }),
  ),  // llama.cpp's server routes (model optional: the unregistered one is named, so a valid body is a 404).
  {
    path: '/tokenize',
    shape: 'openai',
    base: { model: 'no-such-model', content: 'hi' },
    field: 'content',
    wrongTypes: [
      ['model', 123],
      ['model', 'x'.repeat(201)],
      ['content', 42],
      ['content', ['hi']],
      ['add_special', 'yes'],
      ['parse_special', 1],
      ['with_pieces', 'yes'],
    ],
    multipart: false,
  },
  {
    path: '/detokenize',
    shape: 'openai',
    base: { model: 'no-such-model', tokens: [1, 2] },
    field: 'tokens',
    wrongTypes: [
      ['model', 123],
      ['tokens', 'x'],
      ['tokens', [1.5]],
      ['tokens', [-1]],
      ['tokens', ['1']],
    ],
    multipart: false,
  },
  {
    path: '/apply-template',
    shape: 'openai',
    base: chatBase,
    field: 'messages',
    wrongTypes: [
      ['model', 123],
      ['messages', 'x'],
      ['messages', [{ role: 'robot', content: 'hi' }]],
      ['tools', 'x'],
      ['chat_template_kwargs', 'x'],
      ['add_generation_prompt', false],
    ],
    multipart: false,
  },
  {
    path: '/v1/completions',
    shape: 'openai',
    base: { model: 'no-such-model', prompt: ['a', 'b'], echo: true, logprobs: 2, max_tokens: 0 },
    field: 'prompt',
    wrongTypes: [
      ['model', 123],
      ['prompt', 5],
      ['prompt', []],
      ['prompt', [[]]],
      ['prompt', [-1]],
      ['prompt', Array.from({ length: 65 }, () => 'x')],
      ['suffix', 5],
      ['max_tokens', 'many'],
      ['n', 0],
      ['n', 17],
      ['best_of', 'x'],
      ['logprobs', 21],
      ['echo', 'yes'],
      ['stop', 5],
      ['logit_bias', 'x'],
      ['stream', 'yes'],
    ],
    multipart: false,
  },
  {
    path: '/infill',
    shape: 'openai',
    base: { model: 'no-such-model', input_prefix: 'def f(', input_suffix: ')\n', input_extra: [{ filename: 'a.py', text: 'x = 1' }] },
    field: 'input_extra',
    wrongTypes: [
      ['model', 123],
      ['input_prefix', 5],
      ['input_suffix', {}],
      ['input_extra', 'x'],
      ['input_extra', [{ filename: 'a.py' }]],
      ['input_extra', [{ filename: 5, text: 'x' }]],
      ['input_extra', Array.from({ length: 257 }, () => ({ text: 'x' }))],
      ['input_extra', [{ filename: 'x'.repeat(4097), text: 'x' }]],
      ['prompt', 5],
      ['n_predict', 'many'],
      ['n_predict', -2],
      ['temperature', 'hot'],
      ['top_p', 2],
      ['seed', 1.5],
      ['stop', 5],
      ['stop', Array.from({ length: 17 }, (_, i) => `s${i}`)],
      ['stream', 'yes'],
      ['logit_bias', 'x'],
      ['n_probs', 5],
      ['grammar', 'root ::= "a"'],
      ['response_fields', 'content'],
    ],
    multipart: false,
  },
];

interface Case {
  name: string;
  route: Route;
  headers: Record<string, string>;
  body: Buffer;
  /** Exact status when the case fixes one; any 4xx otherwise. */
  status?: number;
  /** OpenAI-shape `code` and `param` (the field, or a path under it) the case fixes, if any. */
  code?: string;
  param?: string;
}

const JSON_TYPE = { 'content-type': 'application/json' };

function nested(open: string, close: string, depth: number, leaf = '1'): string {
  return open.repeat(depth) + leaf + close.repeat(depth);
}

/** The generic corpus, sent to every route. */
function jsonCases(route: Route): Case[] {
  const raw = (name: string, body: string, extra: Partial<Case> = {}, headers: Record<string, string> = JSON_TYPE): Case => ({ name, route, headers, body: Buffer.from(body), ...extra });
  const withField = (value: string) => `${JSON.stringify(route.base).slice(0, -1)},${JSON.stringify(route.field)}:${value}}`;
  const cases: Case[] = [
    raw('broken JSON', '{"model": "x", ', { status: 400, code: 'invalid_json' }),
    raw('truncated JSON string', '{"model": "x', { status: 400, code: 'invalid_json' }),
    raw('JSON array at top level', '[1,2,3]', { status: 400 }),
    raw('JSON string at top level', '"hello"', { status: 400 }),
    raw('JSON number at top level', '42', { status: 400 }),
    raw('JSON null at top level', 'null', { status: 400 }),
    raw('empty JSON body', '', { status: 400 }),
    raw('empty body, no content type', '', { status: 400 }, {}),
    raw('JSON sent as text/plain', JSON.stringify(route.base), { status: 400 }, { 'content-type': 'text/plain' }),
    raw('XML body', '<request><model>x</model></request>', { status: 400 }, { 'content-type': 'application/xml' }),
    raw('unsupported charset', JSON.stringify(route.base), { status: 400, code: 'unsupported_encoding' }, { 'content-type': 'application/json; charset=latin1' }),
    raw('undecodable gzip', 'not gzip at all', { status: 400 }, { ...JSON_TYPE, 'content-encoding': 'gzip' }),
    raw('body over the limit', JSON.stringify({ ...route.base, pad: 'x'.repeat(MAX_BODY + 1024) }), { status: 413, code: 'payload_too_large' }),
  ];
  for (const depth of [10_000, 100_000]) {
    cases.push(
      raw(`${depth} nested arrays at top level`, nested('[', ']', depth), { status: 400, code: 'too_deeply_nested' }),
      raw(`${depth} nested objects at top level`, nested('{"a":', '}', depth), { status: 400, code: 'too_deeply_nested' }),
      raw(`${depth} nested arrays in '${route.field}'`, withField(nested('[', ']', depth)), { status: 400, code: 'too_deeply_nested' }),
      raw(`${depth} nested objects in '${route.field}'`, withField(nested('{"a":', '}', depth)), { status: 400, code: 'too_deeply_nested' }),
    );
  }
  for (const [field, value] of route.wrongTypes) {
    cases.push(raw(`${field}: ${JSON.stringify(value)}`, JSON.stringify({ ...route.base, [field]: value }), { status: 400, param: field }));
  }
  if (route.path === '/v1/embeddings') {
    // The depth limit's edge, in a field the schema ignores: the limit itself passes (then the model is unknown), one more is refused.
    const padded = (depth: number) => `${JSON.stringify(route.base).slice(0, -1)},"pad":${nested('[', ']', depth - 1)}}`;
    cases.push(
      raw(`nesting at the limit (${MAX_JSON_DEPTH} levels)`, padded(MAX_JSON_DEPTH), { status: 404, code: 'model_not_found' }),
      raw(`nesting one past the limit (${MAX_JSON_DEPTH + 1} levels)`, padded(MAX_JSON_DEPTH + 1), { status: 400, code: 'too_deeply_nested' }),
    );
  }
  return cases;
}

const BOUNDARY = 'lserve-corpus-boundary';
const MULTIPART_TYPE = { 'content-type': `multipart/form-data; boundary=${BOUNDARY}` };

function part(name: string | null, data: string | Buffer, filename?: string): Buffer {
  const disposition = ['form-data', name === null ? null : `name="${name}"`, filename ? `filename="${filename}"` : null].filter(Boolean).join('; ');
  const type = filename ? 'Content-Type: image/png\r\n' : '';
  return Buffer.concat([Buffer.from(`--${BOUNDARY}\r\nContent-Disposition: ${disposition}\r\n${type}\r\n`), Buffer.from(data), Buffer.from('\r\n')]);
}
const END = Buffer.from(`--${BOUNDARY}--\r\n`);
const FAKE_PNG = Buffer.concat([Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]), Buffer.alloc(2048, 7)]);

/** Broken multipart uploads, for the routes that take one. */
function multipartCases(route: Route): Case[] {
  const mp = (name: string, body: Buffer, extra: Partial<Case> = {}, headers: Record<string, string> = MULTIPART_TYPE): Case => ({ name, route, headers, body, ...extra });
  const field = route.fileField ?? 'file';
  const wrongField = field === 'file' ? 'image' : 'file';
  const fields = Object.entries(route.formFields ?? {}).map(([name, value]) => part(name, value));
  const complete = Buffer.concat([part('model', 'no-such-model'), ...fields, part(field, FAKE_PNG, 'a.png'), END]);
  const cutAt = (marker: string) => complete.subarray(0, complete.indexOf(marker) + marker.length);
  return [
    mp('multipart cut off mid-file', complete.subarray(0, complete.indexOf(FAKE_PNG) + 1000), { status: 400, code: 'malformed_multipart' }),
    mp('multipart cut off before the closing boundary', complete.subarray(0, complete.length - END.length), { status: 400, code: 'malformed_multipart' }),
    mp('multipart cut off inside a part header', cutAt('Content-Disposition: form-da'), { status: 400, code: 'malformed_multipart' }),
    mp('multipart cut off after the first boundary', cutAt(`--${BOUNDARY}\r\n`), { status: 400, code: 'malformed_multipart' }),
    mp('multipart with no parts at all', Buffer.from('just a preamble'), { status: 400, code: 'malformed_multipart' }),
    mp('empty multipart body', Buffer.alloc(0), { status: 400, code: 'malformed_multipart' }),
    mp('multipart part header without a colon', Buffer.concat([Buffer.from(`--${BOUNDARY}\r\nnot a header\r\n\r\nx\r\n`), END]), { status: 400, code: 'malformed_multipart' }),
    mp('multipart without a boundary parameter', complete, { status: 400, code: 'malformed_multipart' }, { 'content-type': 'multipart/form-data' }),
    mp('multipart with the wrong boundary', complete, { status: 400, code: 'malformed_multipart' }, { 'content-type': 'multipart/form-data; boundary=not-the-one' }),
    mp('multipart file under the wrong field name', Buffer.concat([part(wrongField, FAKE_PNG, 'a.png'), END]), { status: 400, code: 'limit_unexpected_file', param: wrongField }),
    mp('multipart part without a field name', Buffer.concat([part(null, FAKE_PNG, 'a.png'), END]), { status: 400, code: 'missing_field_name' }),
    // One file per request: multer's file count for single-file routes, the route's own check for images (which take image[] lists).
    mp('multipart with two files', Buffer.concat([...fields, part(field, FAKE_PNG, 'a.png'), part(field, FAKE_PNG, 'b.png'), END]), { status: 400, code: field === 'file' ? 'limit_file_count' : 'unsupported_parameter' }),
    mp('multipart file over the upload limit', Buffer.concat([part(field, Buffer.alloc(MAX_UPLOAD + 1024, 1), 'big.png'), END]), { status: 413, code: 'payload_too_large' }),
    mp('multipart model of the wrong shape', Buffer.concat([part('model[a]', 'x'), ...fields, part(field, FAKE_PNG, 'a.png'), END]), { status: 400, param: 'model' }),
  ];
}

const CASES: Case[] = ROUTES.flatMap((route) => [...jsonCases(route), ...(route.multipart ? multipartCases(route) : [])]);

let server: TestServer;

beforeAll(async () => {
  server = await startTestServer({ server: { maxBodyBytes: MAX_BODY, maxUploadBytes: MAX_UPLOAD } });
});

afterAll(async () => {
  await server?.stop();
});

function expectNoStack(text: string): void {
  expect(text).not.toMatch(/\n\s+at |\bat .*\.(ts|js|cjs|mjs):\d+|node_modules/);
}

describe('malformed requests', () => {
  it.each(CASES.map((c) => [`POST ${c.route.path}: ${c.name}`, c] as const))('%s', async (_name, c) => {
    const res = await fetch(`${server.url}${c.route.path}`, { method: 'POST', headers: c.headers, body: new Uint8Array(c.body) });
    const text = await res.text();
    if (c.status !== undefined) expect(res.status, text).toBe(c.status);
    expect(res.status, text).toBeGreaterThanOrEqual(400);
    expect(res.status, text).toBeLessThan(500);
    expect(res.headers.get('content-type')).toMatch(/^application\/json/);
    expectNoStack(text);
    const body = JSON.parse(text) as Record<string, unknown>;
    if (c.route.shape === 'anthropic') {
      expect(Object.keys(body).sort()).toEqual(['error', 'type']);
      expect(body.type).toBe('error');
      const error = body.error as Record<string, unknown>;
      expect(Object.keys(error).sort()).toEqual(['message', 'type']);
      expect(error.type).toBe(res.status === 413 ? 'request_too_large' : res.status === 404 ? 'not_found_error' : 'invalid_request_error');
      expect(error.message).toEqual(expect.any(String));
    } else {
      expect(Object.keys(body)).toEqual(['error']);
      const error = body.error as Record<string, unknown>;
      expect(Object.keys(error).sort()).toEqual(['code', 'message', 'param', 'type']);
      expect(error).toMatchObject({ message: expect.any(String), type: res.status === 404 ? 'not_found_error' : 'invalid_request_error' });
      expect(error.param === null || typeof error.param === 'string').toBe(true);
      expect(error.code === null || typeof error.code === 'string').toBe(true);
      if (c.code) expect(error.code, text).toBe(c.code);
      // A wrong element is named by its path under the field (`input.0`).
      if (c.param) expect(String(error.param), text).toMatch(new RegExp(`^${c.param}(\\.|$)`));
    }
  });

  it('survives a client that disconnects mid-upload', async () => {
    for (const route of ROUTES) {
      const headers = route.multipart ? MULTIPART_TYPE : JSON_TYPE;
      await new Promise<void>((resolve, reject) => {
        const socket = net.connect(server.port, '127.0.0.1', () => {
          const head = [`POST ${route.path} HTTP/1.1`, 'Host: 127.0.0.1', `Content-Type: ${Object.values(headers)[0]}`, 'Content-Length: 100000', '', ''].join('\r\n');
          socket.write(head + (route.multipart ? part(route.fileField ?? 'file', FAKE_PNG, 'a.png').toString('latin1') : '{"model": "x", "pad": "'));
          // Give the server time to start reading before the connection drops.
          setTimeout(() => {
            socket.destroy();
            resolve();
          }, 50);
        });
        socket.on('error', reject);
      });
    }
  });

  it('keeps serving after the whole corpus, and logged no server error', async () => {
    const health = await fetch(`${server.url}/health`);
    expect(health.status).toBe(200);
    expect(await health.json()).toEqual({ status: 'ok' });
    const models = await fetch(`${server.url}/v1/models`);
    expect(models.status).toBe(200);
    expect(await models.json()).toMatchObject({ object: 'list', data: expect.any(Array) });
    // Give the disconnect cases' handlers a moment to finish before reading the log.
    await new Promise((r) => setTimeout(r, 100));
    expect(server.logs.filter((line) => line.startsWith('error '))).toEqual([]);
  });
});

describe('toLserveError keeps real faults 500s', () => {
  it.each([
    ['a stack overflow from engine code', new RangeError('Maximum call stack size exceeded')],
    ["a busboy message inside a longer one", new Error('Unexpected end of form while reading the cache')],
    ["a busboy message on another error class", new TypeError('Unexpected end of form')],
    ["disk storage's own stream dying", new multer.MulterError('STREAM_DESTROYED' as multer.ErrorCode)],
  ])('%s', (_name, error) => {
    expect(toLserveError(error).status).toBe(500);
  });

  it.each(['Unexpected end of form', 'Unexpected end of file', 'Malformed part header', 'Multipart: Boundary not found'])('busboy\'s "%s" is a 400', (message) => {
    expect(toLserveError(new Error(message))).toMatchObject({ status: 400, code: 'malformed_multipart' });
  });
});
