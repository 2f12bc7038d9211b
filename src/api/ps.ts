/**
 * Wire shape of GET /v1/ps: the models the server holds in memory now (what
 * `lserve ps` shows). Times are ISO 8601 strings.
 */
export interface RunningModel {
  id: string;
  kind: string;
  /** Memory the model holds, in bytes (the runtime's estimate). */
  memory_bytes: number;
  /** The runner process that holds the model; null when it runs in the server's process (LSERVE_RUNNERS=off, sherpa-onnx models). */
  pid: number | null;
  /** That process's resident memory, in bytes, as the system counts it (Linux); null when unknown. */
  rss_bytes: number | null;
  /** The most that process has held resident since it started (a model's working set at its peak: an image model's during a decode), in bytes; null when unknown. */
  peak_rss_bytes: number | null;
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
