// lserve's read of log-probabilities from a context's logits, compiled into the threadpool addon
// (threadpool-addon.ts builds it; src/runtimes/llama/native-logprobs.ts drives it).
//
//   lserveTokenLogprobs(addonContext, rows: Int32Array, targets: Int32Array, top)
//       -> Promise<{ logprobs: Float32Array, topIds: Int32Array, topLogprobs: Float32Array }>
//
// For each batch output row (the batchLogitIndex node-llama-cpp hands a logit mapper): the
// log-softmax of the row's logits at temperature 1, before any sampler, taken in double — the
// target token's (NaN where the target is -1), and the `top` likeliest tokens' ids and values,
// likeliest first (row-major, `top` per row). node-llama-cpp gives a position's probabilities only
// as the whole sorted vocabulary turned into a JavaScript Map, which costs ~50 ms a position on a
// 151,936-token vocabulary; this reads the few numbers an API reports, on a worker thread.
//
// The caller reads the rows of the last decode before the next one (inside node-llama-cpp's logit
// mapper) and after any other reader of that decode has applied llama.cpp's output reorder
// (runtimes/llama/output-reorder.ts): llama_get_logits_ith applies it on first read.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "napi.h"
#include "llama.h"

#include "AddonContext.h"
#include "AddonModel.h"
#include "lserveLogprobs.h"

namespace {

constexpr uint32_t MAX_TOP = 20;

class TokenLogprobsWorker : public Napi::AsyncWorker {
    public:
        TokenLogprobsWorker(Napi::Env env, AddonContext* context, std::vector<int32_t> rows, std::vector<int32_t> targets, uint32_t top)
            : Napi::AsyncWorker(env, "LserveTokenLogprobsWorker"),
              context(context),
              rows(std::move(rows)),
              targets(std::move(targets)),
              top(top),
              deferred(Napi::Promise::Deferred::New(env)) {
            context->Ref();
        }

        ~TokenLogprobsWorker() {
            context->Unref();
        }

        Napi::Promise GetPromise() {
            return deferred.Promise();
        }

    protected:
        void Execute() override {
            if (!context->contextLoaded || context->ctx == nullptr) {
                SetError("the context is not loaded");
                return;
            }
            const int32_t nVocab = llama_vocab_n_tokens(llama_model_get_vocab(context->model->model));
            logprobs.assign(rows.size(), std::numeric_limits<float>::quiet_NaN());
            topIds.assign(rows.size() * top, -1);
            topLogprobs.assign(rows.size() * top, -std::numeric_limits<float>::infinity());
            // (logit, id) pairs, a min-heap of the `top` largest so far: its front is the smallest kept.
            std::vector<std::pair<float, int32_t>> heap;
            heap.reserve(top + 1);
            const auto greater = [](const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) {
                return a.first > b.first || (a.first == b.first && a.second < b.second);
            };
            for (size_t r = 0; r < rows.size(); r++) {
                const float* logits = llama_get_logits_ith(context->ctx, rows[r]);
                if (logits == nullptr) {
                    SetError("no logits at output row " + std::to_string(rows[r]));
                    return;
                }
                float max = -std::numeric_limits<float>::infinity();
                for (int32_t i = 0; i < nVocab; i++) max = std::max(max, logits[i]);
                double sum = 0;
                for (int32_t i = 0; i < nVocab; i++) sum += std::exp(double(logits[i]) - double(max));
                const double logSumExp = double(max) + std::log(sum);

                const int32_t target = targets[r];
                if (target >= 0 && target < nVocab) logprobs[r] = float(double(logits[target]) - logSumExp);

                if (top == 0) continue;
                heap.clear();
                for (int32_t i = 0; i < nVocab; i++) {
                    if (heap.size() == top && logits[i] <= heap.front().first) continue;
                    heap.emplace_back(logits[i], i);
                    std::push_heap(heap.begin(), heap.end(), greater);
                    if (heap.size() > top) {
                        std::pop_heap(heap.begin(), heap.end(), greater);
                        heap.pop_back();
                    }
                }
                std::sort_heap(heap.begin(), heap.end(), greater);  // likeliest first
                for (size_t k = 0; k < heap.size(); k++) {
                    topIds[r * top + k] = heap[k].second;
                    topLogprobs[r * top + k] = float(double(heap[k].first) - logSumExp);
                }
            }
        }

        void OnOK() override {
            Napi::Env env = Env();
            Napi::Object result = Napi::Object::New(env);
            auto logprobsOut = Napi::Float32Array::New(env, logprobs.size());
            std::copy(logprobs.begin(), logprobs.end(), logprobsOut.Data());
            auto topIdsOut = Napi::Int32Array::New(env, topIds.size());
            std::copy(topIds.begin(), topIds.end(), topIdsOut.Data());
            auto topLogprobsOut = Napi::Float32Array::New(env, topLogprobs.size());
            std::copy(topLogprobs.begin(), topLogprobs.end(), topLogprobsOut.Data());
            result.Set("logprobs", logprobsOut);
            result.Set("topIds", topIdsOut);
            result.Set("topLogprobs", topLogprobsOut);
            deferred.Resolve(result);
        }

        void OnError(const Napi::Error& err) override {
            deferred.Reject(err.Value());
        }

    private:
        AddonContext* context;
        std::vector<int32_t> rows;
        std::vector<int32_t> targets;
        uint32_t top;
        std::vector<float> logprobs;
        std::vector<int32_t> topIds;
        std::vector<float> topLogprobs;
        Napi::Promise::Deferred deferred;
};

std::vector<int32_t> int32s(const Napi::Value& value) {
    auto array = value.As<Napi::Int32Array>();
    return std::vector<int32_t>(array.Data(), array.Data() + array.ElementLength());
}

Napi::Value TokenLogprobs(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (info.Length() < 4 || !info[0].IsObject() || !info[1].IsTypedArray() || !info[2].IsTypedArray() || !info[3].IsNumber()) {
        Napi::TypeError::New(env, "lserveTokenLogprobs(addonContext, rows: Int32Array, targets: Int32Array, top: number)").ThrowAsJavaScriptException();
        return env.Undefined();
    }
    if (info[1].As<Napi::TypedArray>().TypedArrayType() != napi_int32_array || info[2].As<Napi::TypedArray>().TypedArrayType() != napi_int32_array) {
        Napi::TypeError::New(env, "rows and targets must be Int32Arrays").ThrowAsJavaScriptException();
        return env.Undefined();
    }
    auto rows = int32s(info[1]);
    auto targets = int32s(info[2]);
    if (rows.size() != targets.size()) {
        Napi::RangeError::New(env, "rows and targets differ in length").ThrowAsJavaScriptException();
        return env.Undefined();
    }
    const uint32_t top = std::min(info[3].As<Napi::Number>().Uint32Value(), MAX_TOP);
    AddonContext* context = Napi::ObjectWrap<AddonContext>::Unwrap(info[0].As<Napi::Object>());
    auto* worker = new TokenLogprobsWorker(env, context, std::move(rows), std::move(targets), top);
    worker->Queue();
    return worker->GetPromise();
}

}  // namespace

void lserveLogprobsInit(Napi::Object exports) {
    exports.Set("lserveTokenLogprobs", Napi::Function::New(exports.Env(), TokenLogprobs));
}
