// app/checkpoint/read_shard.cpp — reading a rank's own part of a checkpoint (see checkpoint.hpp
// read_params_ranges, read_optim_ranges): the flat ranges it holds (its ZeRO shard, its pipeline
// stage's units) of its layout (a TP rank's local one: each element mapped to its place in the whole
// tensor, ParamLayout::local_runs), read by HDF5 hyperslab selections from model.h5's whole tensors
// and from the 1-D pieces of the optim_<k>.h5 parts, so that resume needs host memory and reads
// for this rank's elements only, never the whole model (docs/checkpoints.md "By shard").
#include <hdf5.h>

#include <algorithm>

#include "app/checkpoint/checkpoint.hpp"
#include "app/checkpoint/format.hpp"
#include "data/h5.hpp"

namespace llmtrain {

namespace {

using namespace ckpt;

hid_t h5c(hid_t id, const std::string& context) { return h5::check<CheckpointError>(id, context); }

/// What one (tensor, range) pair needs: the runs of the whole tensor (TPRun, ascending) holding
/// local elements that are contiguous in the caller's output, the first at out[at].
struct Need {
    size_t tensor, at;
    std::vector<TPRun> runs;
};

/// Every Need of `ranges` (ascending flat ranges of layout; their elements back to back in the
/// output), tensor by tensor.
std::vector<Need> needs_of(const ParamLayout& layout, const std::vector<FlatRange>& ranges) {
    std::vector<Need> out;
    for (size_t i = 0; i < layout.tensors().size(); ++i) {
        const ParamTensor& t = layout.tensors()[i];
        size_t at = 0;
        for (const FlatRange& r : ranges) {
            const size_t lo = std::max(t.offset, r.offset), hi = std::min(t.offset + t.numel, r.offset + r.numel);
            if (lo < hi) out.push_back({i, at + (lo - r.offset), layout.local_runs(t, lo - t.offset, hi - t.offset)});
            at += r.numel;
        }
    }
    return out;
}

size_t total_of(const std::vector<FlatRange>& ranges) {
    size_t n = 0;
    for (const FlatRange& r : ranges) n += r.numel;
    return n;
}

/// A rectangular hyperslab: rows [r, r + nr) x columns [c, c + nc) (a 1-D dataset: c = 0, nc = 1),
/// or, strided, nr blocks of nc elements every `stride` elements of a 1-D dataset.
struct Block {
    hsize_t r, c, nr, nc, stride;
};

/// Selects in `space` (a dataset of shape dims, rank 1 or 2) the union of the whole-tensor runs
/// [full - base, full - base + count) (row-major, ascending): rows cut into at most three blocks
/// each, then blocks of equal columns in consecutive rows merged (a row-split tensor's part is one
/// block); in 1-D, runs of equal length at a constant stride become one strided selection.
/// HDF5 reads a selection in ascending file order, which is the runs' order.
void select_runs(hid_t space, const std::vector<hsize_t>& dims, const std::vector<TPRun>& runs, size_t base) {
    std::vector<Block> blocks;
    if (dims.size() == 1) {
        for (const TPRun& q : runs) {
            const hsize_t s = q.full - base;
            if (!blocks.empty()) {
                Block& b = blocks.back();
                const hsize_t next = b.r + b.nr * b.stride;  // where the next block would start
                if (b.nc == q.count && ((b.nr == 1 && s >= b.r + b.nc) || (b.nr > 1 && s == next))) {
                    if (b.nr == 1) b.stride = s - b.r;
                    ++b.nr;
                    continue;
                }
            }
            blocks.push_back({s, 0, 1, q.count, q.count});
        }
        H5Sselect_none(space);
        for (const Block& b : blocks) {
            const hsize_t start = b.r, stride = b.stride, count = b.nr, block = b.nc;
            H5Sselect_hyperslab(space, H5S_SELECT_OR, &start, &stride, &count, &block);
        }
        return;
    }
    const hsize_t K = dims[1];
    auto add = [&](hsize_t r, hsize_t c, hsize_t nr, hsize_t nc) {
        if (!blocks.empty()) {
            Block& b = blocks.back();
            if (b.c == c && b.nc == nc && b.r + b.nr == r) {
                b.nr += nr;
                return;
            }
        }
        blocks.push_back({r, c, nr, nc, 0});
    };
    for (const TPRun& q : runs) {
        hsize_t f = q.full - base, n = q.count;
        if (f % K != 0) {  // a partial first row
            const hsize_t k = std::min<hsize_t>(n, K - f % K);
            add(f / K, f % K, 1, k);
            f += k, n -= k;
        }
        if (n >= K) add(f / K, 0, n / K, K), f += n / K * K, n %= K;  // whole rows
        if (n > 0) add(f / K, 0, 1, n);  // a partial last row
    }
    H5Sselect_none(space);
    for (const Block& b : blocks) {
        const hsize_t start[2] = {b.r, b.c}, count[2] = {b.nr, b.nc};
        H5Sselect_hyperslab(space, H5S_SELECT_OR, start, nullptr, count, nullptr);
    }
}

/// Reads the runs (minus base) of dataset ds (shape dims) into out (their total count, in order). A
/// tensor of rank 3 (MoE's stacked experts) is read whole and the runs copied out of it.
void read_runs(hid_t ds, const std::vector<hsize_t>& dims, const std::vector<TPRun>& runs, size_t base, float* out,
               const std::string& what) {
    hsize_t n = 0;
    for (const TPRun& q : runs) n += q.count;
    if (n == 0) return;
    h5::Lock lock;  // one (tensor, range) read: at most this rank's share of one tensor
    if (dims.size() > 2) {  // MoE's stacked experts (E, rows, cols), never split by TP: read whole, copy the runs
        hsize_t all = 1;
        for (hsize_t d : dims) all *= d;
        std::vector<float> whole(all);
        h5::check_status<CheckpointError>(H5Dread(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, whole.data()),
                                          what + ": cannot read");
        for (const TPRun& q : runs) out = std::copy_n(whole.begin() + std::ptrdiff_t(q.full - base), q.count, out);
        return;
    }
    h5::Handle fs(h5c(H5Dget_space(ds), what + ": cannot read its shape"));
    select_runs(fs.get(), dims, runs, base);
    h5::Handle ms(h5c(H5Screate_simple(1, &n, nullptr), what + ": cannot make a dataspace"));
    h5::check_status<CheckpointError>(H5Dread(ds, H5T_NATIVE_FLOAT, ms.get(), fs.get(), H5P_DEFAULT, out),
                                      what + ": cannot read");
}

/// Opens dataset `name` under loc and returns its dims; an empty handle when it does not exist.
h5::Handle open_dataset(hid_t loc, const std::string& name, std::vector<hsize_t>& dims, const std::string& file) {
    h5::Lock lock;
    if (H5Lexists(loc, name.c_str(), H5P_DEFAULT) <= 0) return {};
    h5::Handle ds(h5c(H5Dopen2(loc, name.c_str(), H5P_DEFAULT), file + ": cannot open dataset " + name));
    h5::Handle sp(h5c(H5Dget_space(ds.get()), file + ": cannot read the shape of " + name));
    const int rank = H5Sget_simple_extent_ndims(sp.get());
    if (rank < 0) throw CheckpointError(file + ": cannot read the shape of " + name);
    dims.assign(size_t(rank), 0);
    H5Sget_simple_extent_dims(sp.get(), dims.data(), nullptr);
    return ds;
}

h5::Handle open_file(const std::string& file) {
    h5::Lock lock;
    return h5::Handle(h5c(H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), "checkpoint: cannot open " + file));
}

std::string shape_str(const std::vector<hsize_t>& d) {
    std::string s = "[";
    for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
    return s + "]";
}

/// The optimizer part files state.toml lists (never a directory listing), or, format 1, those present.
std::vector<std::string> optim_files(const std::string& dir) {
    std::vector<std::string> files;
    const StateFile sf = read_state_file(dir);
    for (const PartInfo& f : sf.files)
        if (f.name.rfind("optim_", 0) == 0) files.push_back((fs::path(dir) / f.name).string());
    if (sf.version < 2) {
        std::error_code ec;
        for (const auto& e : fs::directory_iterator(dir, ec)) {
            const std::string n = e.path().filename().string();
            if (n.rfind("optim_", 0) == 0 && e.path().extension() == ".h5") files.push_back(e.path().string());
        }
    }
    std::sort(files.begin(), files.end());
    if (files.empty()) throw CheckpointError("checkpoint '" + dir + "': no shard file");
    return files;
}

/// A 1-D piece of a tensor in one part file: whole-tensor elements [lo, hi).
struct Piece {
    size_t lo, hi, file;
};

}  // namespace

