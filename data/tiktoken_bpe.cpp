// data/tiktoken_bpe.cpp — byte-level BPE of the tiktoken family (see tiktoken_bpe.hpp): PCRE2
// splits, our merge loop merges.
//
// Split patterns are given in js-tiktoken's ECMAScript notation and compiled with PCRE2_UTF |
// PCRE2_UCP after \s and \S are written out as ECMAScript's white space (pcre2_pattern_from_js):
// the reference encoder is JavaScript's, and PCRE2's \s differs from it at three code points
// (PCRE2 counts U+0085 and U+180E as space, JavaScript counts U+FEFF and not those two).
// \p{..} are PCRE2's Unicode tables (Unicode 14 in PCRE2 10.42).
//
// The merge is the one tiktoken and js-tiktoken run. Pieces of up to 32 bytes (nearly all) use its
// array form with a linear scan; longer ones a heap, so that a piece of n bytes costs O(n log n)
// instead of O(n^2) (a run of a million spaces is one piece): parts form a linked list; the heap
// holds (rank of part + next part, start of part); the smallest rank is merged first and equal
// ranks leftmost first, exactly the pair the linear scan picks; entries made stale by an earlier
// merge are recognized by the part ends recorded with them and skipped.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "data/tiktoken_bpe.hpp"

#include <openssl/evp.h>
#include <pcre2.h>

#include <algorithm>
#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "data/token_dataset.hpp"

namespace llmtrain {

namespace {

// ECMAScript's \s: WhiteSpace (TAB VT FF SP NBSP ZWNBSP and category Zs) + LineTerminator (LF CR LS PS).
constexpr const char* kJsSpace =
    "\\t\\n\\x0b\\f\\r \\x{a0}\\x{1680}\\x{2000}-\\x{200a}\\x{2028}\\x{2029}\\x{202f}\\x{205f}\\x{3000}\\x{feff}";

std::string pcre2_message(int code) {
    PCRE2_UCHAR buf[256];
    int n = pcre2_get_error_message(code, buf, sizeof buf);
    return n < 0 ? "PCRE2 error " + std::to_string(code) : std::string(reinterpret_cast<char*>(buf));
}

// Hash map from token bytes to rank, looked up by string_view without copying.
struct SvHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using RankMap = std::unordered_map<std::string, int32_t, SvHash, std::equal_to<>>;

}  // namespace

std::string pcre2_pattern_from_js(const std::string& js) {
    std::string out;
    bool in_class = false;
    for (size_t i = 0; i < js.size(); ++i) {
        const char c = js[i];
        if (c == '\\' && i + 1 < js.size()) {
            const char e = js[++i];
            if (e == 's')
                out += in_class ? std::string(kJsSpace) : "[" + std::string(kJsSpace) + "]";
            else if (e == 'S' && !in_class)
                out += "[^" + std::string(kJsSpace) + "]";
            else if (e == 'S')
                throw DataError("split pattern: \\S inside a character class is not supported: " + js);
            else
                out += {c, e};
            continue;
        }
        if (c == '[' && !in_class) in_class = true;
        else if (c == ']' && in_class) in_class = false;
        out += c;
    }
    return out;
}

struct TiktokenBpe::Impl {
    std::string ranks_bytes;
    RankMap ranks;
    std::vector<std::string> tokens;  // rank -> bytes
    std::vector<SpecialToken> specials;
    std::unordered_map<int32_t, std::string> special_text;  // id -> text
    std::string pattern;  // as compiled
    pcre2_code* code = nullptr;

    int32_t rank_of(std::string_view s) const {
        auto it = ranks.find(s);
        return it == ranks.end() ? -1 : it->second;
    }

    static constexpr size_t kShortPiece = 32;

    // The same merge for a piece of at most kShortPiece bytes, without allocating: part boundaries
    // in an array, the rank of each adjacent pair cached, a linear scan for the lowest (strict <
    // keeps the leftmost of equal ranks), the two pairs next to a merge recomputed.
    void merge_short(std::string_view p, std::vector<int32_t>& out) const {
        int bound[kShortPiece + 1];    // part k = bytes [bound[k], bound[k + 1])
        int32_t pair[kShortPiece];     // pair[k]: rank of part k + part k+1, or -1
        int parts = static_cast<int>(p.size());
        for (int k = 0; k <= parts; ++k) bound[k] = k;
        auto rank_pair = [&](int k) {
            return k + 2 <= parts ? rank_of(p.substr(bound[k], bound[k + 2] - bound[k])) : -1;
        };
        for (int k = 0; k + 1 < parts; ++k) pair[k] = rank_pair(k);
        while (parts > 1) {
            int best = -1;
            for (int k = 0; k + 1 < parts; ++k)
                if (pair[k] >= 0 && (best < 0 || pair[k] < pair[best])) best = k;
            if (best < 0) break;
            for (int k = best + 1; k < parts; ++k) bound[k] = bound[k + 1];  // drop the boundary inside
            for (int k = best + 1; k + 1 < parts; ++k) pair[k] = pair[k + 1];
            --parts;
            pair[best] = rank_pair(best);
            if (best > 0) pair[best - 1] = rank_pair(best - 1);
        }
        for (int k = 0; k < parts; ++k) out.push_back(rank_of(p.substr(bound[k], bound[k + 1] - bound[k])));
    }

