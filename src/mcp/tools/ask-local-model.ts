import type { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { z } from 'zod';
import { MAX_OUTPUT_TOKENS } from '../../api/chat.js';
import { MAX_PROMPT_CHARS } from '../../api/completions.js';
import { chat, collectChat, type ChatMessage } from '../../core/tasks/chat.js';
import type { McpContext } from '../context.js';
import { progressReporter, runTool, structured } from '../results.js';
import { modelField, modelFor } from './model.js';

const text = (what: string) => z.string().max(MAX_PROMPT_CHARS, `must be at most ${MAX_PROMPT_CHARS} characters`).describe(what);

export function registerAskLocalModel(server: McpServer, ctx: McpContext): void {
  server.registerTool(
    'ask_local_model',
    {
      title: 'Ask a local chat model',
      description:
        'Has a local chat model answer a prompt, on this machine: for a sub-task to delegate (summarise, classify, extract, draft) without sending the text anywhere. One turn; the answer comes back as text, with the model\'s reasoning apart when it thinks.',
      inputSchema: z.strictObject({
        prompt: text('The task or question, with everything the model needs to answer it.').pipe(z.string().min(1, 'must not be empty')),
        system: text('Instructions that frame the answer (a role, a format).').optional(),
        model: modelField('chat'),
        max_tokens: z.int().min(1).max(MAX_OUTPUT_TOKENS).optional().describe('Most tokens to generate (thinking included).'),
        temperature: z.number().min(0).max(2).optional().describe('Sampling temperature (0: greedy).'),
        think: z.boolean().optional().describe("Whether a thinking model reasons before answering; default: the model's own."),
      }),
      outputSchema: z.object({
        model: z.string(),
        answer: z.string(),
        reasoning: z.string().optional(),
        finish_reason: z.string(),
        usage: z.object({ prompt_tokens: z.number(), completion_tokens: z.number() }),
      }),
      annotations: { readOnlyHint: true, openWorldHint: false },
    },
    async (args, extra) =>
      runTool(ctx, extra, async (signal) => {
        const model = await modelFor(ctx.engine, 'chat', args.model);
        const messages: ChatMessage[] = [...(args.system ? [{ role: 'system' as const, content: args.system }] : []), { role: 'user', content: args.prompt }];
        const progress = progressReporter(extra);
        let tokens = 0;
        const counted = async function* () {
          for await (const delta of chat(ctx.engine, { model, messages, maxTokens: args.max_tokens, temperature: args.temperature, thinking: args.think }, signal)) {
            if (delta.type === 'content' || delta.type === 'reasoning') progress(++tokens, args.max_tokens, 'tokens generated');
            yield delta;
          }
        };
        const result = await collectChat(counted());
        return structured({
          model: result.model ?? model,
          answer: result.content,
          ...(result.reasoning ? { reasoning: result.reasoning } : {}),
          finish_reason: result.finishReason,
          usage: { prompt_tokens: result.usage.promptTokens, completion_tokens: result.usage.completionTokens },
        });
      }),
  );
}
