import type { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { z } from 'zod';
import { ocr } from '../../core/tasks/ocr.js';
import type { McpContext } from '../context.js';
import { readPayload } from '../inputs.js';
import { runTool, structured } from '../results.js';
import { modelField } from './model.js';
import { payloadFields, payloadOf } from './payload.js';

const point = z.tuple([z.number(), z.number()]);

export function registerReadTextInImage(server: McpServer, ctx: McpContext): void {
  server.registerTool(
    'read_text_in_image',
    {
      title: 'Read text in an image (OCR)',
      description: `Recognises the text in an image (a scan, a screenshot, a photo of a page) with a local OCR model: the page's text, and each line with its confidence (0-1) and box (four corners, clockwise from top-left, in pixels). The image as ${ctx.localFiles ? 'a local file path, ' : ''}base64 or an http(s) URL: png, jpeg, webp, tiff, gif or bmp.`,
      inputSchema: z.strictObject({ ...payloadFields('image', 'image', ctx), model: modelField('ocr') }),
      outputSchema: z.object({
        text: z.string(),
        lines: z.array(z.object({ text: z.string(), confidence: z.number(), box: z.tuple([point, point, point, point]) })),
        image_width: z.number(),
        image_height: z.number(),
      }),
      annotations: { readOnlyHint: true, openWorldHint: !ctx.localFiles },
    },
    async (args, extra) =>
      runTool(ctx, extra, async (signal) => {
        const model = typeof args.model === 'string' ? args.model : undefined;
        // Resolve the model before reading anything: a missing one says what to pull.
        if (model !== undefined) await ctx.engine.resolve(model, ['ocr']);
        const { bytes, param } = await readPayload('image', payloadOf('image', args), ctx, signal, 'image/');
        const result = await ocr(ctx.engine, { model, image: bytes, param }, signal);
        return structured({
          text: result.text,
          lines: result.lines.map((line) => ({ text: line.text, confidence: line.score, box: line.box })),
          image_width: result.image_width,
          image_height: result.image_height,
        });
      }),
  );
}
