// tests/data/dataset_tool.cpp — a bridge for check_h5py.py, which checks the C++ writer and reader
// against h5py (an independent HDF5 reader and writer):
//   dataset_tool write PATH VOCAB N_DOCS MAX_LEN   writes the closed-form sample of data_test_util.hpp
//                                                  with a tokenizer of all 256 byte values
//   dataset_tool dump PATH                         prints what TokenDataset reads, one "key: values" a line
// Exit code 2 and the DataError on stderr when the file is refused.
#include <iostream>

#include "data_test_util.hpp"

using namespace llmtrain;

int main(int argc, char** argv) {
    const std::string mode = argc > 1 ? argv[1] : "";
    try {
        if (mode == "write" && argc == 6) {
            std::string tokenizer(256, '\0');
            for (int i = 0; i < 256; ++i) tokenizer[i] = static_cast<char>(i);
            test::write_sample(argv[2], std::stoi(argv[3]), std::stoi(argv[4]), std::stoi(argv[5]), tokenizer);
            return 0;
        }
        if (mode == "dump" && argc == 3) {
            TokenDataset ds(argv[2]);
            const DatasetInfo& i = ds.info();
            std::cout << "vocab_size: " << i.vocab_size << "\neos_id: " << i.eos_id << "\nbos_id: " << i.bos_id
                      << "\ntoken_bytes: " << i.token_bytes << "\ntokenizer_sha256: " << i.tokenizer_sha256
                      << "\ntokenizer_len: " << ds.tokenizer_bytes().size() << "\ndoc_offsets:";
            for (uint64_t o : ds.doc_offsets()) std::cout << ' ' << o;
            std::vector<int32_t> tokens(i.n_tokens);
            if (i.n_tokens) ds.read_windows({0}, static_cast<int>(i.n_tokens), tokens.data(), i.vocab_size);
            std::cout << "\ntokens:";
            for (int32_t t : tokens) std::cout << ' ' << t;
            std::cout << "\n";
            return 0;
        }
    } catch (const DataError& e) {
        std::cerr << "dataset_tool: " << e.what() << "\n";
        return 2;
    }
    std::cerr << "usage: dataset_tool write PATH VOCAB N_DOCS MAX_LEN | dataset_tool dump PATH\n";
    return 1;
}
