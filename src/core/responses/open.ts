import path from 'node:path';
import { ResponseStore, type ResponseStoreOptions } from './store.js';

/** OpenAI keeps stored responses 30 days; the count and size bounds keep the file from growing without end. */
export const RESPONSE_STORE_DEFAULTS: ResponseStoreOptions = { ttlSeconds: 30 * 24 * 3600, maxResponses: 10_000, maxBytesPerResponse: 10 * 1024 * 1024 };

/** The server's response store: `<home>/responses.db`. */
export function openResponseStore(home: string, options: Partial<ResponseStoreOptions> = {}): ResponseStore {
  return ResponseStore.open(path.join(home, 'responses.db'), { ...RESPONSE_STORE_DEFAULTS, ...options });
}
