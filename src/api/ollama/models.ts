import { z } from 'zod';
import { InvalidRequestError } from '../../core/errors.js';

/**
 * Ollama's model-management API (`/api/tags`, `/api/show`, `/api/ps`,
 * `/api/pull`, `/api/delete`, `/api/copy`, `/api/version`): request schemas
 * and wire shapes, after Ollama's API reference (docs/api.md and
 * api/types.go, read 2026-11-29, Ollama 0.32). Every documented request
 * field is accepted, the deprecated ones too (`name` for `model`;
 * `insecure`, `username`, `password` on a pull, which Ollama ignores as
 * well); an unknown field is ignored, as Ollama ignores it (its clients add
 * fields release by release).
 */

/** Longest model name accepted: Ollama's own names (`host/namespace/model:tag`) stay far below. */
export const MAX_OLLAMA_NAME_CHARS = 256;

/** A model name as Ollama's clients send it, bounded. */
export const ollamaModelName = z.string().min(1).max(MAX_OLLAMA_NAME_CHARS);
const name = ollamaModelName;

/** `model`, or the deprecated `name`: one of them names the model. */
const named = { model: name.optional(), name: name.optional() };

export const showRequestSchema = z.object({
  ...named,
  verbose: z.boolean().optional(),
  /** Ollama shows the model as if this system prompt were set; lserve keeps no per-model prompt, so it changes nothing here. */
  system: z.string().max(100_000).optional(),
  /** Deprecated in Ollama; accepted and unused. */
  template: z.string().max(100_000).optional(),
  /** Ollama shows the model as if these options were set; accepted and unused. */
  options: z.record(z.string().max(64), z.unknown()).optional(),
});

export const pullRequestSchema = z.object({
  ...named,
  stream: z.boolean().optional(),
  /** Deprecated and ignored by Ollama too. */
  insecure: z.boolean().optional(),
  username: z.string().max(1000).optional(),
  password: z.string().max(1000).optional(),
});

export const deleteRequestSchema = z.object(named);

export const copyRequestSchema = z.object({ source: name, destination: name });

/** Push is refused (501) whatever it carries; its fields are checked all the same. */
export const pushRequestSchema = pullRequestSchema;

/** The model a request names (`model`, else `name`); a 400 when it names none. */
export function requestedModel(body: { model?: string; name?: string }): string {
  const model = body.model ?? body.name;
  if (model === undefined) throw new InvalidRequestError("Invalid 'model': the request names no model (send 'model').", { param: 'model', code: 'missing_required_parameter' });
  return model;
}

/** ModelDetails. */
export interface OllamaModelDetails {
  parent_model: string;
  /** `gguf` for llama.cpp models, `onnx` for every other backend's files. */
  format: string;
  family: string;
  families: string[] | null;
  parameter_size: string;
  quantization_level: string;
}

/** One model of GET /api/tags. */
export interface OllamaListModel {
  name: string;
  model: string;
  modified_at: string;
  size: number;
  digest: string;
  details: OllamaModelDetails;
  capabilities?: string[];
}

export interface OllamaListResponse {
  models: OllamaListModel[];
}

/** POST /api/show. */
export interface OllamaShowResponse {
  license?: string;
  modelfile: string;
  parameters: string;
  template: string;
  details: OllamaModelDetails;
  model_info: Record<string, unknown>;
  projector_info?: Record<string, unknown>;
  capabilities: string[];
  modified_at: string;
}

/** One model of GET /api/ps. */
export interface OllamaProcessModel {
  name: string;
  model: string;
  size: number;
  digest: string;
  details: OllamaModelDetails;
  expires_at: string;
  size_vram: number;
  context_length?: number;
}

export interface OllamaProcessResponse {
  models: OllamaProcessModel[];
}

/** A line of POST /api/pull's stream (ProgressResponse). */
export interface OllamaProgress {
  status: string;
  digest?: string;
  total?: number;
  completed?: number;
}

/**
 * The version GET /api/version answers. Ollama's clients read it to decide
 * what the server can do, and some refuse one below their minimum (VS Code's
 * Copilot asks for 0.6.4 or later, Continue's Granite setup 0.6.5; others
 * compare with 0.1.x–0.5.x), so lserve's own 0.x version would turn them
 * away. lserve answers the Ollama release whose API reference these routes
 * follow, and its own version beside it (`lserve`), which clients ignore.
 */
export const OLLAMA_API_VERSION = '0.32.0';
