import type { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { z } from 'zod';
import { MAX_RERANK_DOCUMENT_CHARS, MAX_RERANK_DOCUMENTS, rerankRequestSchema } from '../../api/rerank.js';
import { rerank, type RankingModel } from '../../core/tasks/rerank.js';
import type { McpContext } from '../context.js';
import { runTool, structured } from '../results.js';
import { modelField, modelFor } from './model.js';

export function registerRerankDocuments(server: McpServer, ctx: McpContext): void {
  server.registerTool(
    'rerank_documents',
    {
      title: 'Rerank documents',
      description: 'Orders documents by how well they answer a query, with a local reranker (cross-encoder) model. Results are sorted best first, each with its index in the input and its relevance score.',
      inputSchema: z.strictObject({
        query: rerankRequestSchema.shape.query.describe('What the documents should answer.'),
        documents: z
          .array(z.string().min(1).max(MAX_RERANK_DOCUMENT_CHARS))
          .min(1)
          .max(MAX_RERANK_DOCUMENTS)
          .describe(`The documents to rank (at most ${MAX_RERANK_DOCUMENTS}).`),
        top_n: rerankRequestSchema.shape.top_n.describe('Return only the best N.'),
        model: modelField('rerank'),
        truncate: z.boolean().optional().describe("Cut documents that do not fit the model's context next to the query instead of failing."),
      }),
      outputSchema: z.object({
        model: z.string(),
        results: z.array(z.object({ index: z.number(), relevance_score: z.number(), document: z.string() })),
        usage: z.object({ prompt_tokens: z.number() }),
      }),
      annotations: { readOnlyHint: true, openWorldHint: false },
    },
    async (args, extra) =>
      runTool(ctx, extra, async (signal) => {
        const name = await modelFor(ctx.engine, 'rerank', args.model);
        return ctx.engine.withModel<RankingModel, ReturnType<typeof structured>>(name, ['rerank'], async (model, installed) => {
          const result = await rerank(model, installed, { query: args.query, documents: args.documents, topN: args.top_n, truncate: args.truncate ?? false }, signal);
          return structured({
            model: installed.id,
            results: result.results.map(({ index, score }) => ({ index, relevance_score: score, document: args.documents[index]! })),
            usage: { prompt_tokens: result.promptTokens },
          });
        });
      }),
  );
}