    // Appends the ids of one pre-tokenized piece (its bytes).
    void merge_piece(std::string_view p, std::vector<int32_t>& out) const {
        if (int32_t r = rank_of(p); r >= 0) {  // whole piece is a token (tiktoken's shortcut, kept for equality)
            out.push_back(r);
            return;
        }
        if (p.size() <= kShortPiece) return merge_short(p, out);
        const int n = static_cast<int>(p.size());
        std::vector<int> end(n), next(n), prev(n);  // part i = bytes [i, end[i]); list links
        for (int i = 0; i < n; ++i) {
            end[i] = i + 1;
            next[i] = i + 1 < n ? i + 1 : -1;
            prev[i] = i - 1;
        }
        struct Entry {
            int32_t rank;
            int start, mid, stop;  // the pair is parts [start, mid) + [mid, stop)
            bool operator>(const Entry& o) const { return rank != o.rank ? rank > o.rank : start > o.start; }
        };
        std::priority_queue<Entry, std::vector<Entry>, std::greater<>> heap;
        auto push = [&](int i) {
            if (i < 0 || next[i] < 0) return;
            const int j = next[i];
            if (int32_t r = rank_of(p.substr(i, end[j] - i)); r >= 0) heap.push({r, i, end[i], end[j]});
        };
        for (int i = 0; i + 1 < n; ++i) push(i);
        while (!heap.empty()) {
            const Entry e = heap.top();
            heap.pop();
            const int i = e.start;  // a part's start never changes: merges absorb the right part
            if (prev[i] == -2 || end[i] != e.mid || end[e.mid] != e.stop) continue;  // stale: i or its neighbour changed
            const int j = e.mid;
            end[i] = end[j];
            next[i] = next[j];
            if (next[j] >= 0) prev[next[j]] = i;
            prev[j] = -2;  // dead
            push(prev[i]);
            push(i);
        }
        for (int i = 0; i >= 0; i = next[i]) out.push_back(rank_of(p.substr(i, end[i] - i)));
    }
};


TiktokenBpe::TiktokenBpe(const std::string& ranks_bytes, const std::string& source, const std::string& js_pattern,
                         std::vector<SpecialToken> specials, int expected_ranks, const std::string& encoding)
    : impl_(std::make_unique<Impl>()) {
    Impl& m = *impl_;
    m.ranks_bytes = ranks_bytes;
    const long limit = expected_ranks > 0 ? expected_ranks : (1L << 30);
    std::vector<char> seen;
    size_t pos = 0, line_no = 0;
    while (pos < ranks_bytes.size()) {
        size_t nl = ranks_bytes.find('\n', pos);
        if (nl == std::string::npos) nl = ranks_bytes.size();
        std::string_view line(ranks_bytes.data() + pos, nl - pos);
        pos = nl + 1;
        ++line_no;
        const std::string where = source + ": line " + std::to_string(line_no);
        const size_t sp = line.find(' ');
        if (sp == std::string_view::npos || sp == 0 || sp % 4 != 0)
            throw DataError(where + ": expected \"<base64 token> <rank>\"");
        std::string b64(line.substr(0, sp));
        std::string bytes(b64.size() / 4 * 3, '\0');
        int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(bytes.data()),
                                reinterpret_cast<const unsigned char*>(b64.data()), static_cast<int>(b64.size()));
        if (n < 0) throw DataError(where + ": '" + b64 + "' is not base64");
        n -= (b64.back() == '=') + (b64[b64.size() - 2] == '=');  // EVP_DecodeBlock counts padding as bytes
        bytes.resize(n);
        const std::string rank_text(line.substr(sp + 1));
        size_t used = 0;
        long rank = -1;
        try {
            rank = std::stol(rank_text, &used);
        } catch (const std::exception&) {
        }
        if (used != rank_text.size() || rank < 0 || rank >= limit ||
            (static_cast<size_t>(rank) < seen.size() && seen[rank]))
            throw DataError(where + ": rank '" + rank_text + "' is not a new integer in [0, " + std::to_string(limit) +
                            ")");
        if (bytes.empty() || !m.ranks.emplace(bytes, static_cast<int32_t>(rank)).second)
            throw DataError(where + ": token '" + b64 + "' is empty or repeated");
        if (static_cast<size_t>(rank) >= seen.size()) {
            seen.resize(rank + 1, 0);
            m.tokens.resize(rank + 1);
        }
        seen[rank] = 1;
        m.tokens[rank] = std::move(bytes);
    }
    if (expected_ranks > 0 && m.ranks.size() != static_cast<size_t>(expected_ranks))
        throw DataError(source + ": holds " + std::to_string(m.ranks.size()) + " ranks, " + encoding + " has " +
                        std::to_string(expected_ranks));
    if (m.ranks.size() != m.tokens.size()) {
        const long missing = std::find(seen.begin(), seen.end(), 0) - seen.begin();
        throw DataError(source + ": ranks are not 0.." + std::to_string(m.tokens.size() - 1) + " without gaps (rank " +
                        std::to_string(missing) + " is missing)");
    }
    for (int b = 0; b < 256; ++b)
        if (m.rank_of(std::string(1, static_cast<char>(b))) < 0)
            throw DataError(source + ": byte " + std::to_string(b) + " has no rank (not a byte-level BPE)");

