import { InvalidRequestError } from '../errors.js';

/**
 * Stored responses (the Responses API's `store: true`): each response's
 * input and output items, so that `previous_response_id` can continue a
 * conversation and GET /v1/responses/{id} can read one back. This is the
 * in-memory implementation of the store's interface; entries expire after
 * `ttlSeconds`, and past `maxResponses` the oldest go first.
 */

export interface StoredResponse {
  id: string;
  model: string;
  /** Seconds since the epoch (the response's created_at). */
  createdAt: number;
  previousResponseId: string | null;
  input: unknown[];
  output: unknown[];
  response: Record<string, unknown>;
}

export interface ItemPage {
  data: unknown[];
  firstId: string | null;
  lastId: string | null;
  hasMore: boolean;
}

export interface ResponseStoreOptions {
  ttlSeconds: number;
  maxResponses: number;
  maxBytesPerResponse: number;
}

export class ResponseStore {
  /** In insertion order: the first entry is the oldest. */
  private readonly entries = new Map<string, StoredResponse>();

  private constructor(private readonly options: ResponseStoreOptions) {}

  static open(_file: string | ':memory:', options: ResponseStoreOptions): ResponseStore {
    return new ResponseStore(options);
  }

  put(entry: StoredResponse): void {
    const bytes = Buffer.byteLength(JSON.stringify(entry));
    if (bytes > this.options.maxBytesPerResponse) {
      throw new InvalidRequestError(`This response is ${bytes} bytes stored; the server stores at most ${this.options.maxBytesPerResponse}: send store: false.`, { param: 'store' });
    }
    this.entries.delete(entry.id);
    this.entries.set(entry.id, structuredClone(entry));
    for (const id of this.entries.keys()) {
      if (this.entries.size <= this.options.maxResponses) break;
      this.entries.delete(id);
    }
  }

  get(id: string): StoredResponse | undefined {
    const entry = this.entries.get(id);
    if (!entry) return undefined;
    if (entry.createdAt + this.options.ttlSeconds <= Date.now() / 1000) {
      this.entries.delete(id);
      return undefined;
    }
    return structuredClone(entry);
  }

  delete(id: string): boolean {
    return this.get(id) !== undefined && this.entries.delete(id);
  }

  inputItems(id: string, page: { after?: string; limit: number; order: 'asc' | 'desc' }): ItemPage | undefined {
    const entry = this.get(id);
    if (!entry) return undefined;
    const items = page.order === 'asc' ? entry.input : [...entry.input].reverse();
    // An `after` that names no item of this response: nothing follows it.
    const start = page.after === undefined ? 0 : items.findIndex((item) => (item as { id?: string }).id === page.after) + 1 || items.length;
    const data = items.slice(start, start + page.limit);
    const idOf = (item: unknown) => ((item as { id?: string } | undefined)?.id ?? null);
    return { data, firstId: idOf(data[0]), lastId: idOf(data.at(-1)), hasMore: start + data.length < items.length };
  }

  conversation(id: string): unknown[] | undefined {
    const chain: StoredResponse[] = [];
    for (let next: string | null = id; next !== null; ) {
      const entry = this.get(next);
      if (!entry) {
        if (chain.length === 0) return undefined;
        break; // An earlier turn expired or was deleted: the conversation starts where it is still known.
      }
      chain.unshift(entry);
      next = entry.previousResponseId;
    }
    return chain.flatMap((entry) => [...entry.input, ...entry.output]);
  }

  close(): void {
    this.entries.clear();
  }
}
