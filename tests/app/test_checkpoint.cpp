// tests/app/test_checkpoint.cpp — the checkpoint format and write protocol (app/checkpoint/checkpoint.hpp).
//
// References: the values written (seeded random tensors) must come back bit for bit, by tensor
// name, also into a layout with other padding, other optimizer shard ranges, and when written by
// several "ranks" unit by unit; a checkpoint counts only when state.toml and every checksum verify
// (damage made here byte by byte must be caught); lineage and pruning follow the run ids given.
// Each test marked "fails on the old code" says what the previous single-writer version (no
// checksums, no run ids; hardening issue) did in that situation.
#include <gtest/gtest.h>
#include <hdf5.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <sstream>
#include <thread>

#include "app/checkpoint/checkpoint.hpp"
#include "app/config/config.hpp"
#include "app/interop/checkpoint_model.hpp"
#include "app/state/model_state.hpp"
#include "data/h5.hpp"
#include "data/token_dataset.hpp"
#include "tests/app/checkpoint_test_util.hpp"

TEST_F(Ckpt, RoundTripIsBitwiseAndStateComplete) {
    ParamLayout L(tiny());
    auto p = random_flat(L, 1), m = random_flat(L, 2), v = random_flat(L, 3);
    const std::string d = save(L, 7, 0, p, m, v);
    EXPECT_EQ(d, (dir / "checkpoints" / "step_7").string());
    EXPECT_EQ(find_latest_checkpoint(dir.string(), "run-a").dir, d);
    EXPECT_EQ(checkpoint_problem(d), "");

    expect_reads_back(d, L, p, m, v);
    TrainState a = some_state(7), b = read_train_state(d);
    EXPECT_EQ(b.step, a.step);
    EXPECT_EQ(b.tokens_seen, a.tokens_seen);
    EXPECT_EQ(b.loader.sample, 3017u);
    EXPECT_EQ(b.loader.seed, 0xF000000000000005ull);
    EXPECT_FALSE(b.legacy_loader);
    EXPECT_EQ(b.sampler_rng, a.sampler_rng);
    EXPECT_EQ(b.adam_t, 7);
    EXPECT_EQ(b.model_config_hash, "abc123");
    EXPECT_EQ(b.model.n_embd, 16);
    EXPECT_EQ(b.model.vocab_size, 50);
    EXPECT_EQ(b.dp, 2);
    EXPECT_EQ(b.backend, "cpu");
    EXPECT_EQ(b.run_id, "run-a");
    std::ifstream latest(dir / "checkpoints" / "latest");
    std::string line;
    std::getline(latest, line);
    EXPECT_EQ(line, "step_7");
    EXPECT_FALSE(fs::exists(dir / "checkpoints" / ".tmp_step_7"));
}

TEST_F(Ckpt, LoadsIntoOtherPaddingAndOtherShardRanges) {
    ParamLayout L(tiny()), L2(tiny(), 96);  // L2: every unit padded to a multiple of 96 elements
    ASSERT_NE(L.total_numel(), L2.total_numel());
    auto p = random_flat(L, 4), m = random_flat(L, 5), v = random_flat(L, 6);
    // Written as two shards that split the buffer inside a tensor.
    const size_t cut = L.tensors()[3].offset + 5;
    TrainState st = some_state(3);
    const std::string d =
        save_checkpoint(dir.string(), st, L, p.data(),
                        {OptimShardView{0, cut, m.data(), v.data()},
                         OptimShardView{cut, L.total_numel(), m.data() + cut, v.data() + cut}},
                        0);
    std::vector<float> p2(L2.total_numel());
    read_params(d, L2, p2.data());
    // Read back as the second half of L2's buffer, the way a ZeRO rank would.
    const size_t b = L2.total_numel() / 2, e = L2.total_numel();
    std::vector<float> m2(e - b), v2(e - b);
    read_optim(d, L2, b, e, m2.data(), v2.data());
    for (const auto& t2 : L2.tensors()) {
        const auto& t = L.find(t2.name);
        for (size_t i = 0; i < t.numel; ++i) {
            ASSERT_EQ(p2[t2.offset + i], p[t.offset + i]) << t.name;
            const size_t k = t2.offset + i;
            if (k >= b && k < e) {
                ASSERT_EQ(m2[k - b], m[t.offset + i]) << t.name;
                ASSERT_EQ(v2[k - b], v[t.offset + i]) << t.name;
            }
        }
    }
    // Padding comes back as zeros.
    for (size_t k = 0; k < L2.total_numel(); ++k) {
        bool real = false;
        for (const auto& t : L2.tensors()) real |= (k >= t.offset && k < t.offset + t.numel);
        if (!real) {
            ASSERT_EQ(p2[k], 0.0f) << k;
        }
    }
}

