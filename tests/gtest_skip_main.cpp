// tests/gtest_skip_main.cpp — main() for GoogleTest binaries with cases that may skip themselves
// (GTEST_SKIP): like gtest_main, but exits 77 (ctest: skipped) when every test it ran was skipped.
// Link target: llmtrain_gtest_skip_main (tests/CMakeLists.txt), with SKIP_RETURN_CODE 77 on the
// ctest entries that run the skippable cases alone.
#include "tests/gtest_skip.hpp"

int main(int argc, char** argv) {
    testing::InitGoogleTest(&argc, argv);
    return llmtrain::testing_util::run_all_tests_reporting_skips();
}
