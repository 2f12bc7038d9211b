// lserve's decode of a GGUF model from input embeddings (llama_batch.embd) instead of tokens, compiled
// into the threadpool addon (threadpool-addon.ts builds it; src/runtimes/llama/embed-decoder.ts drives it).
//
//   new LserveEmbedModel(path, { contextSize, batchSize, threads, poll?, heads? })
//   load() -> Promise<{ width, hiddenWidth, vocab, heads, headRows }>
//   decode(rows: Float32Array, count, position, logitsFrom, logitsTo, head = -1, spin = false)
//       -> Promise<{ hidden: Float32Array, logits: Float32Array }>
//   decodeSync(…the same) -> { hidden, logits }, on the calling thread
//   truncate(position)
//   dispose() -> Promise<void>
//
// Qwen3-TTS's talker and code predictor are Qwen3 stacks fed with sums of codebook embeddings, not
// token ids, and the caller needs both the head's logits (to sample a code) and the final hidden
// state (the talker's feeds the predictor). node-llama-cpp knows only tokens, so this owns its own
// model, context and single sequence (0), and decodes one short batch at a time on a worker thread.
//
// The context is made with embeddings on and pooling NONE: llama.cpp then extracts, from the same
// decode, the head's logits and the post-final-norm state that feeds the head (llama-context.cpp,
// decode: t_logits and t_embd). It also makes every row of the batch an output (balloc's
// output_all), so a prefill of n rows computes the head n times; one decode still reads the layers'
// weights once, where decoding all but the last row apart (embeddings off, no output) would read
// them twice — the cost that counts for the short batches this serves.
//
// `heads` names a second GGUF file of output heads over the same hidden state (tensors head.0 …,
// each [width, rows]): Qwen3-TTS's code predictor scores each of its 15 steps with a head of its
// own, and a llama.cpp model has one. A decode given `head` ≥ 0 computes that head alone, with ggml
// on the same threadpool, in place of the model's logits: one head's rows rather than all heads
// stacked into the model's output.
#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#if defined(__unix__) || defined(__APPLE__)
#include <dlfcn.h>
#endif

#include <cstdio>
#include <memory>

#include "napi.h"
#include "ggml.h"
#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "gguf.h"
#include "llama.h"

#include "lserveEmbedDecode.h"

namespace {

// One persistent CPU threadpool per thread count, shared by every model of this file that runs with
// that many threads (the talker and the code predictor take turns: one pool keeps the workers warm
// for both, where two would each spin or sleep on their own). Each context has its own CPU backend,
// which only pauses a pool when it is handed a different one, so sharing is safe as long as two
// graphs never run on the pool at once: `compute` serializes the decodes of its users. Freed with
// its last user, after that user's context (a freed pool must never be left to a live backend).
struct SharedPool {
    int32_t threads = 0;
    int users = 0;
    ggml_threadpool* pool = nullptr;
    void (*free)(ggml_threadpool*) = nullptr;
    void (*pause)(ggml_threadpool*) = nullptr;
    std::mutex compute;
};

std::mutex poolsMutex;
std::map<int32_t, SharedPool*> pools;

// As AddonContext::attachThreadpool (threadpool.patch): the CPU variant ggml loaded holds the
// threadpool functions; ggml_threadpool_pause is not in its backend table, so it is looked up in
// that library. Null where none can be made: llama.cpp then starts a pool per graph, as without it.
SharedPool* acquirePool(int32_t threads) {
    std::lock_guard<std::mutex> lock(poolsMutex);
    auto found = pools.find(threads);
    if (found != pools.end()) {
        found->second->users++;
        return found->second;
    }

    auto* cpuDev = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
    if (cpuDev == nullptr) {
        return nullptr;
    }
    auto* reg = ggml_backend_dev_backend_reg(cpuDev);
    auto* newFn = (ggml_threadpool* (*)(ggml_threadpool_params*))ggml_backend_reg_get_proc_address(reg, "ggml_threadpool_new");
    auto* freeFn = (void (*)(ggml_threadpool*))ggml_backend_reg_get_proc_address(reg, "ggml_threadpool_free");
    if (newFn == nullptr || freeFn == nullptr) {
        return nullptr;
    }
    void (*pauseFn)(ggml_threadpool*) = nullptr;
#if defined(__unix__) || defined(__APPLE__)
    Dl_info info;
    if (dladdr((void*)newFn, &info) != 0 && info.dli_fname != nullptr) {
        void* handle = dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD);
        if (handle != nullptr) {
            pauseFn = (void (*)(ggml_threadpool*))dlsym(handle, "ggml_threadpool_pause");
            dlclose(handle);
        }
    }
#endif

