/**
 * The server's shared state: what must outlive one request and be seen by
 * every replica of `lserve serve` behind one load balancer — the stored
 * responses of the Responses API and the speech stream jobs. One async
 * interface, two backends: SQLite in the lserve home (the default, one
 * machine; sqlite/) and PostgreSQL (`--database-url`, several replicas;
 * postgres/). Both keep the same retention and expiry rules, on the same
 * clock (`now`, the replica's), so tests run one contract suite over both.
 */

export interface StoredResponse {
  id: string;
  model: string;
  /** The response's `created_at` (unix seconds), returned as given. */
  createdAt: number;
  previousResponseId: string | null;
  /** Input items; each has a string `id` (the route assigns them), which `inputItems` pages by. */
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

export interface ItemPageQuery {
  /** Start after the item of this id (in `order`). */
  after?: string;
  /** 1 to ITEM_PAGE_MAX. */
  limit: number;
  order: 'asc' | 'desc';
}

/** A speech stream job as stored: enough for any replica to prepare the speech again. */
export interface SpeechJobRecord {
  /** The random UUID of the job's stream_url. */
  token: string;
  /** The synthesis model's id. */
  model: string;
  /** The validated request, as JSON (reference audio inline). */
  request: unknown;
  /** When the job expires unclaimed (ms, on the store's clock). */
  expiresAt: number;
}

export interface ResponseStoreOptions {
  /** A response expires this long after it was stored; `Infinity` keeps it. */
  ttlSeconds: number;
  /** The most responses kept; the oldest beyond are deleted. `Infinity` for no bound. */
  maxResponses: number;
  /** The most bytes one response may take (its JSON and its items' JSON together). */
  maxBytesPerResponse: number;
  /** The clock, in ms (default `Date.now`). */
  now?: () => number;
  /** Where the store reports what an operator should know (a damaged file moved aside, an outage); default stderr. */
  log?: (message: string) => void;
  /**
   * Called inside the transaction of a put, between its rows (after the
   * response and its input items, before its output items). Only the crash
   * tests set it: a writer that stops here and is killed must leave nothing
   * of that response behind.
   */
  midPut?: () => void;
}

export interface StateStoreOptions extends ResponseStoreOptions {
  /** The most speech stream jobs waiting to be fetched, over every replica sharing the store; beyond → 503. */
  maxPendingSpeechJobs: number;
}

/** Stored responses (`store: true`), and the chains `previous_response_id` continues. */
export interface ResponseRepository {
  /** Stores `entry` (replacing one of the same id) in one transaction; too large → 400 on `store`. */
  put(entry: StoredResponse): Promise<void>;
  /** The response `id`, or undefined when unknown or expired. */
  get(id: string): Promise<StoredResponse | undefined>;
  /** Deletes the response `id` and its items; false when there was none (an expired one counts as none). */
  delete(id: string): Promise<boolean>;
  /**
   * One page of the input items of the response `id`, as OpenAI's
   * `input_items.list`; undefined when the response is unknown or expired;
   * a bad `limit` or an unknown `after` → 400.
   */
  inputItems(id: string, page: ItemPageQuery): Promise<ItemPage | undefined>;
  /**
   * The input and output items of each response of the chain ending at `id`,
   * oldest first; undefined when `id` is unknown or expired. An older link
   * that is gone (deleted, expired, evicted) ends the chain there.
   */
  conversation(id: string): Promise<unknown[] | undefined>;
}

/** Speech stream jobs: created by the replica that took the POST, claimed by whichever takes the GET. */
export interface SpeechJobRepository {
  /** Stores a job; when `maxPendingSpeechJobs` unexpired jobs wait already → 503 (OverloadedError). */
  create(job: SpeechJobRecord): Promise<void>;
  /** Takes the job `token` out: it is returned once, to one caller over all replicas, and never after it expired. */
  claim(token: string): Promise<SpeechJobRecord | undefined>;
  /** Which of `tokens` are still waiting (neither claimed nor expired). */
  unclaimed(tokens: readonly string[]): Promise<Set<string>>;
  /** Deletes expired jobs; returns how many. */
  sweep(): Promise<number>;
}

export interface StateStore {
  /** 'sqlite' or 'postgres'. */
  readonly backend: 'sqlite' | 'postgres';
  readonly responses: ResponseRepository;
  readonly speechJobs: SpeechJobRepository;
  /** Resolves when the store answers a query; for readiness checks. */
  ping(): Promise<void>;
  close(): Promise<void>;
}
