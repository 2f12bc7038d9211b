import type { Family } from '../../core/loader.js';

/** llama.cpp's GGUF models through node-llama-cpp: chat (with images and audio where a projector is registered), embeddings, rerank. */
export const llama: Family = {
  loaders: {
    'llama:chat': () => import('./chat-loader.js').then((m) => m.chatLoader),
    'llama:embedding': () => import('./embedding.js').then((m) => m.embeddingLoader),
    'llama:rerank': () => import('./ranking.js').then((m) => m.rankingLoader),
  },
};