    ggml_threadpool_params params = ggml_threadpool_params_default(threads);
    params.poll = 50;  // llama.cpp's default, as the chat contexts' pools
    ggml_threadpool* pool = newFn(&params);
    if (pool == nullptr) {
        return nullptr;
    }
    auto* shared = new SharedPool();
    shared->threads = threads;
    shared->users = 1;
    shared->pool = pool;
    shared->free = freeFn;
    shared->pause = pauseFn;
    pools[threads] = shared;
    return shared;
}

void releasePool(SharedPool* shared) {
    if (shared == nullptr) {
        return;
    }
    std::lock_guard<std::mutex> lock(poolsMutex);
    if (--shared->users > 0) {
        return;
    }
    pools.erase(shared->threads);
    shared->free(shared->pool);
    delete shared;
}

// The extra heads: their weights in a CPU backend buffer, and one prebuilt graph per head (the head's
// weight times the one shared input, the hidden state).
struct Heads {
    ggml_backend_t backend = nullptr;
    ggml_context* weights = nullptr;
    ggml_backend_buffer_t weightBuffer = nullptr;
    ggml_context* compute = nullptr;
    ggml_backend_buffer_t computeBuffer = nullptr;
    ggml_tensor* input = nullptr;
    std::vector<ggml_tensor*> outputs;
    std::vector<ggml_cgraph*> graphs;
    int32_t rows = 0;

    ~Heads() {
        if (computeBuffer != nullptr) ggml_backend_buffer_free(computeBuffer);
        if (compute != nullptr) ggml_free(compute);
        if (weightBuffer != nullptr) ggml_backend_buffer_free(weightBuffer);
        if (weights != nullptr) ggml_free(weights);
        if (backend != nullptr) ggml_backend_free(backend);
    }
};

// Loads head.0 … head.<n-1> of `path`, each [width, rows] of one type; null with `error` set otherwise.
std::unique_ptr<Heads> loadHeads(const std::string& path, int32_t width, int32_t threads, ggml_threadpool* pool, std::string& error) {
    auto heads = std::make_unique<Heads>();
    gguf_init_params params = {/* no_alloc */ true, &heads->weights};
    gguf_context* gguf = gguf_init_from_file(path.c_str(), params);
    if (gguf == nullptr) {
        error = "cannot read the heads file " + path;
        return nullptr;
    }
    const int64_t count = gguf_get_n_tensors(gguf);
    auto* cpuDev = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
    heads->backend = cpuDev != nullptr ? ggml_backend_dev_init(cpuDev, nullptr) : nullptr;
    if (heads->backend == nullptr || count == 0) {
        gguf_free(gguf);
        error = heads->backend == nullptr ? "no CPU backend for the heads" : "the heads file holds no tensor";
        return nullptr;
    }
    auto* reg = ggml_backend_dev_backend_reg(cpuDev);
    auto* setThreads = (void (*)(ggml_backend_t, int))ggml_backend_reg_get_proc_address(reg, "ggml_backend_set_n_threads");
    auto* setPool = (void (*)(ggml_backend_t, ggml_threadpool*))ggml_backend_reg_get_proc_address(reg, "ggml_backend_cpu_set_threadpool");
    if (setThreads != nullptr) setThreads(heads->backend, threads);
    if (setPool != nullptr && pool != nullptr) setPool(heads->backend, pool);
    heads->weightBuffer = ggml_backend_alloc_ctx_tensors(heads->weights, heads->backend);

    ggml_init_params computeParams = {ggml_tensor_overhead() * size_t(1 + count) + ggml_graph_overhead_custom(4, false) * size_t(count), nullptr, true};
    heads->compute = ggml_init(computeParams);
    heads->input = ggml_new_tensor_1d(heads->compute, GGML_TYPE_F32, width);
    FILE* file = std::fopen(path.c_str(), "rb");
    std::vector<uint8_t> bytes;
    for (int64_t i = 0; i < count && error.empty(); i++) {
        const std::string name = "head." + std::to_string(i);
        ggml_tensor* weight = ggml_get_tensor(heads->weights, name.c_str());
        const int64_t id = gguf_find_tensor(gguf, name.c_str());
        if (weight == nullptr || id < 0 || weight->ne[0] != width || (i > 0 && weight->ne[1] != heads->rows)) {
            error = "the heads file's " + name + " is missing or not [" + std::to_string(width) + ", rows]";
            break;
        }
        heads->rows = int32_t(weight->ne[1]);
        bytes.resize(ggml_nbytes(weight));
        const long offset = long(gguf_get_data_offset(gguf) + gguf_get_tensor_offset(gguf, id));
        if (file == nullptr || std::fseek(file, offset, SEEK_SET) != 0 || std::fread(bytes.data(), 1, bytes.size(), file) != bytes.size()) {
            error = "cannot read " + name + " from " + path;
            break;
        }
        ggml_backend_tensor_set(weight, bytes.data(), 0, bytes.size());
        ggml_tensor* out = ggml_mul_mat(heads->compute, weight, heads->input);
        ggml_cgraph* graph = ggml_new_graph_custom(heads->compute, 4, false);
        ggml_build_forward_expand(graph, out);
        heads->outputs.push_back(out);
        heads->graphs.push_back(graph);
    }
    if (file != nullptr) std::fclose(file);
    gguf_free(gguf);
    if (!error.empty()) return nullptr;
    heads->computeBuffer = ggml_backend_alloc_ctx_tensors(heads->compute, heads->backend);
    return heads;
}

