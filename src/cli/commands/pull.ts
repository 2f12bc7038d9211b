import { Command } from 'commander';
import { notAvailableYet } from '../errors.js';

export function pullCommand(): Command {
  return new Command('pull')
    .description('Download a model from the catalog, or register your own file or URL.')
    .argument('<model>', 'catalog id, a local .gguf/.onnx path, or a URL')
    .option('--kind <kind>', 'model kind, for your own files (chat, embedding, rerank, …)')
    .option('--quiet', 'no progress output')
    .addHelpText('after', '\nExamples:\n  $ lserve pull qwen3-0.6b\n  $ lserve pull ./my-model.gguf --kind chat\n  $ HF_ENDPOINT=https://mirror.example lserve pull bge-reranker-v2-m3')
    .action(() => notAvailableYet('pull'));
}
