import { ollamaCapabilities, ollamaDetails, type Capability } from '../api/ollama/model-info.js';
import { ollamaName } from '../api/ollama/names.js';
import type { OllamaListModel, OllamaModelDetails } from '../api/ollama/models.js';
import type { Engine } from '../core/engine.js';
import { ggufFacts, isGgufFile, type GgufFacts } from '../core/gguf-facts.js';
import { modelDigest, modelModifiedAt } from '../core/model-digest.js';
import type { InstalledModel } from '../core/store.js';
import { mediaInputs } from '../core/tasks/chat.js';

/**
 * What Ollama's listings (/api/tags, /api/show, /api/ps) say of an installed
 * model, read once per request: its GGUF header's facts (cached per file by
 * core/gguf-facts.ts), digest, time and capabilities.
 */
export interface DescribedModel {
  installed: InstalledModel;
  name: string;
  facts: GgufFacts | undefined;
  details: OllamaModelDetails;
  digest: string;
  modifiedAt: string;
  capabilities: Capability[];
}

/** The model's main file when it is a GGUF (role `model` of a llama-backend model). */
export function ggufFileOf(installed: InstalledModel): string | undefined {
  const file = installed.files.model;
  return installed.entry.backend === 'llama' && file !== undefined && isGgufFile(file) ? file : undefined;
}

export async function describeModel(installed: InstalledModel): Promise<DescribedModel> {
  const file = ggufFileOf(installed);
  const facts = file === undefined ? undefined : await ggufFacts(file);
  return {
    installed,
    name: ollamaName(installed.id),
    facts,
    details: ollamaDetails(installed, facts),
    digest: await modelDigest(installed),
    modifiedAt: (await modelModifiedAt(installed)).toISOString(),
    capabilities: ollamaCapabilities(installed, facts, mediaInputs(installed)),
  };
}

/** A row of GET /api/tags. */
export function listRow(model: DescribedModel): OllamaListModel {
  return {
    name: model.name,
    model: model.name,
    modified_at: model.modifiedAt,
    size: model.installed.sizeBytes,
    digest: model.digest,
    details: model.details,
    capabilities: model.capabilities,
  };
}

/** The context size lserve loads the model with when the operator or the model's registration set one (`--ctx-size`); undefined when the loader sizes it. */
export function configuredContextSize(engine: Engine, installed: InstalledModel): number | undefined {
  const sizes = engine.options.contextSizes;
  const registered = installed.entry.defaults.context_size;
  return sizes.models[installed.id] ?? sizes.all ?? (typeof registered === 'number' ? registered : undefined);
}
