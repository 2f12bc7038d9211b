import { Router, type Request } from 'express';
import multer from 'multer';
import { toTranscribeRequest, transcriptionFormFields, transcriptionRequestSchema, type TranscriptionRequestBody } from '../../api/transcription.js';
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
    const body = parseRequest(transcriptionRequestSchema, req.file ? transcriptionFormFields(req.body) : req.body);
    const { audio, param } = await audioFrom(req, body, ctx, signal);
    const format = body.response_format ?? 'json';
    const granularities = body.timestamp_granularities ?? [];
    const result = await transcribe(ctx.engine, toTranscribeRequest(body, audio, param), signal);
    // As OpenAI: verbose_json carries `words` when asked for, and its segments unless only words were asked for.
    const formatted = formatTranscription(result, format, { segments: granularities.includes('segment') || !granularities.includes('word') });
    res.type(formatted.contentType).send(formatted.body);
  });

  return router;
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