struct DecodeCall;

class EmbedModel : public Napi::ObjectWrap<EmbedModel> {
    public:
        static Napi::Function Define(Napi::Env env) {
            return DefineClass(env, "LserveEmbedModel", {
                InstanceMethod("load", &EmbedModel::Load),
                InstanceMethod("decode", &EmbedModel::Decode),
                InstanceMethod("decodeSync", &EmbedModel::DecodeSync),
                InstanceMethod("truncate", &EmbedModel::Truncate),
                InstanceMethod("dispose", &EmbedModel::Dispose),
            });
        }

        EmbedModel(const Napi::CallbackInfo& info) : Napi::ObjectWrap<EmbedModel>(info) {
            Napi::Env env = info.Env();
            if (info.Length() < 2 || !info[0].IsString() || !info[1].IsObject()) {
                Napi::TypeError::New(env, "new LserveEmbedModel(path: string, { contextSize, batchSize, threads })").ThrowAsJavaScriptException();
                return;
            }
            path = info[0].As<Napi::String>().Utf8Value();
            auto options = info[1].As<Napi::Object>();
            const auto positive = [&](const char* name, int32_t& out) {
                auto value = options.Get(name);
                const double number = value.IsNumber() ? value.As<Napi::Number>().DoubleValue() : NAN;
                if (!(number >= 1 && number <= 1 << 30 && std::floor(number) == number)) {
                    Napi::RangeError::New(env, std::string(name) + " must be a positive integer").ThrowAsJavaScriptException();
                    return false;
                }
                out = int32_t(number);
                return true;
            };
            if (!positive("contextSize", contextSize) || !positive("batchSize", batchSize) || !positive("threads", threads)) {
                return;
            }
            auto pollOption = options.Get("poll");
            poll = pollOption.IsBoolean() && pollOption.As<Napi::Boolean>().Value();
            auto headsOption = options.Get("heads");
            if (headsOption.IsString()) headsPath = headsOption.As<Napi::String>().Utf8Value();
            batchSize = std::min(batchSize, contextSize);
        }

        ~EmbedModel() {
            // Collected without dispose(): no worker holds it (each holds a reference).
            freeAll();
        }

        // Everything a worker may touch is behind `mutex`: one load, decode or free at a time.
        std::mutex mutex;
        std::string path;
        int32_t contextSize = 0;
        int32_t batchSize = 0;
        int32_t threads = 0;
        // Whether the pool's workers may spin after a decode (while setThreadpoolPolling allows it too):
        // off, they sleep at once, leaving the cores to work running beside the decodes (a codec decoder).
        bool poll = false;
        std::string headsPath;
        std::unique_ptr<Heads> heads;
        llama_model* model = nullptr;
        llama_context* ctx = nullptr;
        llama_batch batch{};
        bool hasBatch = false;
        SharedPool* pool = nullptr;
        int32_t width = 0;
        int32_t hiddenWidth = 0;
        int32_t vocab = 0;
        // JavaScript's view, on the main thread: load() called, load completed, dispose() called.
        bool loadStarted = false;
        bool loaded = false;
        bool disposed = false;

