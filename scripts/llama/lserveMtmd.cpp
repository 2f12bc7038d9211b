// lserve's binding of llama.cpp's multimodal library (libmtmd: tools/mtmd of the llama.cpp source
// node-llama-cpp bundles), compiled into the threadpool addon beside node-llama-cpp's own classes so
// that it reaches the loaded model's llama_model and a context's llama_context
// (src/runtimes/llama/mtmd.ts drives it; threadpool-addon.ts builds it).
//
//   const projector = new AddonMtmd(addonModel)
//   projector.load(mmprojPath, threads)          -> Promise<{ vision, audio, audioSampleRate }>
//   projector.tokenize(media, id)                -> Promise<{ handle, chunks }>
//       media: { width, height, rgb: Uint8Array } or { samples: Float32Array } (mono, audioSampleRate)
//       chunks: [{ type: 'text', tokens: Uint32Array } | { type: 'image' | 'audio', nTokens, nPos }]
//   projector.embed(handle, chunk)               -> Promise<Float32Array>   (the projector's output alone)
//   projector.eval(addonContext, handle, chunk, sequenceId, nPast)
//                                                -> Promise<{ nPast, encodeMs, decodeMs }>
//   projector.release(handle)
//   projector.dispose()                          -> Promise<void>
//
// Everything that computes runs on a worker thread. One mutex serialises the mtmd_context: its
// encoder writes one shared output buffer. eval() decodes into the llama_context: the caller holds
// node-llama-cpp's lock on that context, so no batch of it is decoded or sampled meanwhile.
#include <chrono>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "napi.h"
#include "llama.h"
#include "mtmd.h"
#include "mtmd-helper.h"

#include "AddonModel.h"
#include "AddonContext.h"
#include "globals/addonLog.h"
#include "lserveMtmd.h"

