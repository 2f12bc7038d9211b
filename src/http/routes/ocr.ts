import { Router, type Request } from 'express';
import multer from 'multer';
import { ocrRequestSchema, type OcrResponse } from '../../api/ocr.js';
import { parseRequest } from '../../api/validate.js';
import { InvalidRequestError } from '../../core/errors.js';
import { ocr } from '../../core/tasks/ocr.js';
import { requestSignal, type ServerContext } from '../context.js';
import { decodeBase64Payload, readRemoteInput } from '../remote-input.js';

/** POST /v1/ocr: JSON `{model, image_base64 | image_url}` or multipart `file` (+ `model`). */
export function ocrRouter(ctx: ServerContext): Router {
  const router = Router();
  const upload = multer({ storage: multer.memoryStorage(), limits: { fileSize: ctx.options.maxUploadBytes, files: 1 } });

  router.post('/v1/ocr', upload.single('file'), async (req, res) => {
    const signal = requestSignal(req, res, ctx.shutdown);
    const body = parseRequest(ocrRequestSchema, req.body ?? {});
    const { image, param } = await imageFrom(req, body, ctx, signal);
    const result: OcrResponse = await ocr(ctx.engine, { model: body.model, image, param, keepAliveMs: body.keep_alive }, signal);
    res.json(result);
  });

  return router;
}

async function imageFrom(
  req: Request,
  body: { image_base64?: string; image_url?: string },
  ctx: ServerContext,
  signal: AbortSignal,
): Promise<{ image: Buffer; param: string }> {
  const file = req.file;
  const sources = [file, body.image_base64, body.image_url].filter((s) => s !== undefined).length;
  if (sources === 0) throw new InvalidRequestError("An image is required: 'image_base64', 'image_url', or a multipart 'file'.", { param: 'image_base64', code: 'missing_required_parameter' });
  if (sources > 1) throw new InvalidRequestError("Give exactly one of 'image_base64', 'image_url' and 'file'.", { param: 'image_base64', code: 'invalid_value' });
  if (file) return { image: file.buffer, param: 'file' };
  if (body.image_base64 !== undefined) return { image: decodeBase64Payload(body.image_base64, 'image_base64', 'image/'), param: 'image_base64' };
  return { image: await readRemoteInput(body.image_url!, ctx.inputs, 'image_url', signal), param: 'image_url' };
}
