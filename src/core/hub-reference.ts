import { hubEndpoint } from './download.js';
import { ModelNotFoundError, StoreError } from './errors.js';
import { envHubToken, type HubToken } from './hub-auth.js';

/** A GGUF of a Hugging Face repository, chosen for a pull by reference. */
export interface HubChoice {
  /** The model file's download URL, and its projector's where the repository has one. */
  url: string;
  mmproj?: string;
  /** The quantization taken, as the file names it (`Q4_K_M`). */
  quantization: string;
}

/** Quantization Ollama takes from a repository when a reference names none. */
const DEFAULT_QUANTIZATION = 'Q4_K_M';

/**
 * Chooses the GGUF a reference `hf.co/{repo}:{tag}` means, as Ollama does:
 * the file whose name carries the quantization `tag` (any case), or
 * without one Q4_K_M where the repository has it, else its only GGUF;
 * the repository's projector (`mmproj…gguf`) with it. The listing comes
 * from the hub's API at HF_ENDPOINT, with the token for gated repositories.
 */
export async function chooseHubFile(repo: string, tag: string | undefined, options: { hfToken?: HubToken; signal?: AbortSignal } = {}): Promise<HubChoice> {
  const endpoint = hubEndpoint();
  const token = options.hfToken ?? envHubToken();
  let res: Response;
  try {
    res = await fetch(`${endpoint}/api/models/${repo}/tree/main`, { headers: token ? { authorization: `Bearer ${token.token}` } : {}, signal: options.signal });
  } catch (error) {
    throw new StoreError(`Could not reach ${endpoint} to list ${repo}: ${(error as Error).message}.`, 'network_unreachable', error);
  }
  if (res.status === 404 || res.status === 401) throw new ModelNotFoundError(`model "hf.co/${repo}" not found on ${endpoint} (or it is gated: set HF_TOKEN).`);
  if (!res.ok) throw new StoreError(`${endpoint} answered ${res.status} listing ${repo}.`, 'hub_error');
  const listing = (await res.json().catch(() => [])) as Array<{ type?: string; path?: string }>;
  const ggufs = listing.filter((f) => f.type === 'file' && typeof f.path === 'string' && /\.gguf$/i.test(f.path)).map((f) => f.path!);
  const models = ggufs.filter((file) => !/mmproj/i.test(file) && !/-\d{5}-of-\d{5}\.gguf$/i.test(file));
  const named = (quant: string) => models.find((file) => file.toLowerCase().includes(quant.toLowerCase()));
  const file = tag ? named(tag) : (named(DEFAULT_QUANTIZATION) ?? (models.length === 1 ? models[0] : undefined));
  if (!file) {
    const offered = models.map((m) => quantizationOf(m)).join(', ') || 'none';
    throw new ModelNotFoundError(`hf.co/${repo} has no single-file GGUF${tag ? ` of quantization ${tag}` : ` to choose without a quantization`}; it offers: ${offered}. Name one: hf.co/${repo}:<quantization>.`);
  }
  const projector = ggufs.find((f) => /mmproj/i.test(f));
  const url = (path: string) => `${endpoint}/${repo}/resolve/main/${path.split('/').map(encodeURIComponent).join('/')}`;
  return { url: url(file), ...(projector ? { mmproj: url(projector) } : {}), quantization: tag ?? quantizationOf(file) };
}

/** The quantization a GGUF's file name carries (`model-Q4_K_M.gguf` → `Q4_K_M`), else the name itself. */
function quantizationOf(file: string): string {
  const base = file.split('/').pop()!.replace(/\.gguf$/i, '');
  return /(?:^|[-_.])((?:I?Q\d[\w]*|F16|BF16|F32))$/i.exec(base)?.[1] ?? base;
}
