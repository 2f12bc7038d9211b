import { floatType, type FloatType } from '../../runtimes/onnx/float-io.js';
import { bindRoles, staticSize, type GraphValue } from './graph-io.js';

/**
 * How the code-predictor graph is wired: the talker state and the frame's
 * codes in, one row of logits per residual group out (row g − 1 scores group
 * g). Bound by role like the talker (graph-io.ts): int4 and fp16 exports
 * rename the logits and take and give float16.
 */

export interface PredictorBinding {
  hidden: string;
  codes: string;
  logits: string;
  types: { hidden: FloatType; logits: FloatType };
  /** Codes per residual group, when the graph declares it. */
  vocab?: number;
}

export function bindPredictor(inputs: readonly GraphValue[], outputs: readonly GraphValue[], dims: { hidden?: number; groups: number }): PredictorBinding {
  const input = bindRoles(
    inputs,
    {
      hidden: { name: 'talker_hidden', kind: 'float', shape: [1, dims.hidden] },
      codes: { name: 'codec_ids', kind: 'integer', shape: [1, dims.groups] },
    },
    'code_predictor',
  );
  const { logits } = bindRoles(outputs, { logits: { name: 'logits', kind: 'float', shape: [1, dims.groups - 1, undefined] } }, 'code_predictor');
  return {
    hidden: input.hidden.name,
    codes: input.codes.name,
    logits: logits.name,
    types: {
      hidden: floatType(input.hidden.type, `the code predictor's ${input.hidden.name}`),
      logits: floatType(logits.type, `the code predictor's ${logits.name}`),
    },
    vocab: staticSize(logits, 2),
  };
}
