import { statSync } from 'node:fs';
import { z } from 'zod';
import { inputModalities, type MediaInput } from '../core/catalog.js';
import type { ListingRow } from '../core/listing.js';
import type { LoadedInfo } from '../core/manager.js';
import type { InstalledModel } from '../core/store.js';

/** Wire shapes of GET /v1/models (the specification's model object and list). */
export interface ModelObject {
  id: string;
  object: 'model';
  created: number;
  owned_by: string;
  status: 'running';
  /** Extensions: what the model does and whether it is in memory now. */
  kind: string;
  loaded: boolean;
  /**
   * Extension, chat models only: what their messages may carry and what they
   * answer with, in the shape llama.cpp's server (router mode) and OpenRouter
   * give it, so clients that read one read the other.
   */
  architecture?: { input_modalities: ('text' | MediaInput)[]; output_modalities: ['text'] };
  /** Extension, text models while loaded: tokens one conversation (or input) may hold, as the load chose. */
  context_length?: number;
  /** Extension: the default of its kind, where requests that name no model of the kind go (core/model-choice.ts). */
  default?: true;
}

/** When a model was installed, in Unix seconds (its manifest's time, else its first file's). */
export function createdAt(model: InstalledModel): number {
  if (model.installedAt) return Math.floor(Date.parse(model.installedAt) / 1000);
  const first = Object.values(model.files)[0];
  try {
    return first ? Math.floor(statSync(first).mtimeMs / 1000) : 0;
  } catch {
    return 0;
  }
}

/**
 * An installed model as GET /v1/models shows it (and the MCP server's
 * `lserve://models/<id>` resources): `loaded` are the models in memory now,
 * by id; `defaults` the ids that are their kind's default.
 */
export function modelObject(model: InstalledModel, loaded: ReadonlyMap<string, LoadedInfo>, defaults: ReadonlySet<string> = new Set()): ModelObject {
  const input = inputModalities(model.entry);
  const contextLength = loaded.get(model.id)?.contextSize;
  return {
    id: model.id,
    object: 'model',
    created: createdAt(model),
    owned_by: model.entry.owned_by,
    status: 'running',
    kind: model.entry.kind,
    loaded: loaded.has(model.id),
    ...(input ? { architecture: { input_modalities: input, output_modalities: ['text'] } } : {}),
    ...(contextLength ? { context_length: contextLength } : {}),
    ...(defaults.has(model.id) ? { default: true as const } : {}),
  };
}

/**
 * Extension: a name that answers with a model without being its id: the
 * operator's aliases (`--alias`), and the names apps hard-code (`whisper-1`,
 * `tts-1`, …) standing for their kind's default; `gpt-*`, `claude-*` and
 * OpenAI's `o1`…`o4*` as patterns while they stand for the default chat model.
 */
export interface ModelAlias {
  alias: string;
  model: string;
  /** A family of names (`gpt-*`) rather than one name. */
  pattern?: true;
}

/**
 * GET /v1/models in Anthropic's shape (`ModelInfo`, a page of them), for
 * requests that carry `anthropic-version` (the Anthropic SDKs) and at
 * /v1/anthropic/v1/models: the chat models, the only ones its Messages API
 * serves. What Anthropic's fields cannot tell here (lifecycle dates,
 * capabilities) is null.
 */
export interface AnthropicModelInfo {
  type: 'model';
  id: string;
  display_name: string;
  /** RFC 3339. */
  created_at: string;
  /** The context as loaded; null until the model is. */
  max_input_tokens: number | null;
  max_tokens: number | null;
  lifecycle: 'active';
  line: null;
  deprecated_at: null;
  retires_at: null;
  capabilities: null;
}

export interface AnthropicModelPage {
  data: AnthropicModelInfo[];
  has_more: boolean;
  first_id: string | null;
  last_id: string | null;
}

export interface ModelList {
  object: 'list';
  data: ModelObject[];
  /** Extension: the names that stand for models, listed apart so that clients listing models see each model once. */
  aliases: ModelAlias[];
}

/**
 * GET /v1/catalog: every model the server knows, installed or not (what
 * `lserve list --all --json` shows), for clients that manage the store.
 */
export interface CatalogModel extends Omit<ListingRow, 'status'> {
  object: 'catalog.model';
  status: ListingRow['status'] | 'pulling';
  /** Loaded in memory now. */
  loaded: boolean;
}

export interface CatalogList {
  object: 'list';
  data: CatalogModel[];
}

/** POST /v1/models/pull. Only catalog models: your own files and URLs are registered with `lserve pull`. */
export const pullRequestSchema = z.object({
  model: z.string().min(1).max(200),
  /** false: answer one JSON object when the pull is over instead of a progress stream. */
  stream: z.boolean().optional(),
});

/**
 * The events of POST /v1/models/pull's SSE stream, one `data:` line each
 * (with `event:` naming its type). `done` or `error` comes last.
 */
export type PullStreamEvent =
  | { type: 'start'; model: string; files: Array<{ file: string; role: string; size_bytes: number | null }>; total_bytes: number | null }
  /** Another process is pulling the same model; this pull waits for it. */
  | { type: 'waiting'; model: string; pid: number }
  | { type: 'file_start'; model: string; file: string; role: string; total_bytes: number | null; resumed_from: number }
  | {
      type: 'progress';
      model: string;
      file: string;
      role: string;
      /** This file's bytes on disk (resumed ones included) and its size. */
      received_bytes: number;
      total_bytes: number | null;
      /** The whole model: bytes done over every file, and the total when every file's size is known. */
      completed_bytes: number;
      model_total_bytes: number | null;
    }
  | { type: 'retry'; model: string; file: string; role: string; attempt: number; message: string }
  | { type: 'file_done'; model: string; file: string; role: string; size_bytes: number; sha256: string; verified_with: 'catalog' | 'etag' | null; reused: boolean }
  /** Install-time preparation after the download (image models: fp16 → fp32). */
  | { type: 'prepare'; model: string; message: string }
  | { type: 'done'; model: string; kind: string; size_bytes: number; already_installed: boolean; downloaded_bytes: number }
  | { type: 'error'; model: string; error: { message: string; type: string; param: string | null; code: string | null } };

/** DELETE /v1/models/{id} (OpenAI's shape). */
export interface ModelDeleted {
  id: string;
  object: 'model';
  deleted: true;
}