TEST_F(Ckpt, ShapeMismatchNamesBothShapes) {
    ParamLayout L(tiny());
    auto p = random_flat(L, 1), m = p, v = p;
    const std::string d = save(L, 1, 0, p, m, v);
    GPTConfig wide = tiny();
    wide.n_embd = 32;
    ParamLayout W(wide);
    std::vector<float> out(W.total_numel());
    try {
        read_params(d, W, out.data());
        FAIL() << "expected CheckpointError";
    } catch (const CheckpointError& e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find("model.h5"), std::string::npos) << msg;
        // The first tensor (wte) differs: both shapes are named.
        const auto& a = L.tensors()[0].shape;
        const auto& b = W.tensors()[0].shape;
        auto str = [](const std::vector<int64_t>& s) {
            return "[" + std::to_string(s[0]) + ", " + std::to_string(s[1]) + "]";
        };
        EXPECT_NE(msg.find(L.tensors()[0].name + " has shape " + str(a)), std::string::npos) << msg;
        EXPECT_NE(msg.find("but " + str(b)), std::string::npos) << msg;
    }
}

TEST_F(Ckpt, KeepLastPrunesOnlyOlderCompleteOnes) {
    ParamLayout L(tiny());
    auto p = random_flat(L, 1), m = p, v = p;
    const fs::path ck = dir / "checkpoints";
    for (int s : {2, 4, 6}) save(L, s, 0, p, m, v);
    fs::create_directories(ck / "step_1");  // incomplete: not counted, not touched
    save(L, 8, 2, p, m, v);
    EXPECT_FALSE(fs::exists(ck / "step_2"));
    EXPECT_FALSE(fs::exists(ck / "step_4"));
    EXPECT_TRUE(fs::exists(ck / "step_6" / "state.toml"));
    EXPECT_TRUE(fs::exists(ck / "step_8" / "state.toml"));
    EXPECT_TRUE(fs::exists(ck / "step_1"));
}

TEST_F(Ckpt, SavingAnExistingStepReplacesIt) {
    ParamLayout L(tiny());
    auto p = random_flat(L, 1), p2 = random_flat(L, 9), m = p, v = p;
    save(L, 5, 0, p, m, v);
    const std::string d = save(L, 5, 0, p2, m, v);
    std::vector<float> back(L.total_numel());
    read_params(d, L, back.data());
    EXPECT_EQ(back[L.tensors()[0].offset], p2[L.tensors()[0].offset]);
    for (const auto& e : fs::directory_iterator(dir / "checkpoints"))
        EXPECT_EQ(e.path().filename().string().rfind(".", 0), std::string::npos) << e.path();
}

TEST_F(Ckpt, UnwritableRunDirIsAClearError) {
    std::ofstream(dir / "file") << "x";
    ParamLayout L(tiny());
    auto p = random_flat(L, 1);
    try {
        save_checkpoint((dir / "file" / "run").string(), some_state(1), L, p.data(),
                        {OptimShardView{0, L.total_numel(), p.data(), p.data()}}, 0);
        FAIL() << "expected CheckpointError";
    } catch (const CheckpointError& e) {
        EXPECT_NE(std::string(e.what()).find("file/run/checkpoints"), std::string::npos) << e.what();
    }
}