        void freeAll() {
            std::lock_guard<std::mutex> lock(mutex);
            if (hasBatch) {
                llama_batch_free(batch);
                hasBatch = false;
            }
            heads.reset();
            if (ctx != nullptr) {
                llama_free(ctx);
                ctx = nullptr;
            }
            if (model != nullptr) {
                llama_model_free(model);
                model = nullptr;
            }
            releasePool(pool);  // after the context that computed with it
            pool = nullptr;
        }

    private:
        Napi::Value Load(const Napi::CallbackInfo& info);
        Napi::Value Decode(const Napi::CallbackInfo& info);
        Napi::Value DecodeSync(const Napi::CallbackInfo& info);
        std::unique_ptr<Napi::Error> decodeCall(const Napi::CallbackInfo& info, DecodeCall& call);
        Napi::Value Truncate(const Napi::CallbackInfo& info);
        Napi::Value Dispose(const Napi::CallbackInfo& info);
};

// A worker that keeps the model alive and settles a promise: Run on the worker thread, Result back
// on the main thread.
class ModelWorker : public Napi::AsyncWorker {
    public:
        ModelWorker(Napi::Env env, EmbedModel* model, const char* name)
            : Napi::AsyncWorker(env, name), model(model), deferred(Napi::Promise::Deferred::New(env)) {
            model->Ref();
        }
        ~ModelWorker() {
            model->Unref();
        }
        Napi::Promise Start() {
            Queue();
            return deferred.Promise();
        }

    protected:
        EmbedModel* model;
        Napi::Promise::Deferred deferred;
        // llama_decode's status where it failed, for the error's `code`.
        int32_t code = 0;

        virtual Napi::Value Result(Napi::Env env) {
            return env.Undefined();
        }
        void OnOK() override {
            deferred.Resolve(Result(Env()));
        }
        void OnError(const Napi::Error& err) override {
            if (code != 0) {
                err.Value().Set("code", Napi::Number::New(Env(), code));
            }
            deferred.Reject(err.Value());
        }
};

class LoadWorker : public ModelWorker {
    public:
        LoadWorker(Napi::Env env, EmbedModel* model) : ModelWorker(env, model, "LserveEmbedModelLoad") {}

    protected:
        void Execute() override {
            std::lock_guard<std::mutex> lock(model->mutex);
            llama_model_params modelParams = llama_model_default_params();
            // The CPU only. An empty device list: llama.cpp adds the CPU backend of its own, the one the
            // threadpool is attached to (the CPU device named here would be a second CPU backend,
            // computing every graph with threads started and joined for it).
            ggml_backend_dev_t noDevices[1] = {nullptr};
            modelParams.devices = noDevices;
            modelParams.n_gpu_layers = 0;
            // Read, not mapped: the CPU repacks its 4-bit weights into buffers of its own, and a mapping
            // would keep the file's pages it read resident beside them (Qwen3-TTS 0.6B: 260 MB more).
            modelParams.load_mode = LLAMA_LOAD_MODE_NONE;
            modelParams.lazy_mode = LLAMA_LAZY_MODE_OFF;
            model->model = llama_model_load_from_file(model->path.c_str(), modelParams);
            if (model->model == nullptr) {
                SetError("llama.cpp could not load " + model->path);
                return;
            }
            model->width = llama_model_n_embd_inp(model->model);
            model->hiddenWidth = llama_model_n_embd_out(model->model);
            model->vocab = llama_vocab_n_tokens(llama_model_get_vocab(model->model));

            llama_context_params params = llama_context_default_params();
            params.n_ctx = model->contextSize;
            params.n_batch = model->batchSize;
            params.n_ubatch = model->batchSize;
            params.n_seq_max = 1;
            params.n_threads = model->threads;
            params.n_threads_batch = model->threads;
            params.embeddings = true;
            params.pooling_type = LLAMA_POOLING_TYPE_NONE;
            model->ctx = llama_init_from_model(model->model, params);
            if (model->ctx == nullptr) {
                SetError("llama.cpp could not create a context for " + model->path);
                return;
            }
            model->pool = acquirePool(model->threads);
            if (model->pool != nullptr) {
                llama_attach_threadpool(model->ctx, model->pool->pool, nullptr);
            }
            model->batch = llama_batch_init(model->batchSize, model->width, 1);
            model->hasBatch = true;
            if (!model->headsPath.empty()) {
                std::string error;
                model->heads = loadHeads(model->headsPath, model->hiddenWidth, model->threads, model->pool != nullptr ? model->pool->pool : nullptr, error);
                if (!model->heads) SetError(error);
            }
        }

