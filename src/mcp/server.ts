import { createRequire } from 'node:module';
import { McpServer, ResourceTemplate } from '@modelcontextprotocol/sdk/server/mcp.js';
import { modelObject } from '../api/models.js';
import { NotFoundError } from '../core/errors.js';
import type { McpContext } from './context.js';
import { registerAskLocalModel } from './tools/ask-local-model.js';
import { registerEmbedTexts } from './tools/embed-texts.js';
import { registerGenerateImage } from './tools/generate-image.js';
import { registerListModels } from './tools/list-models.js';
import { registerReadTextInImage } from './tools/read-text-in-image.js';
import { registerRerankDocuments } from './tools/rerank-documents.js';
import { registerSpeakText } from './tools/speak-text.js';
import { registerTranscribeAudio } from './tools/transcribe-audio.js';

const { version } = createRequire(import.meta.url)('../../package.json') as { version: string };

/** Every tool, in the order clients list them. */
const TOOLS = [registerListModels, registerAskLocalModel, registerEmbedTexts, registerRerankDocuments, registerReadTextInImage, registerTranscribeAudio, registerSpeakText, registerGenerateImage];

/**
 * lserve as a Model Context Protocol server: the engine's tasks as tools
 * (OCR, transcription, speech, images, embeddings, rerank, a chat model to
 * delegate to, the model list) and the installed models as resources
 * (`lserve://models/<id>`, what GET /v1/models shows of each). Transport-free:
 * `lserve mcp` connects it to stdio, `lserve serve --mcp` to Streamable HTTP
 * at /mcp (http.ts).
 */
export function createMcpServer(ctx: McpContext): McpServer {
  const server = new McpServer(
    { name: 'lserve', title: 'lserve: local models', version },
    {
      capabilities: { tools: {}, resources: {} },
      instructions:
        'Local models on this machine: OCR (read_text_in_image), speech to text (transcribe_audio), text to speech (speak_text), image generation (generate_image), embeddings (embed_texts), reranking (rerank_documents), and a chat model to delegate a sub-task to (ask_local_model). Each tool uses the installed default model of its kind unless one is named; list_models shows what is installed. A missing model is answered with the `lserve pull` command that installs it.',
    },
  );
  for (const register of TOOLS) register(server, ctx);
  registerModelResources(server, ctx);
  return server;
}

function registerModelResources(server: McpServer, ctx: McpContext): void {
  const { engine } = ctx;
  const snapshot = async () => ({
    loaded: new Map(engine.manager.loaded().map((m) => [m.id, m])),
    defaults: new Set(Object.values(await engine.defaults()).map((pick) => pick.id)),
  });
  server.registerResource(
    'model',
    new ResourceTemplate('lserve://models/{id}', {
      list: async () => ({
        resources: (await engine.store.list()).map((m) => ({
          uri: `lserve://models/${encodeURIComponent(m.id)}`,
          name: m.id,
          title: `${m.id} (${m.entry.kind})`,
          ...(m.entry.description ? { description: m.entry.description } : {}),
          mimeType: 'application/json',
        })),
      }),
    }),
    { title: 'Installed model', description: 'An installed model as GET /v1/models shows it: id, kind, loaded, default, context length.', mimeType: 'application/json' },
    async (uri, variables) => {
      const id = decodeURIComponent(String(variables.id));
      const installed = await engine.store.resolve(id);
      if (!installed || installed.id !== id) throw new NotFoundError(`No installed model '${id}' (list_models shows the installed ones).`, { code: 'model_not_found' });
      const { loaded, defaults } = await snapshot();
      return { contents: [{ uri: uri.href, mimeType: 'application/json', text: JSON.stringify(modelObject(installed, loaded, defaults)) }] };
    },
  );
}
