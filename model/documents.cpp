// model/documents.cpp — document boundaries in packed windows (see documents.hpp).
#include "model/documents.hpp"

#include <algorithm>
#include <cstddef>

namespace llmtrain {

void document_starts(const int32_t* tokens, int eos, int B, int T, int32_t* doc_start, int32_t* pos) {
    for (int b = 0; b < B; ++b) {
        const size_t row = static_cast<size_t>(b) * T;
        int32_t start = 0;
        for (int t = 0; t < T; ++t) {
            if (t > 0 && eos >= 0 && tokens[row + t - 1] == eos) start = t;
            doc_start[row + t] = start;
            if (pos != nullptr) pos[row + t] = t - start;
        }
    }
}

BlockCounts document_block_counts(const int32_t* doc_start, int B, int T, int rows, int keys) {
    BlockCounts n;
    for (int b = 0; b < B; ++b) {
        for (int i0 = 0; i0 < T; i0 += rows) {
            const int last = std::min(T, i0 + rows) - 1;          // the block's last query row
            const uint64_t diag = static_cast<uint64_t>(last / keys);  // its last key block
            n.causal += diag + 1;
            n.visited += diag + 1 - static_cast<uint64_t>(doc_start[static_cast<size_t>(b) * T + i0] / keys);
        }
    }
    return n;
}

BlockCounts document_backward_counts(const int32_t* doc_start, int B, int T, int keys, int rows) {
    BlockCounts n;
    for (int b = 0; b < B; ++b) {
        const int32_t* d = doc_start + static_cast<size_t>(b) * T;
        for (int j0 = 0; j0 < T; j0 += keys) {
            const int32_t j_last = std::min(T, j0 + keys) - 1;
            const int q_end = static_cast<int>(std::upper_bound(d + j0, d + T, j_last) - d);  // first doc > j_last
            n.causal += static_cast<uint64_t>((T - j0 + rows - 1) / rows);
            n.visited += static_cast<uint64_t>((q_end - j0 + rows - 1) / rows);
        }
    }
    return n;
}

}  // namespace llmtrain
