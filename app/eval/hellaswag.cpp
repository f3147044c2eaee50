// app/eval/hellaswag.cpp — HellaSwag items, rows and scoring (see hellaswag.hpp).
#include "app/eval/hellaswag.hpp"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "data/token_dataset.hpp"  // sha256_hex

#ifndef LLMTRAIN_HELLASWAG_DEFAULT
#define LLMTRAIN_HELLASWAG_DEFAULT "data_files/hellaswag/hellaswag_val.txt.gz"
#endif

namespace llmtrain {

namespace {

/// The whole file, decompressed when it is gzip (zlib reads plain files as they are).
std::string read_all(const std::string& path) {
    gzFile f = gzopen(path.c_str(), "rb");
    if (f == nullptr)
        throw HellaSwagError("hellaswag file '" + path + "': cannot open: " +
                             (errno ? std::strerror(errno) : "out of memory"));
    std::string text;
    char buf[1 << 16];
    while (true) {
        const int n = gzread(f, buf, sizeof buf);
        if (n > 0) text.append(buf, size_t(n));
        if (n < int(sizeof buf)) break;
    }
    int code = Z_OK;
    const char* msg = gzerror(f, &code);
    const std::string why = code != Z_OK && code != Z_STREAM_END ? std::string(msg) : "";
    gzclose(f);
    if (!why.empty())
        throw HellaSwagError("hellaswag file '" + path + "': damaged or truncated gzip stream after " +
                             std::to_string(text.size()) + " bytes: " + why);
    return text;
}

std::string item_where(size_t index, size_t line, const std::string& file) {
    return "hellaswag item " + std::to_string(index) + " (line " + std::to_string(line) + " of '" + file + "')";
}

}  // namespace

std::string hellaswag_default_path() { return LLMTRAIN_HELLASWAG_DEFAULT; }

std::vector<HellaSwagItem> read_hellaswag(const std::string& path, const std::string& expect_sha256,
                                          size_t max_items) {
    const std::string text = read_all(path);
    if (!expect_sha256.empty()) {
        const std::string got = sha256_hex(text);
        if (got != expect_sha256)
            throw HellaSwagError("hellaswag file '" + path + "': SHA-256 of its " + std::to_string(text.size()) +
                                 " decompressed bytes is " + got + ", expected " + expect_sha256 +
                                 " (a damaged or different copy; data_files/hellaswag/README.md)");
    }
    std::vector<std::string> lines;
    for (size_t pos = 0; pos < text.size();) {
        size_t end = text.find('\n', pos);
        if (end == std::string::npos) end = text.size();
        std::string l = text.substr(pos, end - pos);
        if (!l.empty() && l.back() == '\r') l.pop_back();
        lines.push_back(std::move(l));
        pos = end + 1;
    }
    if (lines.empty()) throw HellaSwagError("hellaswag file '" + path + "': no items");
    if (lines.size() % 6 != 0)
        throw HellaSwagError("hellaswag file '" + path + "': " + std::to_string(lines.size()) +
                             " lines, not six per item (item " + std::to_string(lines.size() / 6) +
                             ", from line " + std::to_string(lines.size() / 6 * 6 + 1) + ", is incomplete)");
    size_t n = lines.size() / 6;
    if (max_items > 0) n = std::min(n, max_items);
    std::vector<HellaSwagItem> items(n);
    for (size_t i = 0; i < n; ++i) {
        const size_t l0 = 6 * i;
        HellaSwagItem& it = items[i];
        it.line = l0 + 1;
        it.context = lines[l0];
        const std::string& lab = lines[l0 + 1];
        if (lab.size() != 1 || lab[0] < '0' || lab[0] > '3')
            throw HellaSwagError(item_where(i, l0 + 1, path) + ": line " + std::to_string(l0 + 2) +
                                 " holds the label \"" + lab + "\", expected 0, 1, 2 or 3");
        it.label = lab[0] - '0';
        if (it.context.empty()) throw HellaSwagError(item_where(i, l0 + 1, path) + ": empty context");
        for (int e = 0; e < 4; ++e) {
            it.endings[size_t(e)] = lines[l0 + 2 + size_t(e)];
            if (it.endings[size_t(e)].empty())
                throw HellaSwagError(item_where(i, l0 + 1, path) + ": ending " + std::to_string(e) + " (line " +
                                     std::to_string(l0 + 3 + size_t(e)) + ") is empty");
        }
    }
    return items;
}

HellaSwagRows encode_hellaswag(const HellaSwagItem& item, const Tokenizer& tok, int max_len, size_t index,
                               const std::string& file) {
    HellaSwagRows r;
    r.label = item.label;
    const std::vector<int32_t> ctx = tok.encode(item.context);
    if (ctx.empty()) throw HellaSwagError(item_where(index, item.line, file) + ": the context encodes to no tokens");
    r.ctx_len = int(ctx.size());
    for (size_t e = 0; e < 4; ++e) {
        const std::vector<int32_t> end = tok.encode(" " + item.endings[e]);
        if (end.empty())
            throw HellaSwagError(item_where(index, item.line, file) + ": ending " + std::to_string(e) +
                                 " encodes to no tokens");
        std::vector<int32_t>& row = r.tokens[e];
        row = ctx;
        row.insert(row.end(), end.begin(), end.end());
        if (int(row.size()) > max_len)
            throw HellaSwagError(item_where(index, item.line, file) + ": context + ending " + std::to_string(e) +
                                 " is " + std::to_string(row.size()) + " tokens (" + std::to_string(ctx.size()) +
                                 " + " + std::to_string(end.size()) + "), longer than the model's seq_len " +
                                 std::to_string(max_len) + " (rows are never cut)");
    }
    return r;
}

HellaSwagChoice choose_ending(const std::array<double, 4>& sum, const std::array<int, 4>& n_tokens, int label) {
    HellaSwagChoice c;
    c.sum = sum;
    c.n_tokens = n_tokens;
    c.label = label;
    for (int e = 0; e < 4; ++e) {
        if (n_tokens[size_t(e)] < 1)
            throw std::invalid_argument("choose_ending: ending " + std::to_string(e) + " has no tokens");
        if (sum[size_t(e)] < sum[size_t(c.pred)]) c.pred = e;
        if (sum[size_t(e)] / n_tokens[size_t(e)] < sum[size_t(c.pred_norm)] / n_tokens[size_t(c.pred_norm)])
            c.pred_norm = e;
    }
    return c;
}

size_t hellaswag_forwards(size_t n_items, int B) { return (4 * n_items + size_t(B) - 1) / size_t(B); }

std::vector<HellaSwagChoice> score_hellaswag(const std::vector<HellaSwagRows>& items, int B, int T,
                                             size_t min_forwards, const RowForward& forward) {
    const size_t n_rows = 4 * items.size();
    const size_t forwards = std::max(min_forwards, hellaswag_forwards(items.size(), B));
    std::vector<int32_t> in(size_t(B) * T), tgt(size_t(B) * T);
    std::vector<float> losses(size_t(B) * T);
    std::vector<std::array<double, 4>> sums(items.size());
    bool holds = true;
    for (size_t f = 0; f < forwards; ++f) {
        std::fill(in.begin(), in.end(), 0);
        std::fill(tgt.begin(), tgt.end(), 0);
        for (int b = 0; b < B; ++b) {
            const size_t r = f * size_t(B) + size_t(b);
            if (r >= n_rows) break;
            const std::vector<int32_t>& row = items[r / 4].tokens[r % 4];
            // Position p reads row[p] and is scored against row[p + 1].
            std::copy(row.begin(), row.end(), in.begin() + size_t(b) * T);
            std::copy(row.begin() + 1, row.end(), tgt.begin() + size_t(b) * T);
        }
        holds = forward(in.data(), tgt.data(), losses.data());
        if (!holds) continue;
        for (int b = 0; b < B; ++b) {
            const size_t r = f * size_t(B) + size_t(b);
            if (r >= n_rows) break;
            const HellaSwagRows& it = items[r / 4];
            const int len = int(it.tokens[r % 4].size());
            double s = 0;  // the ending's tokens are row[ctx_len, len), predicted at positions [ctx_len - 1, len - 1)
            for (int p = it.ctx_len - 1; p < len - 1; ++p) s += losses[size_t(b) * T + size_t(p)];
            sums[r / 4][r % 4] = s;
        }
    }
    if (!holds) return {};
    std::vector<HellaSwagChoice> out;
    out.reserve(items.size());
    for (size_t i = 0; i < items.size(); ++i) {
        std::array<int, 4> n{};
        for (size_t e = 0; e < 4; ++e) n[e] = int(items[i].tokens[e].size()) - items[i].ctx_len;
        out.push_back(choose_ending(sums[i], n, items[i].label));
    }
    return out;
}

HellaSwagCounts count_hellaswag(const std::vector<HellaSwagChoice>& choices) {
    HellaSwagCounts c;
    for (const HellaSwagChoice& x : choices) {
        c.items += 1;
        c.correct += x.pred == x.label ? 1 : 0;
        c.correct_norm += x.pred_norm == x.label ? 1 : 0;
    }
    return c;
}

}  // namespace llmtrain
