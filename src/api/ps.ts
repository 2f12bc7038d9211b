/**
 * Wire shape of GET /v1/ps: the models the server holds in memory now (what
 * `lserve ps` shows). Times are ISO 8601 strings.
 */
export interface RunningModel {
  id: string;
  kind: string;
  /** Memory the model holds, in bytes (the runtime's estimate). */
  memory_bytes: number;
  /** Requests being served by the model now. */
  active_requests: number;
  /** Requests waiting for it: for a free chat sequence, or their turn in its job queue. */
  queued: number;
  loaded_at: string;
  /** When it will be unloaded if no request comes; null while it is in use, or when it is kept loaded for good (keep-alive -1). */
  expires_at: string | null;
}

export interface RunningModelList {
  models: RunningModel[];
}