        Napi::Value Result(Napi::Env env) override {
            model->loaded = !model->disposed;
            Napi::Object result = Napi::Object::New(env);
            result.Set("width", model->width);
            result.Set("hiddenWidth", model->hiddenWidth);
            result.Set("vocab", model->vocab);
            result.Set("heads", model->heads ? int32_t(model->heads->graphs.size()) : 0);
            result.Set("headRows", model->heads ? model->heads->rows : 0);
            return result;
        }
};

// One decode's arguments and results, run on whichever thread calls run(): the worker of decode(),
// or the caller's own for decodeSync().
struct DecodeCall {
    std::vector<float> rows;
    int32_t count;
    int32_t position;
    int32_t logitsFrom;
    int32_t logitsTo;
    int32_t head;
    // The pool's workers keep polling after this decode, for one that follows at once (they sleep by
    // themselves after llama.cpp's polling rounds); otherwise they sleep as it ends, unless the model polls.
    bool spin = false;
    std::vector<float> hidden;
    std::vector<float> logits;
    // llama_decode's status where it failed, for the error's `code`.
    int32_t code = 0;

    // An empty string, or what went wrong. The caller holds model->mutex.
    std::string run(EmbedModel* model) {
        llama_context* ctx = model->ctx;
        if (ctx == nullptr) {
            return "the model is disposed";
        }
        llama_memory_t memory = llama_get_memory(ctx);
        // llama.cpp takes a batch only where it continues the sequence; said here in the caller's terms.
        const llama_pos next = llama_memory_seq_pos_max(memory, 0) + 1;
        if (position != next) {
            return "decode at position " + std::to_string(position) + ", but the cache holds positions 0 to " + std::to_string(next - 1) +
                   (position < next ? ": truncate(" + std::to_string(position) + ") first" : "");
        }
        {
            // The pool's other users wait: one graph at a time on a shared pool.
            std::unique_lock<std::mutex> computing;
            if (model->pool != nullptr) {
                computing = std::unique_lock<std::mutex>(model->pool->compute);
            }
            llama_batch& batch = model->batch;
            const int32_t width = model->width;
            for (int32_t start = 0; start < count && code == 0; start += model->batchSize) {
                const int32_t n = std::min(model->batchSize, count - start);
                std::copy(rows.begin() + size_t(start) * width, rows.begin() + size_t(start + n) * width, batch.embd);
                for (int32_t i = 0; i < n; i++) {
                    batch.pos[i] = position + start + i;
                    batch.n_seq_id[i] = 1;
                    batch.seq_id[i][0] = 0;
                    batch.logits[i] = true;  // with embeddings on llama.cpp outputs every row, and warns of any not marked
                }
                batch.n_tokens = n;
                code = llama_decode(ctx, batch);
            }
            if (code == 0 && head >= 0) {
                // The asked head over the last row's hidden state, in place of the model's logits.
                Heads& heads = *model->heads;
                const float* h = llama_get_embeddings_ith(ctx, -1);
                if (h != nullptr) {
                    ggml_backend_tensor_set(heads.input, h, 0, ggml_nbytes(heads.input));
                    if (ggml_backend_graph_compute(heads.backend, heads.graphs[head]) == GGML_STATUS_SUCCESS) {
                        logits.resize(size_t(logitsTo - logitsFrom));
                        ggml_backend_tensor_get(heads.outputs[head], logits.data(), size_t(logitsFrom) * sizeof(float), logits.size() * sizeof(float));
                    }
                }
            }
            if (model->pool != nullptr && model->pool->pause != nullptr && !spin && !(model->poll && lserveThreadpoolPolling())) {
                model->pool->pause(model->pool->pool);
            }
        }
        if (code != 0) {
            // What an earlier batch of this call left in the cache goes too: a failed decode changes nothing.
            llama_memory_seq_rm(memory, 0, position, -1);
            return "llama_decode failed with status " + std::to_string(code) +
                   (code == 1 ? " (no room in the KV cache for the batch)" : code == 2 ? " (aborted)" : code == -1 ? " (invalid batch)" : "");
        }
        const float* h = llama_get_embeddings_ith(ctx, -1);
        const float* l = head >= 0 ? nullptr : llama_get_logits_ith(ctx, -1);
        if (h == nullptr || (head < 0 && l == nullptr) || (head >= 0 && logits.empty())) {
            return head >= 0 ? "the head could not be computed over the last row" : "llama.cpp returned no hidden state or logits for the last row";
        }
        hidden.assign(h, h + model->hiddenWidth);
        if (head < 0) logits.assign(l + logitsFrom, l + logitsTo);
        return "";
    }