void read_params_ranges(const std::string& dir, const ParamLayout& layout, const std::vector<FlatRange>& ranges,
                        float* params) {
    const fs::path p = fs::path(dir) / "model.h5";
    std::error_code ec;
    if (!fs::is_regular_file(p, ec)) throw CheckpointError("checkpoint '" + dir + "': missing model.h5");
    const std::string file = p.string();
    std::fill(params, params + total_of(ranges), 0.0f);
    h5::Handle f = open_file(file);
    const std::vector<Need> needs = needs_of(layout, ranges);
    for (size_t i = 0; i < needs.size();) {
        const ParamTensor& t = layout.tensors()[needs[i].tensor];
        std::vector<hsize_t> dims;
        h5::Handle ds = open_dataset(f.get(), t.name, dims, file);
        if (!ds.valid()) throw CheckpointError(file + ": tensor " + t.name + " is missing");
        const std::vector<hsize_t> want(t.full_shape.begin(), t.full_shape.end());
        if (dims != want)
            throw CheckpointError(file + ": tensor " + t.name + " has shape " + shape_str(dims) +
                                  " in the checkpoint but " + shape_str(want) + " in the model");
        for (; i < needs.size() && &layout.tensors()[needs[i].tensor] == &t; ++i)
            read_runs(ds.get(), dims, needs[i].runs, 0, params + needs[i].at, file + ": tensor " + t.name);
    }
}