TEST_F(Ckpt, BadStateFileNamesTheKey) {
    ParamLayout L(tiny());
    auto p = random_flat(L, 1), m = p, v = p;
    const std::string d = save(L, 3, 0, p, m, v);
    std::string text = slurp(d + "/state.toml");
    const auto at = text.find("tokens_seen = ");
    ASSERT_NE(at, std::string::npos);
    text.replace(at, 14, "tokens_seen = \"many\" #");
    spit(d + "/state.toml", reseal(text));
    try {
        read_train_state(d);
        FAIL() << "expected CheckpointError";
    } catch (const CheckpointError& e) {
        EXPECT_NE(std::string(e.what()).find("tokens_seen"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("state.toml"), std::string::npos) << e.what();
    }
}

// Non-finite values are refused before anything of them is written. Fails on the old code: it
// checkpointed NaN silently, and the NaN checkpoint became `latest`.
TEST_F(Ckpt, NonFiniteValuesAreRefused) {
    ParamLayout L(tiny());
    auto p = random_flat(L, 1), m = p, v = p;
    const std::string good = save(L, 2, 0, p, m, v);
    const auto& t = L.tensors()[5];
    auto bad = p;
    bad[t.offset + 3] = std::nanf("");
    try {
        save(L, 4, 0, bad, m, v);
        FAIL() << "expected CheckpointError";
    } catch (const CheckpointError& e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find(t.name + " holds a non-finite value (nan) at element 3; refusing to checkpoint it"),
                  std::string::npos) << msg;
    }
    EXPECT_FALSE(fs::exists(ck() / "step_4"));
    EXPECT_FALSE(fs::exists(ck() / ".tmp_step_4"));  // save_checkpoint aborts its temporary directory
    EXPECT_EQ(slurp(ck() / "latest"), "step_2\n");

    // The optimizer writer checks before it creates its file.
    const std::string tmp = begin_checkpoint(dir.string(), 6);
    auto vinf = v;
    vinf[L.tensors()[0].offset + 7] = INFINITY;
    try {
        write_optim_shard(tmp, 1, L, {OptimShardView{0, L.total_numel(), m.data(), vinf.data()}});
        FAIL() << "expected CheckpointError";
    } catch (const CheckpointError& e) {
        EXPECT_NE(std::string(e.what()).find("v/" + L.tensors()[0].name + " holds a non-finite value (inf) at element 7"),
                  std::string::npos) << e.what();
    }
    EXPECT_FALSE(fs::exists(fs::path(tmp) / "optim_1.h5"));
    // A rank's slices of model.h5 are checked before any is written: the file keeps its zeros.
    create_model_file(tmp, L);
    const std::string before = slurp(fs::path(tmp) / "model.h5");
    EXPECT_THROW(write_model_slices(tmp, L, {OptimShardView{0, L.total_numel(), m.data(), v.data(), bad.data()}}),
                 CheckpointError);
    EXPECT_EQ(slurp(fs::path(tmp) / "model.h5"), before);
    abort_checkpoint(tmp);
    EXPECT_FALSE(fs::exists(tmp));
}

