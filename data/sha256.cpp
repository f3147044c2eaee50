// data/sha256.cpp — hex SHA-256 (FIPS 180-4) through OpenSSL's EVP interface; identifies the
// tokenizer a dataset was made with (attribute tokenizer_sha256) and checksums checkpoint files.
#include <openssl/evp.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "data/token_dataset.hpp"

namespace llmtrain {

namespace {

using MdCtx = std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)>;

MdCtx sha256_begin() {
    MdCtx ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
    if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1)
        throw DataError("sha256: OpenSSL EVP digest failed");
    return ctx;
}

void sha256_update(EVP_MD_CTX* ctx, const void* data, size_t n) {
    if (EVP_DigestUpdate(ctx, data, n) != 1) throw DataError("sha256: OpenSSL EVP digest failed");
}

std::string sha256_end(EVP_MD_CTX* ctx) {
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    if (EVP_DigestFinal_ex(ctx, digest, &len) != 1) throw DataError("sha256: OpenSSL EVP digest failed");
    static const char* hex = "0123456789abcdef";
    std::string out;
    for (unsigned int i = 0; i < len; ++i) {
        out += hex[digest[i] >> 4];
        out += hex[digest[i] & 15];
    }
    return out;
}

}  // namespace

std::string sha256_hex(const std::string& bytes) {
    MdCtx ctx = sha256_begin();
    sha256_update(ctx.get(), bytes.data(), bytes.size());
    return sha256_end(ctx.get());
}

std::string sha256_file_hex(const std::string& path) {
    std::unique_ptr<FILE, decltype(&std::fclose)> f(std::fopen(path.c_str(), "rb"), std::fclose);
    if (!f) throw DataError("sha256: cannot open '" + path + "': " + std::strerror(errno));
    MdCtx ctx = sha256_begin();
    std::vector<unsigned char> buf(4u << 20);
    size_t n = 0;
    while ((n = std::fread(buf.data(), 1, buf.size(), f.get())) > 0) sha256_update(ctx.get(), buf.data(), n);
    if (std::ferror(f.get())) throw DataError("sha256: cannot read '" + path + "': " + std::strerror(errno));
    return sha256_end(ctx.get());
}

std::string sha256_file_range_hex(const std::string& path, uint64_t lo, uint64_t hi) {
    std::unique_ptr<FILE, decltype(&std::fclose)> f(std::fopen(path.c_str(), "rb"), std::fclose);
    if (!f) throw DataError("sha256: cannot open '" + path + "': " + std::strerror(errno));
    if (std::fseek(f.get(), long(lo), SEEK_SET) != 0)
        throw DataError("sha256: cannot seek in '" + path + "': " + std::strerror(errno));
    MdCtx ctx = sha256_begin();
    std::vector<unsigned char> buf(4u << 20);
    for (uint64_t left = hi - lo; left > 0;) {
        const size_t n = std::fread(buf.data(), 1, size_t(std::min<uint64_t>(left, buf.size())), f.get());
        if (n == 0) {
            if (std::ferror(f.get())) throw DataError("sha256: cannot read '" + path + "': " + std::strerror(errno));
            throw DataError("sha256: '" + path + "' ends before byte " + std::to_string(hi));
        }
        sha256_update(ctx.get(), buf.data(), n);
        left -= n;
    }
    return sha256_end(ctx.get());
}

}  // namespace llmtrain
