import type { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { z } from 'zod';
import { imageGenerationSchema } from '../../api/images.js';
import { generateImages } from '../../core/tasks/image.js';
import type { McpContext } from '../context.js';
import { progressReporter, runTool, structured } from '../results.js';
import { modelField, modelFor } from './model.js';

const MIME = { png: 'image/png', jpeg: 'image/jpeg', webp: 'image/webp' } as const;
const fields = imageGenerationSchema.shape;

export function registerGenerateImage(server: McpServer, ctx: McpContext): void {
  server.registerTool(
    'generate_image',
    {
      title: 'Generate an image',
      description:
        'Makes an image from a text prompt with a local image model (Stable Diffusion). The image comes back as an image content block, with its size and seed (the same seed and prompt give the same image). Reports progress step by step.',
      inputSchema: z.strictObject({
        prompt: z.string().min(1).pipe(fields.prompt).describe('What the image shows.'),
        negative_prompt: fields.negative_prompt.unwrap().unwrap().optional().describe('What to steer away from (used with guidance above 1).'),
        size: fields.size.unwrap().unwrap().optional().describe("WxH, each side a multiple of 64 in the model's range (default: the model's, 512x512)."),
        steps: fields.steps.unwrap().unwrap().optional().describe('Denoising steps (SD-Turbo: 1 to 4, default 1).'),
        seed: fields.seed.unwrap().unwrap().optional().describe('Seed; random when absent.'),
        format: fields.output_format.unwrap().unwrap().optional().describe('Image format (default png).'),
        model: modelField('image'),
      }),
      outputSchema: z.object({ model: z.string(), width: z.number(), height: z.number(), seed: z.number(), format: z.string(), revised_prompt: z.string().optional() }),
      annotations: { readOnlyHint: true, openWorldHint: false },
    },
    async (args, extra) =>
      runTool(ctx, extra, async (signal) => {
        const model = await modelFor(ctx.engine, 'image', args.model);
        const progress = progressReporter(extra);
        const result = await generateImages(
          ctx.engine,
          { model, prompt: args.prompt, negativePrompt: args.negative_prompt, size: args.size, steps: args.steps, seed: args.seed, n: 1, outputFormat: args.format },
          { signal, onProgress: ({ step, steps }) => progress(step, steps, `step ${step} of ${steps}`) },
        );
        const image = result.images[0]!;
        return structured(
          { model: result.model, width: image.width, height: image.height, seed: image.seed, format: image.format, ...(result.revisedPrompt === undefined ? {} : { revised_prompt: result.revisedPrompt }) },
          [{ type: 'image', data: image.data.toString('base64'), mimeType: MIME[image.format] }],
        );
      }),
  );
}
