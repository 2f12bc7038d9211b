import type { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { z } from 'zod';
import { modelObject } from '../../api/models.js';
import { MODEL_KINDS } from '../../core/catalog.js';
import type { McpContext } from '../context.js';
import { runTool, structured } from '../results.js';

/** Installed models as GET /v1/models shows them (id, kind, loaded, default, …): the same mapper. */
export const modelEntrySchema = z.looseObject({
  id: z.string(),
  kind: z.string(),
  loaded: z.boolean(),
  default: z.literal(true).optional(),
  context_length: z.number().optional(),
});

export function registerListModels(server: McpServer, ctx: McpContext): void {
  server.registerTool(
    'list_models',
    {
      title: 'List local models',
      description:
        "The models installed in this lserve: id, kind (chat, embedding, rerank, ocr, asr, asr-stream, tts, image), whether it is loaded, and which is its kind's default (what a tool uses when no model is named).",
      inputSchema: z.strictObject({ kind: z.enum(MODEL_KINDS).optional().describe('Only models of this kind.') }),
      outputSchema: z.object({ models: z.array(modelEntrySchema) }),
      annotations: { readOnlyHint: true, openWorldHint: false },
    },
    async ({ kind }, extra) =>
      runTool(ctx, extra, async () => {
        const { engine } = ctx;
        const loaded = new Map(engine.manager.loaded().map((m) => [m.id, m]));
        const defaults = new Set(Object.values(await engine.defaults()).map((pick) => pick.id));
        const models = (await engine.store.list()).filter((m) => kind === undefined || m.entry.kind === kind).map((m) => modelObject(m, loaded, defaults));
        return structured({ models });
      }),
  );
}
