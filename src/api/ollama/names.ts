/**
 * Model names as Ollama's clients speak them: `name:tag`, with `:latest`
 * meant when no tag is given. lserve lists each installed model as
 * `<id>:latest` (a name that comes back as the same model), and reads a
 * name sent to it as, in order: the name itself (an id or alias, which may
 * hold a colon), the name without `:latest`, and `family:size` as the
 * catalog spells it, `family-size` (`qwen3:0.6b` → `qwen3-0.6b`); a
 * Hugging Face reference, as the model its pull installed.
 */

/** The Ollama name an installed model is listed under. */
export function ollamaName(id: string): string {
  return id.includes(':') ? id : `${id}:latest`;
}

/** The lserve names to try for an Ollama name, most literal first (none repeated). */
export function lserveCandidates(name: string): string[] {
  const bare = name.endsWith(':latest') ? name.slice(0, -':latest'.length) : name;
  // A Hugging Face reference pulled with its quantization named is installed under hubModelId.
  const hub = parseHubReference(name);
  const pulled = hub?.tag ? [hubModelId(hub.repo, hub.tag)] : [];
  return [...new Set([name, bare, bare.replace(':', '-'), ...pulled])].filter(Boolean);
}

/** Ollama's answer for a name that is nowhere (its clients show it as is). */
export function ollamaNotFound(name: string): string {
  return `model "${name}" not found, try pulling it first`;
}

/**
 * Ollama's Hugging Face references: `hf.co/{user}/{repo}[:{quantization}]`
 * (also `huggingface.co/…`), a GGUF repository and the quantization to take
 * from it.
 */
export function parseHubReference(name: string): { repo: string; tag?: string } | undefined {
  const match = /^(?:https?:\/\/)?(?:hf\.co|huggingface\.co)\/([A-Za-z0-9][\w.-]*\/[A-Za-z0-9][\w.-]*)(?::([\w.-]+))?$/i.exec(name);
  if (!match) return undefined;
  const tag = match[2] && match[2].toLowerCase() !== 'latest' ? match[2] : undefined;
  return { repo: match[1]!, ...(tag ? { tag } : {}) };
}

/** The store id a Hugging Face reference is installed under: the repository's name and the quantization taken, lower case. */
export function hubModelId(repo: string, quantization: string): string {
  return `${repo.split('/')[1]!}-${quantization}`.toLowerCase().replace(/[^a-z0-9._-]+/g, '-');
}