void read_optim_ranges(const std::string& dir, const ParamLayout& layout, const std::vector<FlatRange>& ranges,
                       float* m, float* v) {
    const size_t total = total_of(ranges);
    std::fill(m, m + total, 0.0f), std::fill(v, v + total, 0.0f);
    const std::vector<std::string> files = optim_files(dir);
    const std::vector<Need> needs = needs_of(layout, ranges);
    std::vector<std::vector<Piece>> pieces(layout.tensors().size());  // per tensor, those that overlap a need
    for (size_t fi = 0; fi < files.size(); ++fi) {
        const std::string& file = files[fi];
        h5::Handle f = open_file(file);
        {
            h5::Lock lock;
            for (const char* g : {"m", "v"})
                if (H5Lexists(f.get(), g, H5P_DEFAULT) <= 0)
                    throw CheckpointError(file + ": group " + std::string(g) + " is missing");
        }
        for (size_t i = 0; i < needs.size();) {
            const size_t ti = needs[i].tensor;
            const ParamTensor& t = layout.tensors()[ti];
            size_t full_numel = 1;
            for (int64_t d : t.full_shape) full_numel *= size_t(d);
            const size_t first = i;
            while (i < needs.size() && needs[i].tensor == ti) ++i;
            std::vector<hsize_t> dm, dv;
            h5::Handle hm = open_dataset(f.get(), "m/" + t.name, dm, file);
            h5::Handle hv = open_dataset(f.get(), "v/" + t.name, dv, file);
            if (hm.valid() != hv.valid())
                throw CheckpointError(file + ": tensor " + t.name + " has a /" + (hm.valid() ? "m" : "v") +
                                      " piece but no /" + (hm.valid() ? "v" : "m") + " piece");
            if (!hm.valid()) continue;
            int64_t om = -1, ov = -1;
            {
                h5::Lock lock;
                for (auto [ds, off] : {std::pair{hm.get(), &om}, std::pair{hv.get(), &ov}}) {
                    h5::Handle at(h5c(H5Aopen(ds, "offset", H5P_DEFAULT), file + ": " + t.name + ": no offset attribute"));
                    h5::check_status<CheckpointError>(H5Aread(at.get(), H5T_NATIVE_INT64, off),
                                                      file + ": " + t.name + ": cannot read offset");
                }
            }
            if (dm.size() != 1 || dm != dv || om != ov)
                throw CheckpointError(file + ": tensor " + t.name + ": its /m and /v pieces differ in shape or offset");
            const size_t lo = size_t(om), hi = lo + dm[0];
            if (om < 0 || hi > full_numel)
                throw CheckpointError(file + ": " + t.name + ": piece [" + std::to_string(om) + ", +" +
                                      std::to_string(dm[0]) + ") outside the tensor's " + std::to_string(full_numel) +
                                      " elements");
            bool used = false;
            for (size_t k = first; k < i; ++k) {  // this piece's share of each need: contiguous in the output
                std::vector<TPRun> in;
                size_t out_at = 0;
                for (const TPRun& q : needs[k].runs) {
                    const size_t a = std::max(q.full, lo), b = std::min(q.full + q.count, hi);
                    if (a >= b) continue;
                    if (in.empty()) out_at = needs[k].at + (q.local + (a - q.full) - needs[k].runs.front().local);
                    in.push_back({a, 0, b - a});
                }
                if (in.empty()) continue;
                used = true;
                read_runs(hm.get(), dm, in, lo, m + out_at, file + ": m/" + t.name);
                read_runs(hv.get(), dv, in, lo, v + out_at, file + ": v/" + t.name);
            }
            if (used) pieces[ti].push_back({lo, hi, fi});
        }
    }
    // Every needed element exactly once: no two pieces overlap where they are used, and they cover it.
    for (size_t i = 0; i < needs.size();) {
        const size_t ti = needs[i].tensor;
        std::vector<Piece>& ps = pieces[ti];
        std::sort(ps.begin(), ps.end(), [](const Piece& a, const Piece& b) { return a.lo < b.lo; });
        for (size_t k = 1; k < ps.size(); ++k)
            if (ps[k].lo < ps[k - 1].hi) {
                const ParamTensor& t = layout.tensors()[ti];
                const size_t lo = ps[k].lo, hi = std::min(ps[k].hi, ps[k - 1].hi);
                const size_t at = layout.whole() ? t.offset : 0;  // flat indices at tp = ep = 1, else the tensor's
                throw CheckpointError("checkpoint '" + dir + "': " + files[ps[k - 1].file] + " and " + files[ps[k].file] +
                                      " both hold " + (layout.whole() ? "flat elements [" : "elements [") +
                                      std::to_string(at + lo) + ", " + std::to_string(at + hi) + ") (tensor " + t.name + ")");
            }
        for (; i < needs.size() && needs[i].tensor == ti; ++i)
            for (const TPRun& q : needs[i].runs) {
                size_t covered = 0;
                for (const Piece& p : ps) {
                    const size_t a = std::max(q.full, p.lo), b = std::min(q.full + q.count, p.hi);
                    if (a < b) covered += b - a;
                }
                if (covered != q.count)
                    throw CheckpointError("checkpoint '" + dir + "': the shards cover " + std::to_string(covered) +
                                          " of elements [" + std::to_string(q.full) + ", " +
                                          std::to_string(q.full + q.count) + ") of " + layout.tensors()[ti].name);
            }
    }
}

}  // namespace llmtrain
