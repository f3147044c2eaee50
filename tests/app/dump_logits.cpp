// tests/app/dump_logits.cpp — llmtrain's logits for a token sequence, for interop_test.py to compare
// against its own PyTorch GPT-2 running on the exported HuggingFace weights.
//
// Usage: dump_logits CHECKPOINT_DIR TOKENS OUT
//   TOKENS: n int32 token ids (n <= the model's seq_len); OUT receives (n, vocab_size) fp32 logits,
//   row i = the logits after tokens[0..i], from the CPU backend (fp32) with the checkpoint's weights.
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <vector>

#include "app/checkpoint/checkpoint.hpp"
#include "app/interop/checkpoint_model.hpp"
#include "model/backend.hpp"
#include "model/gpt.hpp"

using namespace llmtrain;

int main(int argc, char** argv) {
    if (argc != 4) {
        std::fprintf(stderr, "usage: dump_logits CHECKPOINT_DIR TOKENS OUT\n");
        return 2;
    }
    try {
        std::ifstream tf(argv[2], std::ios::binary);
        std::vector<char> bytes((std::istreambuf_iterator<char>(tf)), std::istreambuf_iterator<char>());
        std::vector<int> tokens(bytes.size() / 4);
        std::memcpy(tokens.data(), bytes.data(), tokens.size() * 4);
        const GPTConfig g = checkpoint_model_config(argv[1], read_train_state(argv[1]));  // Llama too
        auto ops = make_backend("cpu", "fp32");
        Allocator alloc(*ops);
        GPTOptions o;
        o.B = 1;
        o.T = int(tokens.size());
        GPT gpt(g, o, alloc);
        std::vector<float> params(gpt.layout().total_numel());
        read_params(argv[1], gpt.layout(), params.data());
        gpt.store().load_params(params.data());
        std::ofstream out(argv[3], std::ios::binary);
        for (int pos = 0; pos < o.T; ++pos) {
            const std::vector<float> l = gpt.logits_at(tokens.data(), pos);
            out.write(reinterpret_cast<const char*>(l.data()), std::streamsize(l.size() * 4));
        }
        if (!out) throw std::runtime_error(std::string(argv[3]) + ": write failed");
    } catch (const std::exception& e) {
        std::fprintf(stderr, "dump_logits: %s\n", e.what());
        return 1;
    }
    return 0;
}
