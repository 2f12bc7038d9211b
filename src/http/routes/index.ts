import type { Router } from 'express';
import type { ServerContext } from '../context.js';
import type { WebSocketRoute } from '../websocket.js';
import { embeddingsRouter } from './embeddings.js';
import { modelsRouter } from './models.js';
import { ocrRouter } from './ocr.js';
import { imagesRouter } from './images.js';
import { chatRouter } from './chat.js';
import { completionsRouter } from './completions.js';
import { anthropicRouter } from './anthropic.js';
import { responsesRouter } from './responses.js';
import { rerankRouter } from './rerank.js';
import { audioInfoRouter } from './audio-info.js';
import { transcriptionRouter } from './transcription.js';
import { realtimeRoute } from './realtime.js';
import { transcriptionStreamRoute } from './transcription-stream.js';
import { speechRouter } from './speech.js';
import { modelStoreRouter } from './model-store.js';
import { metricsRouter } from './metrics.js';
import { psRouter } from './ps.js';
import { ollamaChatRouter } from './ollama-chat.js';
import { ollamaEmbedRouter } from './ollama-embed.js';
import { ollamaModelsRouter } from './ollama-models.js';
import { llamacppRouter } from './llamacpp.js';
import { mcpRouter } from '../../mcp/http.js';

/** Every HTTP router, in mount order. One file per endpoint group. */
export const routers: Array<(ctx: ServerContext) => Router> = [
  modelStoreRouter, modelsRouter, chatRouter, completionsRouter, anthropicRouter, responsesRouter, embeddingsRouter, rerankRouter, ocrRouter, transcriptionRouter, speechRouter, audioInfoRouter, imagesRouter, psRouter, metricsRouter,
  ollamaChatRouter, ollamaEmbedRouter, ollamaModelsRouter,
  llamacppRouter,
  mcpRouter,
];

/** WebSocket endpoints, matched by path on upgrade. */
export const websocketRoutes: WebSocketRoute[] = [transcriptionStreamRoute, realtimeRoute];