// ZeRO layout: every rank writes its optim_<k>.h5 and its slices of model.h5 (one segment per unit)
// and reports them; the commit seals model.h5 from the slice reports and lists exactly the reported
// files. Read back bitwise against the single flat buffers written; model.h5 is byte for byte the
// file one writer makes of the same weights (write_model_file, the independent reference), and the
// SHA-256 checks, shared over 3 ranks, each find the one damaged byte that lies in their share.
TEST_F(Ckpt, EveryRankWritesItsShard) {
    ParamLayout L(tiny(), 4);  // units padded to split over 4 ranks
    auto p = random_flat(L, 11), m = random_flat(L, 12), v = random_flat(L, 13);
    for (size_t k = 0; k < L.total_numel(); ++k)  // padding holds garbage that must be ignored ...
        if (std::isnan(m[k])) m[k] = v[k] = 0.0f;  // ... but the finite check covers real elements only
    const int P = 4;
    const std::string tmp = begin_checkpoint(dir.string(), 9);
    create_model_file(tmp, L);
    std::vector<PartInfo> parts;
    for (int r = P - 1; r >= 0; --r) {
        std::vector<OptimShardView> views;
        for (const auto& un : L.units()) {
            const size_t n = un.numel / P, b = un.offset + size_t(r) * n;
            views.push_back({b, b + n, m.data() + b, v.data() + b, p.data() + b});
        }
        parts.push_back(write_optim_shard(tmp, r, L, views));
        parts.push_back(write_model_slices(tmp, L, views));
        EXPECT_EQ(parts.back().sha256, kSlicedSha);
        EXPECT_FALSE(parts.back().slices.empty());
    }
    const std::string d = commit_checkpoint(dir.string(), tmp, some_state(9), L, parts, 0);
    EXPECT_EQ(checkpoint_problem(d), "");
    const std::string toml = slurp(fs::path(d) / "state.toml");
    for (int r = 0; r < P; ++r) {
        const std::string f = "optim_" + std::to_string(r) + ".h5";
        EXPECT_NE(toml.find("\n'" + f + "' = " + std::to_string(fs::file_size(fs::path(d) / f)) + "\n"), std::string::npos) << toml;
    }
    EXPECT_NE(toml.find("'model.h5' = 'sliced'"), std::string::npos) << toml;
    expect_reads_back(d, L, p, m, v);
    // The reference: one writer, the same weights.
    const fs::path one = dir / "one";
    fs::create_directories(one);
    write_model_file(one.string(), L, {OptimShardView{0, L.total_numel(), m.data(), v.data(), p.data()}});
    EXPECT_EQ(slurp(one / "model.h5"), slurp(fs::path(d) / "model.h5"));
    // Shared verification: shares 0..2 of 3 together check every slice once.
    for (int s = 0; s < 3; ++s) EXPECT_EQ(checkpoint_problem(d, s, 3), "") << s;
    const std::string mid = (fs::path(d) / "model.h5").string();
    const uint64_t at = fs::file_size(mid) / 2;  // inside some tensor's data
    {
        std::fstream f(mid, std::ios::in | std::ios::out | std::ios::binary);
        f.seekg(std::streamoff(at));
        char c = 0;
        f.read(&c, 1);
        c = char(c ^ 0x40);
        f.seekp(std::streamoff(at));
        f.write(&c, 1);
    }
    int found = 0;
    for (int s = 0; s < 3; ++s) {
        const std::string why = checkpoint_problem(d, s, 3);
        if (why.empty()) continue;
        ++found;
        EXPECT_NE(why.find("model.h5: SHA-256 of bytes ["), std::string::npos) << why;
    }
    EXPECT_EQ(found, 1);
    EXPECT_NE(checkpoint_problem(d).find("differs from state.toml (damaged)"), std::string::npos);
    EXPECT_EQ(checkpoint_problem(d, 0, 0), "");  // shares = 0: sizes only, no hashing
}

// The commit trusts the ranks' reports, never a directory listing, and checks each report against
// the file: a reported file that is missing (a stale listing on a network file system would have
// hidden it), of another size, or a model part with another SHA-256 fails the commit; a file no
// rank reported is not listed, so the checkpoint does not verify. Fails on the old code: it listed
// the directory and committed whatever it saw.
TEST_F(Ckpt, CommitChecksTheReportedParts) {
    ParamLayout L(tiny());
    auto p = random_flat(L, 1), m = random_flat(L, 2), v = random_flat(L, 3);
    const OptimShardView all{0, L.total_numel(), m.data(), v.data(), p.data()};
    auto parts_of = [&](int64_t step) {
        const std::string tmp = begin_checkpoint(dir.string(), step);
        create_model_file(tmp, L);
        return std::make_pair(tmp, std::vector<PartInfo>{write_optim_shard(tmp, 0, L, {all}),
                                                         write_model_slices(tmp, L, {all})});
    };
    auto commit_error = [&](const std::string& tmp, const std::vector<PartInfo>& parts) {
        try {
            commit_checkpoint(dir.string(), tmp, some_state(1), L, parts, 0);
        } catch (const CheckpointError& e) {
            return std::string(e.what());
        }
        return std::string();
    };
    auto [tmp, parts] = parts_of(1);
    auto missing = parts;
    missing.push_back({"optim_1.h5", 100, std::string(64, '0'), {}});
    EXPECT_NE(commit_error(tmp, missing).find("optim_1.h5 was reported with 100 bytes but is missing"), std::string::npos);
    auto longer = parts;
    longer[0].bytes += 1;
    EXPECT_NE(commit_error(tmp, longer).find("optim_0.h5 was reported with"), std::string::npos);
    auto twice = parts;
    twice.push_back(parts[1]);  // two ranks claiming the same bytes of model.h5
    EXPECT_NE(commit_error(tmp, twice).find("(overlapping slices)"), std::string::npos);
    auto short_of = parts;
    short_of[1].slices.pop_back();  // a tensor's bytes nobody wrote
    EXPECT_NE(commit_error(tmp, short_of).find("(a part is missing)"), std::string::npos);
    auto outside = parts;
    outside[1].slices.push_back({0, 8, std::string(64, 'a')});  // the superblock is nobody's tensor
    EXPECT_NE(commit_error(tmp, outside).find("outside every tensor's data"), std::string::npos);
    EXPECT_NE(commit_error(tmp, {parts[1]}).find("lack an optim_<k>.h5"), std::string::npos);
    EXPECT_FALSE(fs::exists(ck() / "step_1"));
    // An unreported extra shard is never listed: the committed checkpoint does not verify.
    auto [tmp2, parts2] = parts_of(2);
    fs::copy_file(fs::path(tmp2) / "optim_0.h5", fs::path(tmp2) / "optim_1.h5");
    const std::string d = commit_checkpoint(dir.string(), tmp2, some_state(2), L, parts2, 0);
    EXPECT_NE(checkpoint_problem(d).find("optim_1.h5 is not listed"), std::string::npos);
    // Reading takes the shard files from state.toml, not from the directory: the unlisted copy
    // (which would overlap every element of optim_0.h5) is never opened.
    std::vector<float> m2(L.total_numel()), v2(L.total_numel());
    read_optim(d, L, 0, L.total_numel(), m2.data(), v2.data());
    for (const auto& t : L.tensors()) ASSERT_EQ(std::memcmp(&m[t.offset], &m2[t.offset], 4 * t.numel), 0) << t.name;
}

