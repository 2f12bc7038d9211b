import { Router, type Request } from 'express';
import multer from 'multer';
import { transcriptionRequestSchema, type TranscriptionRequestBody } from '../../api/transcription.js';
import { parseRequest } from '../../api/validate.js';
import { InvalidRequestError } from '../../core/errors.js';
import { transcribe } from '../../core/tasks/transcribe.js';
import { formatTranscription } from '../../core/tasks/transcribe/formats.js';
import { requestSignal, type ServerContext } from '../context.js';
import { decodeBase64Payload, readRemoteInput } from '../remote-input.js';

/** POST /v1/audio/transcriptions: multipart `file` (OpenAI's form) or JSON `audio` (path, URL or data URI). */
export function transcriptionRouter(ctx: ServerContext): Router {
  const router = Router();
  const upload = multer({ storage: multer.memoryStorage(), limits: { fileSize: ctx.options.maxUploadBytes, files: 1 } });

  router.post('/v1/audio/transcriptions', upload.single('file'), async (req, res) => {
    const signal = requestSignal(req, res, ctx.shutdown);
    const body = parseRequest(transcriptionRequestSchema, req.file ? multipartFields(req.body) : req.body);
    const { audio, param } = await audioFrom(req, body, ctx, signal);
    const format = body.response_format ?? 'json';
    const granularities = body.timestamp_granularities ?? [];
    const result = await transcribe(
      ctx.engine,
      {
        model: body.model,
        audio,
        param,
        language: body.language,
        prompt: body.prompt,
        temperature: body.temperature,
        // Asked of a model that cannot time words this is a 400 in any format; only verbose_json shows them.
        wordTimestamps: granularities.includes('word'),
        keepAliveMs: body.keep_alive,
      },
      signal,
    );
    // As OpenAI: verbose_json carries `words` when asked for, and its segments unless only words were asked for.
    const formatted = formatTranscription(result, format, { segments: granularities.includes('segment') || !granularities.includes('word') });
    res.type(formatted.contentType).send(formatted.body);
  });

  return router;
}

/** Multipart fields are text: numbers and lists become numbers and arrays (anything else is left for the schema to refuse). */
function multipartFields(body: unknown): unknown {
  if (typeof body !== 'object' || body === null) return body;
  const fields: Record<string, unknown> = { ...(body as Record<string, unknown>) };
  if (typeof fields.temperature === 'string' && fields.temperature.trim() !== '' && Number.isFinite(Number(fields.temperature))) fields.temperature = Number(fields.temperature);
  if (typeof fields.stream === 'string') fields.stream = fields.stream === 'true' ? true : fields.stream === 'false' ? false : fields.stream;
  // OpenAI's SDKs send `timestamp_granularities[]` once per value; multer gathers them into an array.
  const granularities = fields.timestamp_granularities ?? fields['timestamp_granularities[]'];
  delete fields['timestamp_granularities[]'];
  if (granularities !== undefined) fields.timestamp_granularities = Array.isArray(granularities) ? granularities : [granularities];
  return fields;
}

async function audioFrom(req: Request, body: TranscriptionRequestBody, ctx: ServerContext, signal: AbortSignal): Promise<{ audio: Buffer; param: string }> {
  if (req.file && body.audio !== undefined) throw new InvalidRequestError("Give either a multipart 'file' or 'audio', not both.", { param: 'audio', code: 'invalid_value' });
  if (req.file) return { audio: req.file.buffer, param: 'file' };
  if (body.audio === undefined) {
    throw new InvalidRequestError("Audio is required: a multipart 'file', or 'audio' (a path, a URL or a data:audio/…;base64 URI).", { param: 'file', code: 'missing_required_parameter' });
  }
  if (/^data:/i.test(body.audio)) return { audio: decodeBase64Payload(body.audio, 'audio', 'audio/'), param: 'audio' };
  return { audio: await readRemoteInput(body.audio, ctx.inputs, 'audio', signal), param: 'audio' };
}
