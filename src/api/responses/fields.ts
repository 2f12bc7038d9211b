import type { FieldUse } from '../anthropic/fields.js';

/**
 * The request fields of OpenAI's Responses API (POST /v1/responses) and
 * what lserve does with each: the one list, read by the schema
 * (request.ts) and checked against the reference by
 * test/unit/api-fields.test.ts, which fails when the reference gains a
 * field this list does not place.
 *
 * - `handled`: honoured as the reference documents it;
 * - `ignored`: accepted, and changes nothing here (caching hints, billing
 *   tiers, identifiers, a budget for hosted tools lserve never runs);
 * - `refused`: would change the answer in a way lserve cannot honour: a
 *   400 naming the field when it is set.
 *
 * Reference: OpenAI's API reference as of 2026-08-21, as the official SDKs
 * type it (openai-node 6.49.0 `ResponseCreateParams`; openai-python 3.3.1
 * adds `max_tool_calls`), and the fields Codex sends beyond the SDKs
 * (`client_metadata`).
 */

export const RESPONSES_REFERENCE = '2026-08-21 (openai-node 6.49.0, openai-python 3.3.1, Codex client_metadata)';

export const RESPONSE_FIELDS = {
  model: 'handled',
  input: 'handled',
  instructions: 'handled',
  tools: 'handled',
  tool_choice: 'handled',
  parallel_tool_calls: 'handled',
  max_output_tokens: 'handled',
  temperature: 'handled',
  top_p: 'handled',
  text: 'handled',
  reasoning: 'handled',
  // reasoning.encrypted_content is honoured; log-probabilities are refused until the engine reports them.
  include: 'handled',
  store: 'handled',
  stream: 'handled',
  previous_response_id: 'handled',
  truncation: 'handled',
  metadata: 'handled',
  // Only false: a background response is a job the client polls, which is not kept here.
  background: 'handled',
  // With include message.output_text.logprobs: the alternatives given per token.
  top_logprobs: 'handled',
  stream_options: 'ignored',
  prompt_cache_key: 'ignored',
  prompt_cache_options: 'ignored',
  prompt_cache_retention: 'ignored',
  safety_identifier: 'ignored',
  service_tier: 'ignored',
  user: 'ignored',
  // A budget for calls to built-in tools: here the MCP calls the server runs (other hosted tools are left out).
  max_tool_calls: 'handled',
  // Codex's identifiers of its installation, session and turn.
  client_metadata: 'ignored',
  // Server-held conversations, stored prompt templates, moderation results and server-side compaction.
  conversation: 'refused',
  prompt: 'refused',
  moderation: 'refused',
  context_management: 'refused',
} as const satisfies Record<string, FieldUse>;

/** lserve's own fields on this route, beyond the reference (as chat completions take them). */
export const EXTENSION_FIELDS = {
  logit_bias: 'handled',
  presence_penalty: 'handled',
  frequency_penalty: 'handled',
  thinking_enabled: 'handled',
  thinking_tokens: 'handled',
  keep_alive: 'handled',
} as const satisfies Record<string, FieldUse>;