// One damaged byte anywhere makes auto resume fall back to the previous checkpoint, and the log
// says why. Fails on the old code: it resumed from the damaged step_4.
// Pruning removes only older checkpoints of the run that writes. Fails on the old code: it pruned
// by count over every checkpoint, deleting the other run's and the newer ones.
TEST_F(Ckpt, PruningKeepsOtherRunsAndNewerSteps) {
    ParamLayout L(tiny());
    auto p = random_flat(L, 1), m = p, v = p;
    for (int s : {2, 4, 6, 8}) save(L, s, 0, p, m, v, "run-a");
    for (int s : {3, 5, 7}) save(L, s, 2, p, m, v, "run-b");
    auto has = [&](int s) { return fs::exists(ck() / ("step_" + std::to_string(s)) / "state.toml"); };
    EXPECT_FALSE(has(3));
    for (int s : {2, 4, 5, 6, 7, 8}) EXPECT_TRUE(has(s)) << s;
    // run-a rewrites step 4 (resumed from an older checkpoint): 6 and 8 are newer and stay.
    save(L, 4, 1, p, m, v, "run-a");
    EXPECT_FALSE(has(2));
    for (int s : {4, 5, 6, 7, 8}) EXPECT_TRUE(has(s)) << s;
}

// Finding 5: a tensor with an m piece but no v piece is an error. Fails on the old code: v stayed
// zero and the run went on with a wrong second moment.
TEST_F(Ckpt, ReadOptimRefusesAMissingPiece) {
    ParamLayout L(tiny());
    auto p = random_flat(L, 1), m = p, v = p;
    const std::string d = save(L, 1, 0, p, m, v);
    const std::string victim = "v/" + L.tensors()[2].name;
    {
        h5::Lock lock;  // every HDF5 call of the process (data/h5.hpp)
        hid_t f = H5Fopen((d + "/optim_0.h5").c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
        ASSERT_GE(f, 0);
        ASSERT_GE(H5Ldelete(f, victim.c_str(), H5P_DEFAULT), 0);
        H5Fclose(f);
    }
    std::vector<float> m2(L.total_numel()), v2(L.total_numel());
    try {
        read_optim(d, L, 0, L.total_numel(), m2.data(), v2.data());
        FAIL() << "expected CheckpointError";
    } catch (const CheckpointError& e) {
        EXPECT_NE(std::string(e.what()).find("tensor " + L.tensors()[2].name + " has a /m piece but no /v piece"),
                  std::string::npos) << e.what();
    }
}

// Finding 5: elements held by two shard files are an error naming both. Fails on the old code:
// an overlap of 10 elements and a gap of 10 counted as full coverage, leaving the gap zero.
TEST_F(Ckpt, ReadOptimRefusesOverlappingShards) {
    ParamLayout L(tiny());
    auto p = random_flat(L, 1), m = p, v = p;
    const size_t n = L.total_numel(), cut = L.tensors()[3].offset + 5;
    const std::string tmp = begin_checkpoint(dir.string(), 1);
    const std::vector<PartInfo> parts = {write_model_file(tmp, L, {OptimShardView{0, n, m.data(), v.data(), p.data()}}),
                                         write_optim_shard(tmp, 0, L, {OptimShardView{0, cut + 10, m.data(), v.data()}}),
                                         write_optim_shard(tmp, 1, L, {OptimShardView{cut, n - 10, m.data() + cut, v.data() + cut}})};
    const std::string d = commit_checkpoint(dir.string(), tmp, some_state(1), L, parts, 0);
    std::vector<float> m2(n), v2(n);
    try {
        read_optim(d, L, 0, n, m2.data(), v2.data());
        FAIL() << "expected CheckpointError";
    } catch (const CheckpointError& e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find("optim_0.h5 and " + d + "/optim_1.h5 both hold flat elements [" + std::to_string(cut) +
                           ", " + std::to_string(cut + 10) + ")"),
                  std::string::npos) << msg;
    }
}

