// data/sha256.cpp — hex SHA-256 (FIPS 180-4) through OpenSSL's EVP interface; identifies the
// tokenizer a dataset was made with (attribute tokenizer_sha256).
#include <openssl/evp.h>

#include <memory>

#include "data/token_dataset.hpp"

namespace llmtrain {

std::string sha256_hex(const std::string& bytes) {
    std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1 ||
        EVP_DigestUpdate(ctx.get(), bytes.data(), bytes.size()) != 1 ||
        EVP_DigestFinal_ex(ctx.get(), digest, &len) != 1)
        throw DataError("sha256: OpenSSL EVP digest failed");
    static const char* hex = "0123456789abcdef";
    std::string out;
    for (unsigned int i = 0; i < len; ++i) {
        out += hex[digest[i] >> 4];
        out += hex[digest[i] & 15];
    }
    return out;
}

}  // namespace llmtrain
