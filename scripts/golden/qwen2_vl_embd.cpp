// Writes the embeddings libmtmd hands the language model for an image or audio clip, for
// qwen2_vl_check.py and qwen2_audio_check.py --embd-tool to compare with the reference's
// (transformers') embeddings. Built against a llama.cpp build tree:
//
//   S=/path/to/llama.cpp B=$S/build/bin
//   g++ -O1 -std=c++17 scripts/golden/qwen2_vl_embd.cpp -I$S/include -I$S/ggml/include -I$S/tools/mtmd \
//       -L$B -lmtmd -lllama -lggml -lggml-base -Wl,-rpath,$B -o /tmp/qwen2_vl_embd
//
// Usage: qwen2_vl_embd MODEL.gguf MMPROJ.gguf MEDIA OUT.f32  (prints "<tokens> <n_embd>")
#include "llama.h"
#include "mtmd.h"
#include "mtmd-helper.h"

#include <cstdio>
#include <string>

int main(int argc, char ** argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: %s MODEL.gguf MMPROJ.gguf MEDIA OUT.f32\n", argv[0]);
        return 2;
    }
    llama_log_set([](ggml_log_level, const char *, void *) {}, nullptr);
    mtmd_helper_log_set([](ggml_log_level, const char *, void *) {}, nullptr);
    llama_backend_init();
    llama_model * model = llama_model_load_from_file(argv[1], llama_model_default_params());
    if (!model) { fprintf(stderr, "cannot load %s\n", argv[1]); return 1; }

    mtmd_context_params params = mtmd_context_params_default();
    params.use_gpu = false;
    params.n_threads = 1;
    params.warmup = false;
    params.print_timings = false;
    mtmd_context * ctx = mtmd_init_from_file(argv[2], model, params);
    if (!ctx) { fprintf(stderr, "cannot load %s\n", argv[2]); return 1; }

    mtmd_bitmap * bitmap = mtmd_helper_bitmap_init_from_file(ctx, argv[3], false, mtmd_helper_init_opt_default()).bitmap;
    if (!bitmap) { fprintf(stderr, "cannot read %s\n", argv[3]); return 1; }
    const std::string marker = mtmd_default_marker();
    const mtmd_input_text text = { marker.c_str(), marker.size(), false, true };
    const mtmd_bitmap * bitmaps[] = { bitmap };
    mtmd_input_chunks * chunks = mtmd_input_chunks_init();
    if (mtmd_tokenize(ctx, chunks, &text, bitmaps, 1) != 0) { fprintf(stderr, "tokenize failed\n"); return 1; }

    for (size_t i = 0; i < mtmd_input_chunks_size(chunks); i++) {
        const mtmd_input_chunk * chunk = mtmd_input_chunks_get(chunks, i);
        if (mtmd_input_chunk_get_type(chunk) == MTMD_INPUT_CHUNK_TYPE_TEXT) continue;
        if (mtmd_encode_chunk(ctx, chunk) != 0) { fprintf(stderr, "encode failed\n"); return 1; }
        const size_t n_tokens = mtmd_input_chunk_get_n_tokens(chunk);
        const int n_embd = llama_model_n_embd_inp(model);
        FILE * out = fopen(argv[4], "wb");
        if (!out || fwrite(mtmd_get_output_embd(ctx), sizeof(float), n_tokens * n_embd, out) != n_tokens * n_embd) return 1;
        fclose(out);
        printf("%zu %d\n", n_tokens, n_embd);
        return 0;
    }
    fprintf(stderr, "no image or audio chunk\n");
    return 1;
}