// Equal tensors give equal files (no HDF5 timestamps), so a checkpoint rewritten after a resume is
// byte-identical and the crash test can compare files. Fails on the old code once a second passes.
TEST_F(Ckpt, FilesAreReproducible) {
    ParamLayout L(tiny());
    auto p = random_flat(L, 1), m = random_flat(L, 2), v = random_flat(L, 3);
    const std::string a = slurp(fs::path(save(L, 3, 0, p, m, v)) / "model.h5");
    const std::string ao = slurp(ck() / "step_3" / "optim_0.h5");
    std::this_thread::sleep_for(std::chrono::milliseconds(1100));
    const std::string d = save(L, 3, 0, p, m, v);
    EXPECT_TRUE(slurp(fs::path(d) / "model.h5") == a);
    EXPECT_TRUE(slurp(fs::path(d) / "optim_0.h5") == ao);
}

// Format 1 checkpoints (no run id, no checksums) still resume.
TEST_F(Ckpt, ReadsFormatOne) {
    ParamLayout L(tiny());
    auto p = random_flat(L, 1), m = p, v = p;
    const std::string d = save(L, 4, 0, p, m, v, "");
    // Format 1 as written before: no run_id, no [files], no [integrity].
    std::string text = slurp(fs::path(d) / "state.toml");
    text = text.substr(0, text.find("\n[integrity]"));
    const size_t files = text.find("[files]\n");
    ASSERT_NE(files, std::string::npos);
    text.erase(files, text.find("\n\n", files) + 2 - files);
    text.erase(text.find("run_id = "), text.find('\n', text.find("run_id = ")) + 1 - text.find("run_id = "));
    const size_t bytes = text.find("[bytes]\n");
    ASSERT_NE(bytes, std::string::npos);
    text.erase(bytes, text.find("\n\n", bytes) + 2 - bytes);
    const auto at = text.find("format_version = 4");
    ASSERT_NE(at, std::string::npos);
    text.replace(at, 18, "format_version = 1");
    spit(fs::path(d) / "state.toml", text);
    EXPECT_EQ(checkpoint_problem(d), "");
    EXPECT_EQ(read_train_state(d).step, 4);
    EXPECT_EQ(resolve_resume("auto", dir.string(), false).dir, d);
}

// A state.toml written before stream positions ([loader] epoch, batch: each rank's micro-batch
// index) still reads; the trainer converts it (e2e: tests/parallel/zero_reshard.sh). A negative
// sample is refused by name.
TEST_F(Ckpt, ReadsLoaderEpochBatchOfOlderCheckpoints) {
    ParamLayout L(tiny());
    auto p = random_flat(L, 1), m = p, v = p;
    const std::string d = save(L, 4, 0, p, m, v);
    const fs::path state = fs::path(d) / "state.toml";
    const std::string text = slurp(state);
    const std::string now = "[loader]\nsample = 3017\nseed = -1152921504606846971\n";
    const size_t at = text.find(now);
    ASSERT_NE(at, std::string::npos) << text;
    std::string old = text;
    spit(state, reseal(old.replace(at, now.size(), "[loader]\nbatch = 17\nepoch = 3\n")));
    TrainState st = read_train_state(d);
    ASSERT_TRUE(st.legacy_loader);
    EXPECT_EQ(st.legacy_loader->first, 3u);
    EXPECT_EQ(st.legacy_loader->second, 17u);
    old = text;
    spit(state, reseal(old.replace(at, now.size(), "[loader]\nsample = -2\nseed = 1\n")));
    try {
        read_train_state(d);
        ADD_FAILURE() << "a negative loader.sample was read";
    } catch (const CheckpointError& e) {
        EXPECT_NE(std::string(e.what()).find("loader.sample: expected >= 0, got -2"), std::string::npos) << e.what();
    }
}

