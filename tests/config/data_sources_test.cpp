// tests/config/data_sources_test.cpp — the keys of mixtures and of the WSD schedule:
// [[data.sources]] read from a file (array of tables) and from --set (inline tables), each bad
// entry named by its index and key, to_toml printing a mixture that loads back equal (without
// data.train), data.train beside data.sources refused, and WSD's decay_ratio checked against the
// run's length.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "app/config/config.hpp"

namespace fs = std::filesystem;
using namespace llmtrain;

namespace {

std::string write_file(const std::string& name, const std::string& text) {
    const auto* info = testing::UnitTest::GetInstance()->current_test_info();
    const fs::path dir = fs::path(testing::TempDir()) / "llmtrain_data_sources_test" / info->name();
    fs::create_directories(dir);
    const fs::path p = dir / name;
    std::ofstream(p, std::ios::binary) << text;
    return p.string();
}

std::string error_of(const std::string& path, const std::vector<std::string>& overrides = {}) {
    try {
        load_config(path, overrides);
    } catch (const ConfigError& e) {
        return e.what();
    }
    return "";
}

const char* kMixture = R"([data]
val = "v.h5"

[[data.sources]]
name = "web"
path = "data/web/train_*.h5"
weight = 0.7
val = "data/web/val.h5"

[[data.sources]]
name = "code"
path = "data/code.h5"
weight = 3
)";

}  // namespace

TEST(DataSources, ReadFromAFileAndPrintedBack) {
    const Config c = load_config(write_file("mix.toml", kMixture), {});
    ASSERT_EQ(c.data.sources.size(), 2u);
    EXPECT_EQ(c.data.sources[0], (DataSource{"web", "data/web/train_*.h5", 0.7, "data/web/val.h5"}));
    EXPECT_EQ(c.data.sources[1], (DataSource{"code", "data/code.h5", 3.0, ""}));
    const std::string text = to_toml(c);
    EXPECT_EQ(text.find("train = "), std::string::npos) << text;  // data.train is not printed beside sources
    EXPECT_EQ(load_config(write_file("rt.toml", text), {}), c);
    // The same mixture as one --set of inline tables.
    const Config o = load_config("", {"data.val=\"v.h5\"",
                                      "data.sources=[{name = \"web\", path = \"data/web/train_*.h5\", weight = 0.7, "
                                      "val = \"data/web/val.h5\"}, {name = \"code\", path = \"data/code.h5\", weight = 3}]"});
    EXPECT_EQ(o, c);
}

TEST(DataSources, BadEntriesNameTheirIndexAndKey) {
    const std::vector<std::pair<std::string, std::string>> cases = {
        {"[[data.sources]]\nname = \"a\"\npath = \"a.h5\"\nweight = 0\n", "data.sources[0].weight: expected a number > 0"},
        {"[[data.sources]]\nname = \"a\"\npath = \"a.h5\"\nweight = \"1\"\n", "data.sources[0].weight: expected a number"},
        {"[[data.sources]]\nname = \"a\"\npath = \"a.h5\"\n[[data.sources]]\npath = \"b.h5\"\n", "data.sources[1]: name: missing"},
        {"[[data.sources]]\nname = \"a\"\n", "data.sources[0]: path: missing"},
        {"[[data.sources]]\nname = \"a\"\npath = \"a.h5\"\nwieght = 2\n", "data.sources[0].wieght: unknown key"},
        {"[[data.sources]]\nname = \"a\"\npath = \"a.h5\"\n[[data.sources]]\nname = \"a\"\npath = \"b.h5\"\n",
         "data.sources[1].name: \"a\" is already the name of source [0]"},
        {"[data]\nsources = \"a.h5\"\n", "data.sources: expected an array of tables"},
        {"[data]\ntrain = \"t.h5\"\n[[data.sources]]\nname = \"a\"\npath = \"a.h5\"\n",
         "data.train: not used beside data.sources"},
    };
    for (const auto& [text, want] : cases) {
        const std::string err = error_of(write_file("bad.toml", text));
        EXPECT_NE(err.find(want), std::string::npos) << "config:\n" << text << "\nerror: " << err;
        EXPECT_NE(err.find("bad.toml:"), std::string::npos) << err;  // the file and position
    }
}

TEST(WSDKeys, DecayMustFitTheRun) {
    const std::vector<std::string> base = {"lr_schedule.decay=\"wsd\"", "run.max_steps=100", "lr_schedule.warmup_steps=20"};
    auto with = [&](std::vector<std::string> more) {
        more.insert(more.begin(), base.begin(), base.end());
        return more;
    };
    EXPECT_EQ(error_of("", with({"lr_schedule.decay_ratio=0.8"})), "");  // 20 + 80 = 100 fits
    const std::string err = error_of("", with({"lr_schedule.decay_ratio=0.85"}));
    EXPECT_NE(err.find("lr_schedule.decay_ratio: warmup_steps (20) + the decay's 85 steps"), std::string::npos) << err;
    EXPECT_NE(error_of("", with({"lr_schedule.decay_ratio=1.5"})).find("a number in [0, 1]"), std::string::npos);
    EXPECT_NE(error_of("", with({"lr_schedule.decay_type=\"exp\""})).find("\"linear\", \"sqrt\", \"cosine\""),
              std::string::npos);
    // The same ratio under cosine is not WSD's business.
    EXPECT_EQ(error_of("", {"run.max_steps=100", "lr_schedule.warmup_steps=20", "lr_schedule.decay_ratio=0.9"}), "");
}
