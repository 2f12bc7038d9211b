import type { LoadedModel } from '../../../core/loader.js';
import type { EmbeddingModel } from '../../../core/tasks/embed.js';
import { RunnerClient } from '../client.js';
import { assertModel, serve, type Served } from '../serving.js';

/** An embedding model's properties, read once after the load. */
type EmbeddingProps = Pick<EmbeddingModel, 'memoryBytes' | 'dimensions' | 'maxInputTokens' | 'vocabularySize'>;

/** The server's EmbeddingModel for an embedding model in a runner (llama.cpp). */
export class EmbeddingRunnerClient extends RunnerClient<EmbeddingModel, EmbeddingProps> implements EmbeddingModel {
  get dimensions(): number {
    return this.props.dimensions;
  }

  get maxInputTokens(): number {
    return this.props.maxInputTokens;
  }

  get vocabularySize(): number {
    return this.props.vocabularySize;
  }

  tokenize(texts: readonly string[]): Promise<number[][]> {
    return this.remote.call('tokenize', texts);
  }

  evaluatedLengths(inputs: readonly (readonly number[])[]): Promise<number[]> {
    return this.remote.call('evaluatedLengths', inputs);
  }

  embed(inputs: readonly number[][], signal: AbortSignal): Promise<Float32Array[]> {
    return this.remote.call('embed', inputs, signal);
  }
}

/** The runner's side: the loaded embedding model's properties and methods. */
export function serveEmbedding(model: LoadedModel): Served {
  assertModel<EmbeddingModel>(model, 'an embedding model', ['tokenize', 'evaluatedLengths', 'embed']);
  return serve<EmbeddingModel, EmbeddingProps>({
    props: { memoryBytes: model.memoryBytes, dimensions: model.dimensions, maxInputTokens: model.maxInputTokens, vocabularySize: model.vocabularySize },
    methods: {
      tokenize: model.tokenize.bind(model),
      evaluatedLengths: model.evaluatedLengths.bind(model),
      embed: model.embed.bind(model),
    },
  });
}