// A large tensor (wte of 50304 x 128 = 6.4M elements, 25 MiB) is written by pwrite and read back by
// one hyperslab: it comes back bit for bit, in model.h5 (2-D) and in the 1-D optimizer pieces.
TEST_F(Ckpt, LargeTensorsRoundTrip) {
    GPTConfig g = tiny();
    g.vocab_size = 50257;
    g.n_embd = 128;
    g.n_layer = 1;
    ParamLayout L(g);
    ASSERT_GT(L.tensors()[0].numel, size_t(1) << 22);
    auto p = random_flat(L, 21), m = random_flat(L, 22), v = random_flat(L, 23);
    const std::string d = save(L, 1, 0, p, m, v);
    expect_reads_back(d, L, p, m, v);
}

// The writers let HDF5 lay out each file, put the raw data in with pwrite and hash it from memory
// (app/checkpoint/raw_h5.hpp): the size and SHA-256 they report must be those of the file on disk
// (sha256_file_hex reads it back independently; a sliced model.h5's slices through
// checkpoint_problem after the commit), whether model.h5 comes straight from one view
// (write_model_file, the single writing rank) or in slices from one writer per unit, in unit order
// or in reverse; the three files are byte-identical and read back bit for bit. A view that does not hold a tensor whole is refused before any file.
TEST_F(Ckpt, RawWrittenFilesHashAsOnDisk) {
    ParamLayout L(tiny(), 4);  // padded: the padding (NaN) must never reach a file
    auto p = random_flat(L, 31), m = random_flat(L, 32), v = random_flat(L, 33);
    const OptimShardView all{0, L.total_numel(), m.data(), v.data(), p.data()};
    auto check = [](const std::string& tmp, const PartInfo& part) {
        const fs::path f = fs::path(tmp) / part.name;
        EXPECT_EQ(part.bytes, fs::file_size(f)) << part.name;
        EXPECT_EQ(part.sha256, sha256_file_hex(f.string())) << part.name;
    };
    std::vector<std::string> model_bytes;
    for (int how = 0; how < 3; ++how) {
        const std::string tmp = begin_checkpoint(dir.string(), 10 + how);
        std::vector<PartInfo> parts;
        if (how == 0) {
            parts.push_back(write_model_file(tmp, L, {all}));
            check(tmp, parts.back());
        } else {
            create_model_file(tmp, L);
            const int nu = int(L.units().size());
            for (int i = 0; i < nu; ++i) {
                const auto& un = L.units()[size_t(how == 1 ? i : nu - 1 - i)];
                parts.push_back(write_model_slices(
                    tmp, L, {OptimShardView{un.offset, un.offset + un.numel, nullptr, nullptr, p.data() + un.offset}}));
            }
        }
        for (const PartInfo& part : parts) EXPECT_EQ(part.name, "model.h5");
        const PartInfo optim = write_optim_shard(tmp, 0, L, {all});
        check(tmp, optim);
        parts.push_back(optim);
        const std::string d = commit_checkpoint(dir.string(), tmp, some_state(10 + how), L, parts, 0);
        model_bytes.push_back(slurp(fs::path(d) / "model.h5"));
        EXPECT_EQ(checkpoint_problem(d), "");
        expect_reads_back(d, L, p, m, v);
    }
    EXPECT_TRUE(model_bytes[0] == model_bytes[1]);
    EXPECT_TRUE(model_bytes[0] == model_bytes[2]);

    const std::string tmp = begin_checkpoint(dir.string(), 20);
    const auto& t1 = L.tensors()[1];
    const OptimShardView cut{0, t1.offset + 1, m.data(), v.data(), p.data()};  // t1 cut after one element
    try {
        write_model_file(tmp, L, {cut});
        FAIL() << "expected CheckpointError";
    } catch (const CheckpointError& e) {
        EXPECT_NE(std::string(e.what()).find("tensor " + t1.name + " is not whole"), std::string::npos) << e.what();
    }
    EXPECT_FALSE(fs::exists(fs::path(tmp) / "model.h5"));
}