    Napi::Object result(Napi::Env env) const {
        Napi::Object out = Napi::Object::New(env);
        auto hiddenOut = Napi::Float32Array::New(env, hidden.size());
        std::copy(hidden.begin(), hidden.end(), hiddenOut.Data());
        auto logitsOut = Napi::Float32Array::New(env, logits.size());
        std::copy(logits.begin(), logits.end(), logitsOut.Data());
        out.Set("hidden", hiddenOut);
        out.Set("logits", logitsOut);
        return out;
    }
};

class DecodeWorker : public ModelWorker {
    public:
        DecodeWorker(Napi::Env env, EmbedModel* model, DecodeCall call) : ModelWorker(env, model, "LserveEmbedModelDecode"), call(std::move(call)) {}

    protected:
        void Execute() override {
            std::lock_guard<std::mutex> lock(model->mutex);
            const std::string error = call.run(model);
            code = call.code;
            if (!error.empty()) SetError(error);
        }

        Napi::Value Result(Napi::Env env) override {
            return call.result(env);
        }

    private:
        DecodeCall call;
};

class DisposeWorker : public ModelWorker {
    public:
        DisposeWorker(Napi::Env env, EmbedModel* model) : ModelWorker(env, model, "LserveEmbedModelDispose") {}

    protected:
        void Execute() override {
            model->freeAll();  // waits for a decode in flight
        }
};

Napi::Value Rejected(Napi::Env env, Napi::Error error) {
    auto deferred = Napi::Promise::Deferred::New(env);
    deferred.Reject(error.Value());
    return deferred.Promise();
}

// An integer argument in [min, max], or nothing (NaN, fractions and out-of-range values alike).
bool integerIn(const Napi::Value& value, double min, double max, int32_t& out) {
    if (!value.IsNumber()) {
        return false;
    }
    const double number = value.As<Napi::Number>().DoubleValue();
    if (!(number >= min && number <= max) || std::floor(number) != number) {
        return false;
    }
    out = int32_t(number);
    return true;
}

Napi::Value EmbedModel::Load(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (disposed) {
        return Rejected(env, Napi::Error::New(env, "the model is disposed"));
    }
    if (loadStarted) {
        return Rejected(env, Napi::Error::New(env, "load() was called already"));
    }
    loadStarted = true;
    return (new LoadWorker(env, this))->Start();
}