    std::unordered_set<std::string> texts;
    for (const SpecialToken& s : specials) {
        if (s.text.empty() || !texts.insert(s.text).second)
            throw DataError(source + ": special token '" + s.text + "' is empty or given twice");
        if (s.id < static_cast<int32_t>(m.tokens.size()) || !m.special_text.emplace(s.id, s.text).second)
            throw DataError(source + ": special token '" + s.text + "' has id " + std::to_string(s.id) +
                            ", which is a rank (< " + std::to_string(m.tokens.size()) + ") or another special's");
    }
    m.specials = std::move(specials);

    m.pattern = pcre2_pattern_from_js(js_pattern);
    int err = 0;
    PCRE2_SIZE err_off = 0;
    m.code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(m.pattern.c_str()), PCRE2_ZERO_TERMINATED,
                           PCRE2_UTF | PCRE2_UCP, &err, &err_off, nullptr);
    if (!m.code)
        throw DataError("split pattern " + js_pattern + ": " + pcre2_message(err) + " at offset " +
                        std::to_string(err_off));
    pcre2_jit_compile(m.code, PCRE2_JIT_COMPLETE);  // no JIT on this platform: the interpreter gives the same matches
}

TiktokenBpe::~TiktokenBpe() {
    if (impl_ && impl_->code) pcre2_code_free(impl_->code);
}

void TiktokenBpe::encode(std::string_view text, std::vector<int32_t>& out) const {
    const Impl& m = *impl_;
    std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> md(
        pcre2_match_data_create_from_pattern(m.code, nullptr), &pcre2_match_data_free);
    if (!md) throw std::bad_alloc();
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    const size_t n_before = out.size();
    uint32_t options = 0;  // the first match checks the whole text's UTF-8; the later ones skip it
    for (size_t off = 0; off < text.size(); options = PCRE2_NO_UTF_CHECK) {
        int rc = pcre2_match(m.code, subject, text.size(), off, options, md.get(), nullptr);
        if (rc >= PCRE2_ERROR_UTF8_ERR21 && rc <= PCRE2_ERROR_UTF8_ERR1) {
            out.resize(n_before);
            throw DataError("invalid UTF-8 at byte offset " + std::to_string(pcre2_get_startchar(md.get())) + " (" +
                            pcre2_message(rc) + ")");
        }
        // The family's patterns end in \s+ after alternatives for letters, digits and everything
        // else, so some alternative always matches a non-empty piece here.
        if (rc < 0) throw DataError("split pattern: " + pcre2_message(rc) + " at byte offset " + std::to_string(off));
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
        if (ov[1] <= ov[0]) throw DataError("split pattern: empty match at byte offset " + std::to_string(off));
        m.merge_piece(text.substr(ov[0], ov[1] - ov[0]), out);
        off = ov[1];
    }
}

std::string TiktokenBpe::decode(const std::vector<int32_t>& ids) const {
    const Impl& m = *impl_;
    std::string s;
    for (int32_t id : ids) {
        if (id >= 0 && id < static_cast<int32_t>(m.tokens.size())) {
            s += m.tokens[id];
        } else if (auto it = m.special_text.find(id); it != m.special_text.end()) {
            s += it->second;
        } else {
            throw DataError("tokenizer: cannot decode id " + std::to_string(id) + ": neither a rank in [0, " +
                            std::to_string(m.tokens.size()) + ") nor a special token (vocab_size " +
                            std::to_string(vocab_size()) + ")");
        }
    }
    return s;
}

int TiktokenBpe::n_ranks() const { return static_cast<int>(impl_->tokens.size()); }

int TiktokenBpe::vocab_size() const {
    int v = n_ranks();
    for (const SpecialToken& s : impl_->specials) v = std::max(v, s.id + 1);
    return v;
}

int32_t TiktokenBpe::special_id(std::string_view text) const {
    for (const SpecialToken& s : impl_->specials)
        if (s.text == text) return s.id;
    return -1;
}

const std::vector<SpecialToken>& TiktokenBpe::specials() const { return impl_->specials; }
const std::string& TiktokenBpe::ranks_bytes() const { return impl_->ranks_bytes; }
const std::string& TiktokenBpe::pcre2_pattern() const { return impl_->pattern; }

}  // namespace llmtrain
