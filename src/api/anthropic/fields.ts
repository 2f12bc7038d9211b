/**
 * The request fields of Anthropic's Messages API and what lserve does with
 * each: the one list for POST /v1/messages (and count_tokens), read by the
 * schema (schema.ts) and checked against the reference by
 * test/unit/api-fields.test.ts, which fails when the reference gains a field
 * this list does not place.
 *
 * - `handled`: honoured as Anthropic documents it;
 * - `ignored`: accepted, and changes nothing on a local server (billing,
 *   regions, server-side retries, telemetry);
 * - `refused`: would change the answer in a way lserve cannot honour: a
 *   400 naming the field when it is set.
 *
 * Reference: Anthropic's API reference as of 2026-11-20, as the official
 * TypeScript SDK 1.12.0 types it (`MessageCreateParams`, GA and beta, for
 * API versions 2026-10-21 and 2023-06-01).
 */

export const ANTHROPIC_REFERENCE = '2026-11-20 (@anthropic-ai/sdk 1.12.0: API versions 2023-06-01 and 2026-10-21, GA and beta)';

export type FieldUse = 'handled' | 'ignored' | 'refused';

export const MESSAGE_FIELDS = {
  model: 'handled',
  messages: 'handled',
  max_tokens: 'handled',
  system: 'handled',
  stop_sequences: 'handled',
  stream: 'handled',
  // Removed in API version 2026-10-21, still sent by clients on 2023-06-01.
  temperature: 'handled',
  top_p: 'handled',
  top_k: 'handled',
  thinking: 'handled',
  tools: 'handled',
  tool_choice: 'handled',
  output_config: 'handled',
  output_format: 'handled',
  context_management: 'handled',
  // The prompt cache here is automatic: every conversation's cache is kept whatever the breakpoints say.
  cache_control: 'ignored',
  metadata: 'ignored',
  service_tier: 'ignored',
  speed: 'ignored',
  inference_geo: 'ignored',
  diagnostics: 'ignored',
  // Only server tools (code execution) use a container, and those are left out (hosted-tools.ts).
  container: 'ignored',
  // Hosted MCP servers: a server tool, left out under the hosted-tools rule.
  mcp_servers: 'handled',
  // Server-side retries on other models after a refusal, and their billing: no refusals here.
  fallbacks: 'ignored',
  fallback_credit_token: 'ignored',
  billing_policy: 'ignored',
  // Summarizing the conversation into a compaction block, and server-held threads: not done here.
  compaction: 'refused',
  thread: 'refused',
} as const satisfies Record<string, FieldUse>;

/** POST /v1/messages/count_tokens: the same request, less the generation settings. */
export const COUNT_TOKENS_FIELDS = {
  model: 'handled',
  messages: 'handled',
  system: 'handled',
  thinking: 'handled',
  tools: 'handled',
  tool_choice: 'handled',
  output_config: 'handled',
  output_format: 'handled',
  context_management: 'handled',
  mcp_servers: 'handled',
  cache_control: 'ignored',
  speed: 'ignored',
  billing_policy: 'ignored',
  // Anthropic accepts it on count_tokens and ignores it.
  compaction: 'ignored',
} as const satisfies Record<string, FieldUse>;

/** Parameters the SDKs take beside the body but send as headers (`anthropic-beta`, …): accepted as any header is. */
export const HEADER_PARAMETERS = ['betas', 'user_profile_id', 'workspace_id'] as const;

/** lserve's own fields on these routes, beyond the reference. */
export const EXTENSION_FIELDS = {
  /** As chat completions take them (the Responses route too): Anthropic's API has no token bias or repetition penalties. */
  logit_bias: 'handled',
  presence_penalty: 'handled',
  frequency_penalty: 'handled',
  /** How long the model stays loaded after this request (Ollama's keep_alive, on every model route). */
  keep_alive: 'handled',
} as const satisfies Record<string, FieldUse>;
