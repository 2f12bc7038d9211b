/**
 * Model names as Ollama's clients speak them: `name:tag`, with `:latest`
 * meant when no tag is given. lserve lists each installed model as
 * `<id>:latest` (a name that comes back as the same model), and reads a
 * name sent to it as, in order: the name itself (an id or alias, which may
 * hold a colon), the name without `:latest`, and `family:size` as the
 * catalog spells it, `family-size` (`qwen3:0.6b` → `qwen3-0.6b`).
 */

/** The Ollama name an installed model is listed under. */
export function ollamaName(id: string): string {
  return id.includes(':') ? id : `${id}:latest`;
}

/** The lserve names to try for an Ollama name, most literal first (none repeated). */
export function lserveCandidates(name: string): string[] {
  const bare = name.endsWith(':latest') ? name.slice(0, -':latest'.length) : name;
  return [...new Set([name, bare, bare.replace(':', '-')])].filter(Boolean);
}

/** Ollama's answer for a name that is nowhere (its clients show it as is). */
export function ollamaNotFound(name: string): string {
  return `model "${name}" not found, try pulling it first`;
}