namespace {

struct Media {
    mtmd_input_chunks* chunks;
    explicit Media(mtmd_input_chunks* chunks) : chunks(chunks) {}
    ~Media() { mtmd_input_chunks_free(chunks); }
};

double nowMs() {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

class AddonMtmd : public Napi::ObjectWrap<AddonMtmd> {
    public:
        AddonModel* model = nullptr;
        mtmd_context* mctx = nullptr;
        std::mutex mutex;
        // Handles are only touched on the JS thread; a worker holds its own reference to the media.
        std::map<int32_t, std::shared_ptr<Media>> media;
        int32_t nextHandle = 1;
        bool disposed = false;

        explicit AddonMtmd(const Napi::CallbackInfo& info) : Napi::ObjectWrap<AddonMtmd>(info) {
            model = Napi::ObjectWrap<AddonModel>::Unwrap(info[0].As<Napi::Object>());
            model->Ref();
        }

        ~AddonMtmd() {
            media.clear();
            if (mctx != nullptr) mtmd_free(mctx);
            model->Unref();
        }

        std::shared_ptr<Media> find(const Napi::Value& handle) {
            auto it = media.find(handle.As<Napi::Number>().Int32Value());
            return it == media.end() ? nullptr : it->second;
        }

        bool usable(Napi::Env env) {
            if (mctx != nullptr && !disposed) return true;
            Napi::Error::New(env, disposed ? "the projector was disposed" : "the projector is not loaded").ThrowAsJavaScriptException();
            return false;
        }

        Napi::Value Load(const Napi::CallbackInfo& info);
        Napi::Value Tokenize(const Napi::CallbackInfo& info);
        Napi::Value Embed(const Napi::CallbackInfo& info);
        Napi::Value Eval(const Napi::CallbackInfo& info);
        Napi::Value Dispose(const Napi::CallbackInfo& info);

        Napi::Value Release(const Napi::CallbackInfo& info) {
            media.erase(info[0].As<Napi::Number>().Int32Value());
            return info.Env().Undefined();
        }

        static void init(Napi::Object exports) {
            exports.Set("AddonMtmd", DefineClass(exports.Env(), "AddonMtmd", {
                InstanceMethod("load", &AddonMtmd::Load),
                InstanceMethod("tokenize", &AddonMtmd::Tokenize),
                InstanceMethod("embed", &AddonMtmd::Embed),
                InstanceMethod("eval", &AddonMtmd::Eval),
                InstanceMethod("release", &AddonMtmd::Release),
                InstanceMethod("dispose", &AddonMtmd::Dispose),
            }));
        }
};

/** A worker that keeps the projector (and whatever else it names) alive until it settles a promise. */
class ProjectorWorker : public Napi::AsyncWorker {
    public:
        AddonMtmd* projector;
        Napi::Promise::Deferred deferred;

        ProjectorWorker(Napi::Env env, AddonMtmd* projector, const char* name)
            : Napi::AsyncWorker(env, name), projector(projector), deferred(Napi::Promise::Deferred::New(env)) {
            projector->Ref();
        }
        ~ProjectorWorker() { projector->Unref(); }

        Napi::Promise queue() {
            auto promise = deferred.Promise();
            Queue();
            return promise;
        }

    protected:
        void OnError(const Napi::Error& error) override { deferred.Reject(error.Value()); }
};

class LoadWorker : public ProjectorWorker {
    public:
        std::string path;
        int threads;
        LoadWorker(Napi::Env env, AddonMtmd* projector, std::string path, int threads)
            : ProjectorWorker(env, projector, "lserveMtmdLoad"), path(std::move(path)), threads(threads) {}

    protected:
        void Execute() override {
            auto params = mtmd_context_params_default();
            params.use_gpu = false; // the addon links the CPU-only libraries
            params.n_threads = threads;
            params.print_timings = false;
            mtmd_context* mctx = nullptr;
            try {
                mctx = mtmd_init_from_file(path.c_str(), projector->model->model, params);
            } catch (const std::exception& e) {
                return SetError(std::string("cannot load the projector: ") + e.what());
            }
            if (mctx == nullptr) return SetError("cannot load the projector (llama.cpp's log says why)");
            std::lock_guard<std::mutex> lock(projector->mutex);
            projector->mctx = mctx;
        }
        void OnOK() override {
            auto env = Env();
            auto caps = Napi::Object::New(env);
            caps.Set("vision", Napi::Boolean::New(env, mtmd_support_vision(projector->mctx)));
            caps.Set("audio", Napi::Boolean::New(env, mtmd_support_audio(projector->mctx)));
            caps.Set("audioSampleRate", Napi::Number::New(env, mtmd_get_audio_sample_rate(projector->mctx)));
            deferred.Resolve(caps);
        }
};

class TokenizeWorker : public ProjectorWorker {
    public:
        Napi::Reference<Napi::Value> keep; // the JS buffer read on the worker thread
        const void* data;
        size_t size;
        uint32_t width, height;
        bool audio;
        std::string id;
        mtmd_input_chunks* chunks = nullptr;

        TokenizeWorker(Napi::Env env, AddonMtmd* projector, Napi::TypedArray array, uint32_t width, uint32_t height, bool audio, std::string id)
            : ProjectorWorker(env, projector, "lserveMtmdTokenize"), keep(Napi::Persistent(array.As<Napi::Value>())),
              data(static_cast<const uint8_t*>(array.ArrayBuffer().Data()) + array.ByteOffset()), size(array.ByteLength()),
              width(width), height(height), audio(audio), id(std::move(id)) {}
        ~TokenizeWorker() {
            if (chunks != nullptr) mtmd_input_chunks_free(chunks);
        }

    protected:
        void Execute() override {
            mtmd_bitmap* bitmap = audio ? mtmd_bitmap_init_from_audio(size / sizeof(float), static_cast<const float*>(data))
                                        : mtmd_bitmap_init(width, height, static_cast<const unsigned char*>(data));
            if (bitmap == nullptr) return SetError("libmtmd refused the media");
            mtmd_bitmap_set_id(bitmap, id.c_str());
            // The marker alone: the text around the media is tokenized by node-llama-cpp, under its own rules.
            const char* marker = mtmd_default_marker();
            mtmd_input_text text = { marker, strlen(marker), false, true };
            const mtmd_bitmap* bitmaps[] = { bitmap };
            chunks = mtmd_input_chunks_init();
            int32_t r;
            {
                std::lock_guard<std::mutex> lock(projector->mutex);
                r = projector->mctx == nullptr ? -1 : mtmd_tokenize(projector->mctx, chunks, &text, bitmaps, 1);
            }
            mtmd_bitmap_free(bitmap);
            if (r != 0) SetError(r == 1 ? "this model's projector does not take this kind of media" : "libmtmd could not prepare the media");
        }
        void OnOK() override {
            auto env = Env();
            auto list = Napi::Array::New(env);
            for (size_t i = 0; i < mtmd_input_chunks_size(chunks); i++) {
                auto chunk = mtmd_input_chunks_get(chunks, i);
                auto item = Napi::Object::New(env);
                auto type = mtmd_input_chunk_get_type(chunk);
                if (type == MTMD_INPUT_CHUNK_TYPE_TEXT) {
                    size_t n;
                    const llama_token* tokens = mtmd_input_chunk_get_tokens_text(chunk, &n);
                    auto array = Napi::Uint32Array::New(env, n);
                    for (size_t j = 0; j < n; j++) array[j] = tokens[j];
                    item.Set("type", "text");
                    item.Set("tokens", array);
                } else {
                    item.Set("type", type == MTMD_INPUT_CHUNK_TYPE_IMAGE ? "image" : "audio");
                    item.Set("nTokens", Napi::Number::New(env, mtmd_input_chunk_get_n_tokens(chunk)));
                    item.Set("nPos", Napi::Number::New(env, mtmd_input_chunk_get_n_pos(chunk)));
                }
                list.Set(i, item);
            }
            const int32_t handle = projector->nextHandle++;
            projector->media[handle] = std::make_shared<Media>(chunks);
            chunks = nullptr;
            auto result = Napi::Object::New(env);
            result.Set("handle", handle);
            result.Set("chunks", list);
            deferred.Resolve(result);
        }
};

/** Encodes one media chunk; with a context, also decodes its embeddings into a sequence of it. */
class EncodeWorker : public ProjectorWorker {
    public:
        std::shared_ptr<Media> media;
        const mtmd_input_chunk* chunk;
        AddonContext* context; // nullptr: embed() (the embeddings are returned)
        llama_seq_id sequenceId = 0;
        llama_pos nPast = 0, newNPast = 0;
        std::vector<float> embeddings;
        double encodeMs = 0, decodeMs = 0;

        EncodeWorker(Napi::Env env, AddonMtmd* projector, std::shared_ptr<Media> media, const mtmd_input_chunk* chunk, AddonContext* context)
            : ProjectorWorker(env, projector, "lserveMtmdEncode"), media(std::move(media)), chunk(chunk), context(context) {
            if (context != nullptr) context->Ref();
        }
        ~EncodeWorker() {
            if (context != nullptr) context->Unref();
        }

    protected:
        void Execute() override {
            std::lock_guard<std::mutex> lock(projector->mutex);
            if (projector->mctx == nullptr) return SetError("the projector was disposed");
            if (context != nullptr) {
                if (context->ctx == nullptr) return SetError("the context was disposed");
                // The context's threadpool may still spin after its last decode: it would take the
                // cores from the encoder's own threads. Its next decode resumes it.
                if (context->threadpool != nullptr && context->threadpoolPause != nullptr) context->threadpoolPause(context->threadpool);
            }
            const double start = nowMs();
            if (mtmd_encode_chunk(projector->mctx, chunk) != 0) return SetError("the projector could not encode the media");
            encodeMs = nowMs() - start;
            float* output = mtmd_get_output_embd(projector->mctx);
            if (context == nullptr) {
                const size_t n = mtmd_input_chunk_get_n_tokens(chunk) * (size_t) llama_model_n_embd_inp(projector->model->model);
                embeddings.assign(output, output + n);
                return;
            }
            const int32_t r = mtmd_helper_decode_image_chunk(projector->mctx, context->ctx, chunk, output, nPast, sequenceId,
                                                             (int32_t) llama_n_batch(context->ctx), &newNPast, nullptr, nullptr);
            context->pauseThreadpoolUnlessPolling();
            if (r != 0) return SetError(r == 1 ? "could not find room in the context for the media" : "the media's embeddings could not be decoded");
            decodeMs = nowMs() - start - encodeMs;
        }
        void OnOK() override {
            auto env = Env();
            if (context == nullptr) {
                auto array = Napi::Float32Array::New(env, embeddings.size());
                std::memcpy(array.Data(), embeddings.data(), embeddings.size() * sizeof(float));
                return deferred.Resolve(array);
            }
            auto result = Napi::Object::New(env);
            result.Set("nPast", Napi::Number::New(env, newNPast));
            result.Set("encodeMs", Napi::Number::New(env, encodeMs));
            result.Set("decodeMs", Napi::Number::New(env, decodeMs));
            deferred.Resolve(result);
        }
};

class DisposeWorker : public ProjectorWorker {
    public:
        explicit DisposeWorker(Napi::Env env, AddonMtmd* projector) : ProjectorWorker(env, projector, "lserveMtmdDispose") {}

    protected:
        void Execute() override {
            // Waits for work in flight: it holds the mutex.
            std::lock_guard<std::mutex> lock(projector->mutex);
            if (projector->mctx != nullptr) mtmd_free(projector->mctx);
            projector->mctx = nullptr;
        }
        void OnOK() override { deferred.Resolve(Env().Undefined()); }
};

Napi::Value AddonMtmd::Load(const Napi::CallbackInfo& info) {
    if (mctx != nullptr || disposed) {
        Napi::Error::New(info.Env(), "the projector is already loaded").ThrowAsJavaScriptException();
        return info.Env().Undefined();
    }
    // libmtmd logs through node-llama-cpp's own callback: its level filter and JS logger apply.
    mtmd_helper_log_set(addonLlamaCppLogCallback, nullptr);
    return (new LoadWorker(info.Env(), this, info[0].As<Napi::String>().Utf8Value(), info[1].As<Napi::Number>().Int32Value()))->queue();
}

Napi::Value AddonMtmd::Tokenize(const Napi::CallbackInfo& info) {
    auto env = info.Env();
    if (!usable(env)) return env.Undefined();
    auto item = info[0].As<Napi::Object>();
    const std::string id = info[1].As<Napi::String>().Utf8Value();
    if (item.Has("samples")) {
        auto samples = item.Get("samples").As<Napi::Float32Array>();
        return (new TokenizeWorker(env, this, samples, 0, 0, true, id))->queue();
    }
    auto rgb = item.Get("rgb").As<Napi::Uint8Array>();
    const uint32_t width = item.Get("width").As<Napi::Number>().Uint32Value();
    const uint32_t height = item.Get("height").As<Napi::Number>().Uint32Value();
    if (width == 0 || height == 0 || rgb.ByteLength() != (size_t) width * height * 3) {
        Napi::Error::New(env, "an image must be width × height × 3 bytes of RGB").ThrowAsJavaScriptException();
        return env.Undefined();
    }
    return (new TokenizeWorker(env, this, rgb, width, height, false, id))->queue();
}

Napi::Value AddonMtmd::Embed(const Napi::CallbackInfo& info) {
    auto env = info.Env();
    if (!usable(env)) return env.Undefined();
    auto found = find(info[0]);
    const size_t index = info[1].As<Napi::Number>().Uint32Value();
    if (found == nullptr || index >= mtmd_input_chunks_size(found->chunks)) {
        Napi::Error::New(env, "no such media chunk").ThrowAsJavaScriptException();
        return env.Undefined();
    }
    return (new EncodeWorker(env, this, found, mtmd_input_chunks_get(found->chunks, index), nullptr))->queue();
}

Napi::Value AddonMtmd::Eval(const Napi::CallbackInfo& info) {
    auto env = info.Env();
    if (!usable(env)) return env.Undefined();
    AddonContext* context = Napi::ObjectWrap<AddonContext>::Unwrap(info[0].As<Napi::Object>());
    auto found = find(info[1]);
    const size_t index = info[2].As<Napi::Number>().Uint32Value();
    if (found == nullptr || index >= mtmd_input_chunks_size(found->chunks) || context->ctx == nullptr) {
        Napi::Error::New(env, "no such media chunk, or the context is not loaded").ThrowAsJavaScriptException();
        return env.Undefined();
    }
    auto worker = new EncodeWorker(env, this, found, mtmd_input_chunks_get(found->chunks, index), context);
    worker->sequenceId = info[3].As<Napi::Number>().Int32Value();
    worker->nPast = info[4].As<Napi::Number>().Int32Value();
    return worker->queue();
}

Napi::Value AddonMtmd::Dispose(const Napi::CallbackInfo& info) {
    disposed = true;
    media.clear();
    return (new DisposeWorker(info.Env(), this))->queue();
}

}  // namespace

void lserveMtmdInit(Napi::Object exports) {
    AddonMtmd::init(exports);
}
