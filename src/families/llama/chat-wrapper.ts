import { GeneralChatWrapper, LlamaText, resolveChatWrapper, SpecialToken, type ChatWrapper, type ChatWrapperGeneratedContextState, type LlamaModel, type QwenChatWrapper } from 'node-llama-cpp';

/**
 * Chat wrappers (node-llama-cpp's renderers of a model's chat template) for
 * the per-request template switches: thinking on/off, reasoning effort and a
 * forced tool call. node-llama-cpp picks the wrapper for the model
 * (QwenChatWrapper for Qwen3, a Jinja wrapper for unknown templates); the
 * switches go into that wrapper's own options, so the prompt is exactly what
 * the model's template would render. Variants are cached per model.
 * (This module is only imported by the lazily loaded chat backend.)
 */

export interface WrapperVariant {
  /** undefined = the template's default. */
  thinking: boolean | undefined;
  effort: 'low' | 'medium' | 'high' | undefined;
  /** tool_choice required / named: the answer must start with a function call. */
  requireFunctionCall: boolean;
}

export class ChatWrappers {
  private readonly cache = new Map<string, ChatWrapper>();

  constructor(private readonly model: LlamaModel) {}

  /** The wrapper for `variant`; `listed`, when given, keeps functions out of the prompt's tool list (listingOnly). */
  get(variant: WrapperVariant, listed?: (name: string) => boolean): ChatWrapper {
    const key = `${variant.thinking}:${variant.effort}`;
    let base = this.cache.get(key);
    if (!base) {
      base = bosAsTheModelAsks(this.resolve(variant), this.model);
      this.cache.set(key, base);
    }
    // Steering sees every function the generation may call, whatever the prompt lists.
    return steerResponseStart(listed ? listingOnly(base, listed) : base, variant);
  }

  private resolve({ thinking, effort }: WrapperVariant): ChatWrapper {
    const templateArgs: Record<string, unknown> = {};
    if (thinking !== undefined) templateArgs.enable_thinking = thinking;
    if (effort !== undefined) templateArgs.reasoning_effort = effort;
    const resolved = resolveChatWrapper(this.model, {
      customWrapperSettings: {
        qwen: {
          // Qwen's templates put a tool message's content in as it is; node-llama-cpp would quote it as a JSON string.
          _flatFunctionResultString: true,
          // Qwen3's template with enable_thinking=false pre-fills an empty <think></think>; "discourage" renders exactly that.
          ...(thinking === false ? { thoughts: 'discourage' as const } : {}),
        } as ConstructorParameters<typeof QwenChatWrapper>[0],
        ...(effort !== undefined ? { harmony: { reasoningEffort: effort } } : {}),
        jinjaTemplate: { additionalRenderParameters: templateArgs },
      },
      warningLogs: false,
    });
    return resolved ?? new GeneralChatWrapper();
  }
}

/**
 * A leading BOS token only where the model's GGUF asks for one
 * (tokenizer.ggml.add_bos_token), as llama.cpp's tokenizer and server do:
 * several of node-llama-cpp's wrappers (ChatML's, which it picks for
 * Qwen2-VL's template) begin every prompt with BOS, and a Qwen model then
 * reads an <|endoftext|> that llama.cpp would not give it.
 */
function bosAsTheModelAsks(inner: ChatWrapper, model: LlamaModel): ChatWrapper {
  if (model.tokens.bos == null || model.tokens.shouldPrependBosToken) return inner;
  const wrapped = Object.create(inner) as ChatWrapper;
  wrapped.generateContextState = (options): ChatWrapperGeneratedContextState => {
    const state = inner.generateContextState.call(wrapped, options);
    const [first, ...rest] = state.contextText.values;
    if (!(first instanceof SpecialToken) || first.value !== 'BOS') return state;
    return { ...state, contextText: LlamaText(rest) };
  };
  return wrapped;
}

/**
 * A forced tool call (tool_choice required or named) uses node-llama-cpp's
 * response-start steering (the mechanism its Muse wrapper uses): the answer
 * enters function calling mode at once, whose grammar only admits the offered
 * functions and their parameter schemas. Wrappers that already steer their
 * own start are left alone.
 */
function steerResponseStart(inner: ChatWrapper, variant: WrapperVariant): ChatWrapper {
  if (!variant.requireFunctionCall) return inner;
  const steered = Object.create(inner) as ChatWrapper;
  steered.generateContextState = (options): ChatWrapperGeneratedContextState => {
    const state = inner.generateContextState.call(steered, options);
    if (state.functionCall || state.prefixTriggers || state.noPrefixTrigger) return state;
    const hasFunctions = options.availableFunctions !== undefined && Object.keys(options.availableFunctions).length > 0;
    if (!hasFunctions) return state;
    return {
      contextText: state.contextText,
      stopGenerationTriggers: state.stopGenerationTriggers,
      prefixTriggers: [],
      noPrefixTrigger: { type: 'functionCall', inject: LlamaText([]) },
    };
  };
  return steered;
}

/**
 * The wrapper, listing in the prompt only the functions `listed` keeps
 * (deferred tools are callable but brought in by the conversation where a
 * tool search found them: core/tasks/chat.ts ChatTool.deferred). What the
 * model may call is decided apart from this, by the functions given to the
 * generation.
 */
function listingOnly(inner: ChatWrapper, listed: (name: string) => boolean): ChatWrapper {
  const wrapped = Object.create(inner) as ChatWrapper;
  wrapped.generateContextState = (options): ChatWrapperGeneratedContextState => {
    const functions = options.availableFunctions && Object.fromEntries(Object.entries(options.availableFunctions).filter(([name]) => listed(name)));
    return inner.generateContextState.call(wrapped, { ...options, availableFunctions: functions && Object.keys(functions).length ? functions : undefined });
  };
  return wrapped;
}
