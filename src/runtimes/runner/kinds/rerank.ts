import type { LoadedModel } from '../../../core/loader.js';
import type { RankingModel } from '../../../core/tasks/rerank.js';
import { RunnerClient } from '../client.js';
import { assertModel, serve, type Served } from '../serving.js';

/** A reranker's properties, read once after the load. */
type RankingProps = Pick<RankingModel, 'memoryBytes' | 'maxInputTokens'>;

/** The server's RankingModel for a reranker in a runner (llama.cpp). */
export class RankingRunnerClient extends RunnerClient<RankingModel, RankingProps> implements RankingModel {
  get maxInputTokens(): number {
    return this.props.maxInputTokens;
  }

  tokenize(texts: readonly string[]): Promise<number[][]> {
    return this.remote.call('tokenize', texts);
  }

  pairLengths(query: readonly number[], documents: readonly (readonly number[])[]): Promise<number[]> {
    return this.remote.call('pairLengths', query, documents);
  }

  score(query: readonly number[], documents: readonly number[][], signal: AbortSignal): Promise<number[]> {
    return this.remote.call('score', query, documents, signal);
  }
}

/** The runner's side: the loaded reranker's properties and methods. */
export function serveRanking(model: LoadedModel): Served {
  assertModel<RankingModel>(model, 'a reranking model', ['tokenize', 'pairLengths', 'score']);
  return serve<RankingModel, RankingProps>({
    props: { memoryBytes: model.memoryBytes, maxInputTokens: model.maxInputTokens },
    methods: {
      tokenize: model.tokenize.bind(model),
      pairLengths: model.pairLengths.bind(model),
      score: model.score.bind(model),
    },
  });
}
