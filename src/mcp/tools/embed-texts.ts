import type { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { z } from 'zod';
import { embeddingsRequestSchema, MAX_EMBEDDING_INPUT_CHARS, MAX_EMBEDDING_INPUTS } from '../../api/embeddings.js';
import { embed, type EmbeddingModel } from '../../core/tasks/embed.js';
import type { McpContext } from '../context.js';
import { runTool, structured } from '../results.js';
import { modelField, modelFor } from './model.js';

export function registerEmbedTexts(server: McpServer, ctx: McpContext): void {
  server.registerTool(
    'embed_texts',
    {
      title: 'Embed texts',
      description: 'Turns texts into embedding vectors (unit length) with a local embedding model, for semantic search and clustering. One vector per text, in order.',
      inputSchema: z.strictObject({
        texts: z
          .array(z.string().min(1).max(MAX_EMBEDDING_INPUT_CHARS))
          .min(1)
          .max(MAX_EMBEDDING_INPUTS)
          .describe(`The texts to embed (at most ${MAX_EMBEDDING_INPUTS}).`),
        model: modelField('embedding'),
        dimensions: embeddingsRequestSchema.shape.dimensions.describe('Shorten the vectors to this many dimensions (Matryoshka-trained models only).'),
        truncate: z.boolean().optional().describe("Cut texts longer than the model's context instead of failing."),
      }),
      outputSchema: z.object({
        model: z.string(),
        dimensions: z.number(),
        embeddings: z.array(z.array(z.number())),
        usage: z.object({ prompt_tokens: z.number() }),
      }),
      annotations: { readOnlyHint: true, openWorldHint: false },
    },
    async (args, extra) =>
      runTool(ctx, extra, async (signal) => {
        const name = await modelFor(ctx.engine, 'embedding', args.model);
        return ctx.engine.withModel<EmbeddingModel, ReturnType<typeof structured>>(name, ['embedding'], async (model, installed) => {
          const result = await embed(model, installed, { inputs: args.texts, dimensions: args.dimensions, truncate: args.truncate ?? false }, signal);
          return structured({
            model: installed.id,
            dimensions: result.vectors[0]?.length ?? 0,
            embeddings: result.vectors.map((v) => Array.from(v)),
            usage: { prompt_tokens: result.promptTokens },
          });
        });
      }),
  );
}
