import { InvalidRequestError } from '../errors.js';
import type { ItemPage, ItemPageQuery, ResponseStoreOptions, StoredResponse } from './store.js';

/**
 * What both backends' response stores share: checking their options, the
 * size bound and serialisation of a put, the page limit and its 400s, and the
 * retention cut-off. Each backend only says how rows are written and read.
 */

export const ITEM_PAGE_MAX = 100;

/** Throws on options no store can honour (a programming error, not a request's). */
export function checkResponseStoreOptions(options: ResponseStoreOptions): void {
  for (const key of ['ttlSeconds', 'maxResponses', 'maxBytesPerResponse'] as const) {
    if (!(options[key] > 0)) throw new RangeError(`ResponseStore: ${key} must be positive, got ${options[key]}`);
  }
  if (!Number.isInteger(options.maxResponses) && options.maxResponses !== Infinity) {
    throw new RangeError(`ResponseStore: maxResponses must be an integer or Infinity, got ${options.maxResponses}`);
  }
}

/** A response as rows store it: JSON text, and each item's id beside its JSON. */
export interface EncodedResponse {
  response: string;
  input: Array<readonly [id: string, json: string]>;
  output: Array<readonly [id: string | null, json: string]>;
}

/** `entry` as JSON text; larger than `maxBytes` → 400 on `store`, before anything is written. */
export function encodeResponse(entry: StoredResponse, maxBytes: number): EncodedResponse {
  const response = JSON.stringify(entry.response);
  const input = entry.input.map((item) => [inputId(item, entry.id), JSON.stringify(item)] as const);
  const output = entry.output.map((item) => [itemId(item), JSON.stringify(item)] as const);
  let bytes = Buffer.byteLength(response);
  for (const [, json] of [...input, ...output]) bytes += Buffer.byteLength(json);
  if (bytes > maxBytes) {
    throw new InvalidRequestError(
      `This response takes ${bytes} bytes to store, more than this server's limit of ${maxBytes} bytes per stored response: send \`store: false\` to not store it.`,
      { param: 'store' },
    );
  }
  return { response, input, output };
}

/** A page `limit` outside 1..ITEM_PAGE_MAX → 400. */
export function checkPageLimit({ limit }: ItemPageQuery): void {
  if (!Number.isInteger(limit) || limit < 1 || limit > ITEM_PAGE_MAX) {
    throw new InvalidRequestError(`limit must be an integer from 1 to ${ITEM_PAGE_MAX}, got ${limit}.`, { param: 'limit' });
  }
}

export function unknownAfter(id: string, after: string): InvalidRequestError {
  return new InvalidRequestError(`No input item with id '${after}' in response '${id}'.`, { param: 'after' });
}

/** A page from rows read with one row more than `limit` (that row says whether another page follows). */
export function itemPage(rows: ReadonlyArray<{ item_id: string | null; json: string }>, limit: number): ItemPage {
  const shown = rows.slice(0, limit);
  return {
    data: shown.map((row) => JSON.parse(row.json) as unknown),
    firstId: shown[0]?.item_id ?? null,
    lastId: shown.at(-1)?.item_id ?? null,
    hasMore: rows.length > limit,
  };
}

/**
 * Responses stored at or before this instant (ms) have expired. With no TTL,
 * the smallest safe integer rather than -Infinity, which PostgreSQL's bigint
 * cannot take.
 */
export function expiredAt(options: ResponseStoreOptions, now: number): number {
  return options.ttlSeconds === Infinity ? Number.MIN_SAFE_INTEGER : now - options.ttlSeconds * 1000;
}

function itemId(item: unknown): string | null {
  const id = (item as { id?: unknown } | null)?.id;
  return typeof id === 'string' ? id : null;
}

/** An input item's id: `inputItems` pages by it, so every input item must have one. */
function inputId(item: unknown, responseId: string): string {
  const id = itemId(item);
  if (id === null) throw new TypeError(`ResponseStore.put: an input item of ${responseId} has no string id`);
  return id;
}