// A decode's arguments, checked before any work: a bad call fails and changes nothing. An empty
// error: `call` is filled.
std::unique_ptr<Napi::Error> EmbedModel::decodeCall(const Napi::CallbackInfo& info, DecodeCall& call) {
    Napi::Env env = info.Env();
    const auto fail = [&](Napi::Error error) { return std::make_unique<Napi::Error>(error); };
    if (disposed || !loaded) {
        return fail(Napi::Error::New(env, disposed ? "the model is disposed" : "the model is not loaded (await load() first)"));
    }
    if (info.Length() < 5 || !info[0].IsTypedArray() || info[0].As<Napi::TypedArray>().TypedArrayType() != napi_float32_array) {
        return fail(Napi::TypeError::New(env, "decode(rows: Float32Array, count, position, logitsFrom, logitsTo, head = -1, spin = false)"));
    }
    if (info.Length() > 6 && !info[6].IsUndefined() && !info[6].IsBoolean()) {
        return fail(Napi::TypeError::New(env, "spin must be a boolean"));
    }
    int32_t head = -1;
    const int32_t headCount = heads ? int32_t(heads->graphs.size()) : 0;
    if (info.Length() > 5 && !info[5].IsUndefined() && !integerIn(info[5], -1, headCount - 1, head)) {
        return fail(Napi::RangeError::New(env, "head must be -1 (the model's logits) or an integer below the heads loaded (" + std::to_string(headCount) + ")"));
    }
    const int32_t scored = head >= 0 ? heads->rows : vocab;
    auto rows = info[0].As<Napi::Float32Array>();
    int32_t count = 0, position = 0, from = 0, to = 0;
    if (!integerIn(info[1], 1, contextSize, count)) {
        return fail(Napi::RangeError::New(env, "count must be an integer from 1 to the context size (" + std::to_string(contextSize) + ")"));
    }
    if (rows.ElementLength() != size_t(count) * width) {
        return fail(Napi::RangeError::New(env, "rows holds " + std::to_string(rows.ElementLength()) + " floats, not count × width = " + std::to_string(size_t(count) * width)));
    }
    if (!integerIn(info[2], 0, contextSize - count, position)) {
        return fail(Napi::RangeError::New(env, "position must be an integer from 0 to " + std::to_string(contextSize - count) +
                                                   ": position + count at most the context size (" + std::to_string(contextSize) + ")"));
    }
    if (!integerIn(info[3], 0, scored - 1, from) || !integerIn(info[4], from + 1, scored, to)) {
        return fail(Napi::RangeError::New(env, "the logits range must satisfy 0 <= from < to <= " + std::string(head >= 0 ? "the head's rows (" : "vocab (") + std::to_string(scored) + ")"));
    }
    call.rows.assign(rows.Data(), rows.Data() + rows.ElementLength());
    call.count = count;
    call.position = position;
    call.logitsFrom = from;
    call.logitsTo = to;
    call.head = head;
    call.spin = info.Length() > 6 && info[6].IsBoolean() && info[6].As<Napi::Boolean>().Value();
    return nullptr;
}

Napi::Value EmbedModel::Decode(const Napi::CallbackInfo& info) {
    DecodeCall call;
    if (auto error = decodeCall(info, call)) return Rejected(info.Env(), *error);
    return (new DecodeWorker(info.Env(), this, std::move(call)))->Start();
}

// The same decode on the calling thread, returning its result or throwing: for a caller whose thread
// does nothing else meanwhile (a worker thread's frame loop), without a hop to a worker and back.
Napi::Value EmbedModel::DecodeSync(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    DecodeCall call;
    if (auto error = decodeCall(info, call)) {
        error->ThrowAsJavaScriptException();
        return env.Undefined();
    }
    if (!mutex.try_lock()) {
        // Another call in flight: never block the calling thread on it.
        Napi::Error::New(env, "decodeSync() while another call runs: await it first").ThrowAsJavaScriptException();
        return env.Undefined();
    }
    std::lock_guard<std::mutex> lock(mutex, std::adopt_lock);
    const std::string message = call.run(this);
    if (!message.empty()) {
        Napi::Error error = Napi::Error::New(env, message);
        if (call.code != 0) error.Value().Set("code", Napi::Number::New(env, call.code));
        error.ThrowAsJavaScriptException();
        return env.Undefined();
    }
    return call.result(env);
}

Napi::Value EmbedModel::Truncate(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    int32_t position = 0;
    if (disposed || !loaded) {
        Napi::Error::New(env, disposed ? "the model is disposed" : "the model is not loaded").ThrowAsJavaScriptException();
    } else if (!integerIn(info.Length() > 0 ? info[0] : env.Undefined(), 0, contextSize, position)) {
        Napi::RangeError::New(env, "truncate(position): an integer from 0 to the context size").ThrowAsJavaScriptException();
    } else if (!mutex.try_lock()) {
        // Never block the main thread on a decode: the caller orders its calls (embed-decoder.ts does).
        Napi::Error::New(env, "truncate() during a decode: await the decode first").ThrowAsJavaScriptException();
    } else {
        std::lock_guard<std::mutex> lock(mutex, std::adopt_lock);
        llama_memory_seq_rm(llama_get_memory(ctx), 0, position, -1);
    }
    return env.Undefined();
}

Napi::Value EmbedModel::Dispose(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    disposed = true;
    loaded = false;
    return (new DisposeWorker(env, this))->Start();
}

}  // namespace

void lserveEmbedDecodeInit(Napi::Object exports) {
    exports.Set("LserveEmbedModel", EmbedModel::Define(exports.Env()));
}