// A Llama checkpoint records its architecture in state.toml ([model] arch, n_kv_head and
// intermediate_size resolved, tie_embeddings, rope_theta, norm_eps): read_train_state returns it and
// checkpoint_model_config takes it with no run directory beside the checkpoint; the same keys edited
// by hand (and resealed) no longer hash to model.config_hash and are refused. GPT-2's state.toml
// keeps its five shape keys only (its hash text is unchanged).
TEST_F(Ckpt, LlamaStateRecordsItsArchitecture) {
    Config c;
    c.model.n_layer = 2, c.model.n_head = 4, c.model.n_embd = 16, c.model.seq_len = 8, c.model.vocab_size = 50;
    c.model.arch = "llama", c.model.n_kv_head = 2, c.model.multiple_of = 8;  // F = 42 rounded up to 48
    c.model.rope_theta = 500000.0f, c.model.norm_eps = 1e-6f, c.model.tie_embeddings = false;
    TrainState st = some_state(3);
    st.model = gpt_config_of(c);
    st.model_config_hash = model_config_hash(c);
    ParamLayout L(st.model);
    auto p = random_flat(L, 1), m = random_flat(L, 2), v = random_flat(L, 3);
    const std::string d = save_checkpoint(dir.string(), st, L, p.data(),
                                          {OptimShardView{0, L.total_numel(), m.data(), v.data()}}, 0);
    const TrainState back = read_train_state(d);
    EXPECT_EQ(back.model.arch, Arch::llama);
    EXPECT_EQ(back.model.n_kv_head, 2);
    EXPECT_EQ(back.model.intermediate_size, 48);
    EXPECT_FALSE(back.model.tie_embeddings);
    EXPECT_EQ(back.model.rope_theta, 500000.0f);
    EXPECT_EQ(back.model.norm_eps, 1e-6f);
    ASSERT_FALSE(fs::exists(dir / "config.toml"));
    const GPTConfig got = checkpoint_model_config(d, back);
    EXPECT_EQ(ParamLayout(got).total_numel(), L.total_numel());
    expect_reads_back(d, ParamLayout(got), p, m, v);

    const fs::path state = fs::path(d) / "state.toml";
    std::string text = slurp(state);
    const size_t at = text.find("n_kv_head = 2");
    ASSERT_NE(at, std::string::npos) << text;
    spit(state, reseal(text.replace(at, 13, "n_kv_head = 1")));
    const TrainState edited = read_train_state(d);
    EXPECT_THROW(checkpoint_model_config(d, edited), InteropError);

    const std::string gpt2 = save(ParamLayout(tiny()), 4, 0, random_flat(ParamLayout(tiny()), 4),
                                  random_flat(ParamLayout(tiny()), 5), random_flat(ParamLayout(tiny()), 6));
    EXPECT_EQ(slurp(fs::path(gpt2) / "state.toml").find("arch"), std::string::npos);  // no identity given either
}

// [model_identity] is written as the trainer gives it and read back (a TOML table keeps no order).
TEST_F(Ckpt, ModelIdentityReadsBack) {
    ParamLayout L(tiny());
    auto p = random_flat(L, 1), m = p, v = p;
    TrainState st = some_state(2);
    st.model_identity = model_identity(tiny());
    const std::string d = save_checkpoint(dir.string(), st, L, p.data(), {OptimShardView{0, L.total_numel(), m.data(), v.data()}}, 0);
    auto sorted = [](ModelIdentity id) {
        std::sort(id.begin(), id.end());
        return id;
    };
    EXPECT_EQ(sorted(read_train_state(d).model_identity), sorted(model_identity(tiny())));
    EXPECT_TRUE(read_train_state(save(L, 4, 0, p, m, v)).model_identity.empty());  // none given, none written
}
