// app/config/cli_positive.hpp — the CLI11 check "a number > 0" for llmtrain, llmtrain-plan and llmtrain-prep.
// CLI11's own PositiveNumber names its range in the error ("not in range 0.000000 to 1.797...e308");
// this one says what was expected and what came.
#pragma once
#include <CLI/CLI.hpp>
#include <string>

namespace llmtrain {

/// Accepts a decimal number > 0 (the option's own type then converts it); otherwise the error
/// "expected a number > 0, got <value>", which CLI11 prefixes with the option's name.
inline const CLI::Validator kPositive{[](std::string& s) -> std::string {
                                          try {
                                              size_t end = 0;
                                              if (std::stod(s, &end) > 0 && end == s.size()) return "";
                                          } catch (const std::exception&) {
                                          }
                                          return "expected a number > 0, got " + s;
                                      },
                                      "> 0", "POSITIVE"};

}  // namespace llmtrain
